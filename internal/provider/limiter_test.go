package provider

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

func TestWindowReserve(t *testing.T) {
	start := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	w := newWindow(3, time.Minute, nil)
	at := func(d time.Duration) time.Duration { return w.reserve(start.Add(d)) }
	for _, d := range []time.Duration{0, time.Second, 2 * time.Second} {
		if wait := at(d); wait != 0 {
			t.Fatalf("grant %s refused (wait %s)", d, wait)
		}
	}
	// Full: the first grant's slot (100 ms wide) leaves the window 60.1 s after it began.
	if wait := at(3 * time.Second); wait != 57100*time.Millisecond {
		t.Fatalf("4th in the minute: wait %s, want 57.1s", wait)
	}
	if wait := at(60 * time.Second); wait != 100*time.Millisecond {
		t.Fatalf("at 60 s the first grant's slot still counts: wait %s, want 100ms", wait)
	}
	if wait := at(60100 * time.Millisecond); wait != 0 {
		t.Fatalf("once the first slot left the window: wait %s", wait)
	}
	if wait := at(60200 * time.Millisecond); wait != 900*time.Millisecond {
		t.Fatalf("second grant's slot leaves at 61.1 s: wait %s, want 900ms", wait)
	}
}

// A token bucket with burst=n lets 2n through in the minute after an idle one; the window
// must never let more than n into any 60 s span, whatever the arrival pattern.
func TestWindowNeverExceedsBudget(t *testing.T) {
	const n = 20
	start := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	w := newWindow(n, time.Minute, nil)
	r := rand.New(rand.NewPCG(1, 2))
	now := start
	var granted []time.Time
	for range 5000 {
		now = now.Add(time.Duration(r.Int64N(int64(time.Second)))) // ~120 arrivals a minute
		if w.reserve(now) == 0 {
			granted = append(granted, now)
		}
	}
	// Conservative by at most one 100 ms slot: close to n grants a minute under pressure.
	if want := int(0.95 * n * now.Sub(start).Minutes()); len(granted) < want {
		t.Fatalf("only %d grants in %s, want >= %d: the window is too strict", len(granted), now.Sub(start), want)
	}
	for i := n; i < len(granted); i++ {
		if span := granted[i].Sub(granted[i-n]); span < time.Minute {
			t.Fatalf("%d grants within %s", n+1, span)
		}
	}
}

func TestWindowWaitGivesUpBeforeDeadline(t *testing.T) {
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	w := newWindow(1, time.Minute, func() time.Time { return now })
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if err := w.wait(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	var be *budgetError
	if err := w.wait(short); !errors.As(err, &be) || be.after != time.Minute+100*time.Millisecond {
		t.Fatalf("want a budget error with 1m to wait, got %v", err)
	}
}

func TestSetRateFactor(t *testing.T) {
	c, err := NewClient(ClientConfig{Workload: WorkloadMarket, BaseURL: "http://127.0.0.1:1", Key: "k", Rate: 100})
	if err != nil {
		t.Fatal(err)
	}
	for f, want := range map[float64]float64{0.5: 50, 2: 100, 0: 1, 1: 100} {
		c.SetRateFactor(f)
		if got := c.Stats().Rate; got != want {
			t.Errorf("SetRateFactor(%v): rate %v, want %v", f, got, want)
		}
	}
}
