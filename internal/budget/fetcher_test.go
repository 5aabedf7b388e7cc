package budget

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
)

// A one-shot (Within set) facing a cool-down longer than its leases gets a rate-limit error at
// once, saying how long the cool-down lasts, and sends nothing, so its pass hands the claims
// back; the daemon (Within 0) waits.
func TestFetcherEndsOnACooldownPastItsWindow(t *testing.T) {
	c := newCluster(t)
	r := c.fakeRun(t, 0)
	a := r.join(procConfig("a", 50), 0)
	r.untilOpen(a)
	ctx := context.Background()
	a.share.RateLimited(ctx, time.Minute, "test: API002")
	before := c.sim.KeyStats(marketKey).Total

	oneShot := &Fetcher{Next: c.client, Share: a.share, Within: time.Second}
	_, err := oneShot.Auction(ctx, c.item)
	var pe *provider.Error
	// The cool-down left is the share's clock's (which has not moved), not the wall clock's.
	if !errors.As(err, &pe) || pe.Class != provider.ClassRateLimited {
		t.Fatalf("one-shot during a 1 min cool-down: %v, want a rate-limit error", err)
	}
	if pe.RetryAfter != time.Minute {
		t.Fatalf("one-shot during a 1 min cool-down: Retry-After %v, want the cool-down's 1m", pe.RetryAfter)
	}

	daemon := &Fetcher{Next: c.client, Share: a.share}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		<-r.clk.waiting // the daemon's call waits out the cool-down on the share's clock
		cancel()
	}()
	if _, err := daemon.Auction(wctx, c.item); provider.ClassOf(err) != provider.ClassTransient || !errors.Is(err, context.Canceled) {
		t.Fatalf("daemon during the cool-down: %v, want it to wait until its context ends", err)
	}
	if n := c.sim.KeyStats(marketKey).Total - before; n != 0 {
		t.Fatalf("%d requests sent during the cool-down", n)
	}
}

// A one-shot whose share never opens (its budget heartbeats fail, so it never joins) gets a
// pass-ending error once its window has passed on the share's clock, instead of waiting for
// good; nothing is sent.
func TestFetcherEndsWhenTheShareDoesNotOpenWithinItsWindow(t *testing.T) {
	c := newCluster(t)
	r := c.fakeRun(t, 0)
	a := r.join(procConfig("a", 50), 0) // never run: no heartbeat, so never ready
	oneShot := &Fetcher{Next: c.client, Share: a.share, Within: time.Second}
	done := make(chan error, 1)
	go func() {
		_, err := oneShot.Auction(context.Background(), c.item)
		done <- err
	}()
	<-r.clk.waiting // the wait for the share to open, bounded by the window past the join delay
	r.clk.Advance(time.Second + 3*procConfig("a", 50).Heartbeat)
	err := <-done
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Class != provider.ClassRateLimited || !strings.Contains(err.Error(), "has not joined the key's shared budget") {
		t.Fatalf("one-shot whose share never opens: %v, want a pass-ending error saying it has not joined", err)
	}
	if n := c.sim.KeyStats(marketKey).Total; n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// A one-shot whose budget heartbeat has gone stale (the others may already count it out of the
// key's budget) does not wait a quarter heartbeat at a time for good: when the wait would pass
// its window, it gets a pass-ending error saying why, and sends nothing.
func TestFetcherEndsWhenItsHeartbeatIsStale(t *testing.T) {
	c := newCluster(t)
	r := c.fakeRun(t, 0)
	a := r.join(procConfig("a", 50), 0)
	r.untilOpen(a)
	a.gone = true // its heartbeats stop (the database refuses them, say): nothing else changes
	r.clk.Advance(3 * hb)
	before := c.sim.KeyStats(marketKey).Total
	oneShot := &Fetcher{Next: c.client, Share: a.share, Within: hb}
	done := make(chan error, 1)
	go func() {
		_, err := oneShot.Auction(context.Background(), c.item)
		done <- err
	}()
	// It waits a quarter heartbeat at a time on the share's clock, each wait advanced here,
	// until the next would pass its window: four waits, not forty.
	var err error
	for waits := 0; err == nil; {
		select {
		case err = <-done:
		case <-r.clk.waiting:
			if waits++; waits == 40 {
				t.Fatal("the one-shot keeps waiting with a stale heartbeat instead of ending")
			}
			r.clk.Advance(hb / 4)
		}
	}
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Class != provider.ClassRateLimited || !strings.Contains(err.Error(), "budget heartbeat is failing") {
		t.Fatalf("one-shot with a stale heartbeat: %v, want a pass-ending error saying its heartbeat fails", err)
	}
	if n := c.sim.KeyStats(marketKey).Total - before; n != 0 {
		t.Fatalf("%d requests sent", n)
	}
}

// untilOpen runs until p's share has joined the key's budget and opened.
func (r *fakeRun) untilOpen(p *proc) {
	r.t.Helper()
	r.until(15*time.Second, "the share open", func() bool {
		select {
		case <-p.share.ready:
			return true
		default:
			return false
		}
	})
}
