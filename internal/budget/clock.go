package budget

import (
	"context"
	"time"
)

// Clock is the time the share's rate arithmetic and waits run on: the wall clock in
// production, one a test advances. Liveness (collector_instances) and cool-downs
// (budget_cooldowns) stay on the database's clock, which every process shares.
type Clock interface {
	Now() time.Time
	// After is time.After on this clock.
	After(d time.Duration) <-chan time.Time
}

// Wall is the real clock.
var Wall Clock = wall{}

// realTime is a clock that runs at the wall clock's pace, whatever its offset (Wall, or a test's
// skewed host): the share counts its quota's seconds on the database's clock through it. A
// clock a test moves by hand is left as it is.
type realTime interface{ realTime() }

type wall struct{}

func (wall) realTime() {}

func (wall) Now() time.Time                         { return time.Now() }
func (wall) After(d time.Duration) <-chan time.Time { return time.After(d) }

// sleep waits d on the share's clock; false when ctx ends first.
func (s *Share) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	select {
	case <-ctx.Done():
		return false
	case <-s.clock.After(d):
		return true
	}
}
