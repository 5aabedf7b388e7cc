package dispatcher

import (
	"strings"
	"testing"
	"time"
)

// Summaries and logs print a stop reason as the text operators and tools have always read.
func TestStopReasonsPrintTheirTexts(t *testing.T) {
	for r, want := range map[StopReason]string{
		StopNone: "", StopNothingDue: "nothing due", StopMaxBatches: "max batches", StopInterrupted: "interrupted",
		StopPaused: "paused", StopMaintenance: "maintenance", StopRateLimited: "rate_limited", StopKeyRefused: "config",
		StopEndpoint: "endpoint", StopSpan: "span",
	} {
		if got := r.String(); got != want {
			t.Errorf("StopReason(%d) prints %q, want %q", int(r), got, want)
		}
	}
	if s := (Summary{Stop: StopMaxBatches}).String(); !strings.Contains(s, ` stop="max batches" `) {
		t.Errorf("summary line %q does not quote the stop reason", s)
	}
}

// A pass's timings stay bounded however long it claims (a backlog): past timingSamples a
// uniform sample is kept, and the count is still every one.
func TestTimingsStayBounded(t *testing.T) {
	var tm timings
	for i := range 100_000 {
		tm.add(&tm.fetch, time.Duration(i%1000)*time.Millisecond)
	}
	if len(tm.fetch.kept) != timingSamples {
		t.Fatalf("%d timings kept, want at most %d", len(tm.fetch.kept), timingSamples)
	}
	got := summarize(tm.fetch)
	if got.N != 100_000 || got.P50 < 400*time.Millisecond || got.P50 > 600*time.Millisecond {
		t.Fatalf("summary %+v: want all 100000 counted and the median near 500ms", got)
	}
}
