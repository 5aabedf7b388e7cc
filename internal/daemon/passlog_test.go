package daemon

import (
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/dispatcher"
)

// A daemon passing every second writes its first pass at once, then one line a minute summing
// the passes since, not a line each.
func TestPassesAreSummedOnceAMinute(t *testing.T) {
	core, logs := zapobserver.New(zapcore.InfoLevel)
	log := zap.New(core)
	var p passLog
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	pass := dispatcher.Summary{Claimed: 10, Collected: 9, Failed: 1, Duration: 500 * time.Millisecond}
	for i := range 121 { // two minutes of a pass a second
		p.add(log, pass, t0.Add(time.Duration(i)*time.Second))
	}
	lines := logs.FilterMessage("collection passes").All()
	if len(lines) != 3 {
		t.Fatalf("%d lines for 121 passes over two minutes, want 3 (the first, then one a minute)", len(lines))
	}
	if f := lines[1].ContextMap(); f["passes"] != int64(60) || f["collected"] != int64(540) || f["failed"] != int64(60) {
		t.Fatalf("the first minute's line: %v; want 60 passes, 540 collected, 60 failed", f)
	}
	// At a stop, the passes summed since the last line are written.
	p.add(log, pass, t0.Add(121*time.Second))
	p.flush(log, t0.Add(122*time.Second))
	p.flush(log, t0.Add(123*time.Second)) // nothing more to say
	if lines := logs.FilterMessage("collection passes").All(); len(lines) != 4 || lines[3].ContextMap()["passes"] != int64(1) {
		t.Fatalf("after a pass and the stop: %d lines, want 4, the last of one pass", len(lines))
	}
}
