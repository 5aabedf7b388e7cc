package dispatcher

import (
	"strings"
	"testing"
)

// Summaries and logs print a stop reason as the text operators and tools have always read.
func TestStopReasonsPrintTheirTexts(t *testing.T) {
	for r, want := range map[StopReason]string{
		StopNone: "", StopNothingDue: "nothing due", StopMaxBatches: "max batches", StopInterrupted: "interrupted",
		StopPaused: "paused", StopMaintenance: "maintenance", StopRateLimited: "rate_limited", StopKeyRefused: "config",
		StopEndpoint: "endpoint",
	} {
		if got := r.String(); got != want {
			t.Errorf("StopReason(%d) prints %q, want %q", int(r), got, want)
		}
	}
	if s := (Summary{Stop: StopMaxBatches}).String(); !strings.Contains(s, ` stop="max batches" `) {
		t.Errorf("summary line %q does not quote the stop reason", s)
	}
}
