package telemetry

import (
	"time"

	"go.uber.org/zap"
)

// Streak logs a retried step's failures without repeating itself: the first failure of a
// streak at warn, then one line a minute while it lasts (with how many failed meanwhile), and
// its end at info. A loop retrying every second through a database outage otherwise logs the
// same error once a second per instance. Used by one goroutine, the loop's.
type Streak struct {
	Log  *zap.Logger
	What string // "provider health check failed", without the retry's wording

	since, logged time.Time
	failed        int
}

// streakRepeat is how often a failure that lasts is logged again.
const streakRepeat = time.Minute

// Failed records a failure at now and logs it when the streak starts or a minute passed.
func (s *Streak) Failed(now time.Time, err error, fields ...zap.Field) {
	s.failed++
	switch {
	case s.since.IsZero():
		s.since, s.logged = now, now
		s.Log.Warn(s.What+"; retrying", append(fields, zap.Error(err))...)
	case now.Sub(s.logged) >= streakRepeat:
		s.logged = now
		s.Log.Warn(s.What+"; still retrying", append(fields, zap.Int("failures", s.failed),
			zap.Duration("failing_for_seconds", now.Sub(s.since)), zap.Error(err))...)
	}
}

// Ok records a success at now, logging the end of a streak.
func (s *Streak) Ok(now time.Time, fields ...zap.Field) {
	if s.since.IsZero() {
		return
	}
	s.Log.Info(s.What+" until now; works again", append(fields, zap.Int("failures", s.failed),
		zap.Duration("failed_for_seconds", now.Sub(s.since)))...)
	s.since, s.failed = time.Time{}, 0
}
