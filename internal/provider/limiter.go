package provider

import (
	"context"
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

// window remembers the times of the last n grants in a ring; the oldest sits at next. A new
// grant is allowed once the oldest is a full span old, so any span holds at most n grants.
type window struct {
	mu    sync.Mutex
	span  time.Duration
	times []time.Time
	next  int
	now   func() time.Time
}

func newWindow(n int, span time.Duration, now func() time.Time) *window {
	return &window{span: span, times: make([]time.Time, max(n, 1)), now: now}
}

// reserve grants a request at now and returns 0, or returns how long until one can be granted.
func (w *window) reserve(now time.Time) time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	if oldest := w.times[w.next]; !oldest.IsZero() {
		if d := oldest.Add(w.span).Sub(now); d > 0 {
			return d
		}
	}
	w.times[w.next] = now
	w.next = (w.next + 1) % len(w.times)
	return 0
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
