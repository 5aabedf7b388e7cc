package dispatcher

import (
	"sync"
	"time"
)

// dbClock tells the database's time without asking it every time: it is anchored to now()
// as returned by each claim, and advanced by the host's monotonic clock in between. Host
// wall-clock skew therefore never moves a schedule.
type dbClock struct {
	mu     sync.Mutex
	anchor time.Time // database now() at the last anchoring
	mono   time.Time // host time (with monotonic reading) at the same moment
}

func (c *dbClock) set(dbNow time.Time) {
	c.mu.Lock()
	c.anchor, c.mono = dbNow, time.Now()
	c.mu.Unlock()
}

func (c *dbClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.anchor.IsZero() {
		panic("dbClock used before the first claim anchored it")
	}
	// In the database's own precision: a collection instant is stored and published as the
	// same value, so an event's collected_at is exactly the next one's previous_snapshot_at.
	return c.anchor.Add(time.Since(c.mono)).Truncate(time.Microsecond)
}
