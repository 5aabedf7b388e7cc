package console

import (
	"net/http"
	"sync/atomic"
	"time"
)

// MaxReads is how many console requests read the database at once. Read pages need no login,
// so a console reached by more than its operators (or one script polling chart.json) could
// otherwise take every pooled connection, and collection's write-backs wait for one. The
// overview reads its refreshed copy, so it takes no slot; actions are logged-in and few.
const MaxReads = 2

// readWait bounds a request's wait for a slot; past it the answer is 503 with Retry-After,
// rather than a request queued without end behind slow ones.
var readWait atomic.Int64

func init() { readWait.Store(int64(5 * time.Second)) }

// slotted runs h holding one of the console's read slots.
func (c *Console) slotted(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		t := time.NewTimer(time.Duration(readWait.Load()))
		defer t.Stop()
		select {
		case c.readSlots <- struct{}{}:
			defer func() { <-c.readSlots }()
			h(w, r)
		case <-r.Context().Done():
		case <-t.C:
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Cache-Control", "no-store")
			http.Error(w, "the console's database reads are all busy; try again in a moment", http.StatusServiceUnavailable)
		}
	}
}
