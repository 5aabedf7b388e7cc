package backoff

import (
	"context"
	"testing"
	"time"
)

func TestDelayDoublesUpToMax(t *testing.T) {
	p := Policy{Min: 100 * time.Millisecond, Max: time.Second}
	want := []time.Duration{100, 200, 400, 800, 1000, 1000}
	for i, w := range want {
		if got := p.Delay(i + 1); got != w*time.Millisecond {
			t.Errorf("failure %d: %v, want %v", i+1, got, w*time.Millisecond)
		}
	}
	if got := p.Delay(1 << 30); got != time.Second {
		t.Errorf("a huge failure count: %v, want the ceiling", got)
	}
	if got := (Policy{Min: time.Hour, Max: 24 * time.Hour}).Delay(200); got != 24*time.Hour {
		t.Errorf("no overflow near the ceiling: %v", got)
	}
}

func TestJitterStaysInTheUpperHalf(t *testing.T) {
	p := Policy{Min: time.Second, Max: 8 * time.Second, Jitter: true}
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := p.Delay(3) // 4 s before jitter
		if d < 2*time.Second || d > 4*time.Second {
			t.Fatalf("jittered %v outside [2s, 4s]", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("only %d distinct delays: no jitter", len(seen))
	}
}

func TestSleepEndsWithTheContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if Sleep(ctx, time.Hour) {
		t.Fatal("Sleep outlasted a cancelled context")
	}
	if !Sleep(context.Background(), time.Millisecond) {
		t.Fatal("a short sleep did not complete")
	}
}
