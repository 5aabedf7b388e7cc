package daemon

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// What history stored of a write-back reaches the snapshot counters by reason, and the
// collections seen unchanged their own counter.
func TestStoredSnapshotsAndUnchangedCollectionsAreCounted(t *testing.T) {
	o := &observer{m: telemetry.NewMetrics()}
	o.Stored(map[history.Reason]int{history.First: 2, history.Change: 3, history.Skip: 7})
	o.Stored(map[history.Reason]int{history.Heartbeat: 1, history.Skip: 1})
	for reason, want := range map[history.Reason]float64{history.First: 2, history.Change: 3, history.Heartbeat: 1} {
		if got := testutil.ToFloat64(o.m.SnapshotsWritten.WithLabelValues(string(reason))); got != want {
			t.Errorf("snapshots written %s = %v, want %v", reason, got, want)
		}
	}
	if got := testutil.ToFloat64(o.m.Unchanged); got != 8 {
		t.Errorf("collections unchanged = %v, want 8", got)
	}
}
