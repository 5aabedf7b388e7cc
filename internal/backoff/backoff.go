// Package backoff is the one retry delay used everywhere: it doubles from Min with each
// consecutive failure up to Max, optionally jittered.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Policy is a doubling delay. Jitter picks a point in the upper half of the delay, so
// processes restarted together do not retry in lockstep.
type Policy struct {
	Min, Max time.Duration
	Jitter   bool
}

// Delay is the wait after the given number of consecutive failures (1 for the first):
// Min·2^(failures-1), at most Max.
func (p Policy) Delay(failures int) time.Duration {
	d := p.Min
	for i := 1; i < failures && d < p.Max; i++ {
		d *= 2
	}
	d = min(d, p.Max)
	if p.Jitter && d > 0 {
		d = d/2 + rand.N(d/2+1)
	}
	return d
}

// Sleep waits d or until ctx ends, whichever is first; it reports whether the full wait passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
