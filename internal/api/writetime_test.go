package api

import (
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/httpserve"
)

// A large answer gets time for its size beyond the server's write timeout: a full /latest of
// 35 MB to a slow line would otherwise be cut off mid-body.
func TestALargeAnswerHasTimeForItsSize(t *testing.T) {
	if got := writeTime(1 << 10); got != httpserve.WriteTimeout {
		t.Errorf("a small answer: %s, want the server's %s", got, httpserve.WriteTimeout)
	}
	if got := writeTime(35 << 20); got < httpserve.WriteTimeout+9*time.Minute {
		t.Errorf("35 MB: %s, want time to send it at 64 kB/s", got)
	}
}
