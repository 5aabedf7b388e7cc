package dispatcher

import (
	"sync"
	"time"

	"go.uber.org/zap"
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

// skewWarn is how far the provider's clock may be from the database's before it is logged:
// sales settle on the provider's clock either way (provider.Answer.AnsweredAt), but a day's
// export counts as caught up a minute past its end by the database's (export.CaughtUpAfter),
// which a provider trailing by more leaves short of its last sales.
const skewWarn = 30 * time.Second

// skewLog warns, at most once an hour, of a provider clock skewWarn or more from the
// database's.
type skewLog struct {
	mu     sync.Mutex
	logged time.Time
}

// seen takes one answer's skew (its Date less the database's time before the call).
func (s *skewLog) seen(log *zap.Logger, skew time.Duration, now time.Time) {
	if skew.Abs() < skewWarn {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.logged.IsZero() && now.Sub(s.logged) < time.Hour {
		return
	}
	s.logged = now
	log.Warn("the provider's clock is off the database's: sales settle on the provider's, but a day's export counts as caught up a minute past its end by the database's and may miss its last sales",
		zap.Duration("provider_ahead_seconds", skew))
}
