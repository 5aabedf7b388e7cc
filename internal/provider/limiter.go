package provider

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// limiter enforces one key's two budgets. The token bucket shapes the per-second rate; the
// sliding window guarantees that no 60 s span holds more than perMinute requests, which a
// bucket cannot: with burst=perMinute it would allow twice that in the minute after an idle one.
type limiter struct {
	bucket *rate.Limiter
	base   float64
	window *window
	waited atomic.Int64 // nanoseconds spent waiting, for Stats
}

func newLimiter(perSecond float64, burst, perMinute int) *limiter {
	return &limiter{
		bucket: rate.NewLimiter(rate.Limit(perSecond), burst),
		base:   perSecond,
		window: newWindow(perMinute, time.Minute, time.Now),
	}
}

// setFactor scales the per-second rate, e.g. while the provider is recovering. The per-minute
// window stays a hard ceiling whatever the factor.
func (l *limiter) setFactor(f float64) {
	f = min(max(f, 0.01), 1)
	l.bucket.SetLimit(rate.Limit(l.base * f))
}

func (l *limiter) wait(ctx context.Context) error {
	start := time.Now()
	defer func() { l.waited.Add(int64(time.Since(start))) }()
	if err := l.bucket.Wait(ctx); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return &budgetError{what: "per-second rate"}
	}
	return l.window.wait(ctx)
}

// budgetError: the caller's deadline ends before the budget would let the request go.
type budgetError struct {
	what  string
	after time.Duration
}

func (e *budgetError) Error() string {
	return "client-side " + e.what + " budget exhausted until after the context deadline"
}

// window counts grants in slots of span/windowSlots and admits a request only while the slots
// covering the last span (plus the current partial slot) hold fewer than limit grants. Any span
// ending at a grant lies inside those slots, so no span ever holds more than limit; the price
// is being conservative by at most one slot. Memory is fixed, whatever the limit.
type window struct {
	mu     sync.Mutex
	limit  int
	slot   time.Duration
	counts []int // ring over slot indexes last-windowSlots..last
	last   int64 // newest slot index seen
	total  int
	epoch  time.Time
	now    func() time.Time
}

const windowSlots = 600

func newWindow(limit int, span time.Duration, now func() time.Time) *window {
	return &window{limit: max(limit, 1), slot: span / windowSlots, counts: make([]int, windowSlots+1), now: now}
}

// reserve grants a request at now and returns 0, or returns how long until one can be granted.
func (w *window) reserve(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.epoch.IsZero() {
		w.epoch = now
	}
	idx := max(int64(now.Sub(w.epoch)/w.slot), w.last) // a clock that steps back counts as now
	n := int64(len(w.counts))
	for i := w.last + 1; i <= idx && i <= w.last+n; i++ {
		w.total -= w.counts[i%n]
		w.counts[i%n] = 0
	}
	w.last = idx
	if w.total < w.limit {
		w.counts[idx%n]++
		w.total++
		return 0
	}
	// Full: the oldest occupied slot leaves the ring when the index reaches it plus n.
	for j := idx - n + 1; j <= idx; j++ {
		if j >= 0 && w.counts[j%n] > 0 {
			return w.epoch.Add(time.Duration(j+n) * w.slot).Sub(now)
		}
	}
	return w.slot // unreachable: a full ring has an occupied slot
}

func (w *window) wait(ctx context.Context) error {
	for {
		d := w.reserve(w.now())
		if d == 0 {
			return nil
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			return &budgetError{what: "per-minute", after: d}
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// waitToSend waits for the limiter and then for the hold. A call held back waits for the
// limiter again once released, so the calls held meanwhile go out at its pace, not at once.
func (c *Client) waitToSend(ctx context.Context, endpoint string) *Error {
	for {
		t0 := time.Now()
		err := c.lim.wait(ctx)
		if c.obs != nil {
			c.obs.Waited(c.cfg.Workload, time.Since(t0))
		}
		if err != nil {
			e := &Error{Class: ClassTransient, Endpoint: endpoint, Err: fmt.Errorf("waiting for the rate budget: %w", err)}
			var be *budgetError
			if errors.As(err, &be) {
				e.Class, e.RetryAfter = ClassRateLimited, be.after
			}
			return e
		}
		if c.hold == nil {
			return nil
		}
		held, err := c.hold(ctx)
		if err != nil {
			return &Error{Class: ClassTransient, Endpoint: endpoint, Err: fmt.Errorf("held back: %w", err)}
		}
		if !held {
			return nil
		}
	}
}
