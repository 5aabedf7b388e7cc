package budget

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/testkit"
)

// A one-shot (Within set) facing a cool-down longer than its leases gets a rate-limit error at
// once and sends nothing, so its pass hands the claims back; the daemon (Within 0) waits.
func TestFetcherEndsOnACooldownPastItsWindow(t *testing.T) {
	c := newCluster(t)
	a := c.join(t, "a", 50, 0)
	testkit.Eventually(t, 15*time.Second, "the share live", func() bool { return a.share.Stats().Live == 1 })
	ctx := context.Background()
	a.share.RateLimited(ctx, time.Minute, "test: API002")
	before := c.sim.KeyStats(marketKey).Total

	oneShot := &Fetcher{Next: c.client, Share: a.share, Within: time.Second}
	_, _, err := oneShot.Auction(ctx, c.item)
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Class != provider.ClassRateLimited || pe.RetryAfter < 30*time.Second {
		t.Fatalf("one-shot during a 1 min cool-down: %v, want a rate-limit error with the cool-down's Retry-After", err)
	}

	daemon := &Fetcher{Next: c.client, Share: a.share}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, _, err := daemon.Auction(wctx, c.item); provider.ClassOf(err) != provider.ClassTransient || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("daemon during the cool-down: %v, want it to wait until its context ends", err)
	}
	if n := c.sim.KeyStats(marketKey).Total - before; n != 0 {
		t.Fatalf("%d requests sent during the cool-down", n)
	}
}
