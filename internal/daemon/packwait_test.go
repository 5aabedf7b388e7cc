package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
	"github.com/duecollector/duecollector/internal/tiers"
)

// A steady daemon sees items fall due a few milliseconds apart. Without daemon.pack_wait each
// pass would claim the one or two items due at that instant and pack almost nothing; with it
// they gather and share calls, claimed up to a pack_wait ahead so that gathering does not make
// them late.
func TestItemsFallingDueApartShareCalls(t *testing.T) {
	const n = 200
	ctx := context.Background()
	e := newEnv(t, n, neoplesim.Options{Market: market.Realistic})
	e.fullPages = true
	e.track(t, 0, n, tiers.Hot, 0)
	cfg := testConfig()
	cfg.Dispatch.PackSize, cfg.Dispatch.PackMaxListings, cfg.Dispatch.PackMaxSales = 10, 100, 5
	cfg.Daemon.Notify = true
	cfg.signals.passed.Init(t)
	e.start(t, cfg, nil)
	// The first collection of each item is alone: nothing is known of its size yet.
	waitCollected(t, cfg, e.pool, n)
	small := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE seen_listing_count <= 100`)
	if small < n/2 {
		t.Fatalf("only %d of %d items have at most 100 listings; the market model changed", small, n)
	}
	// Then they fall due one by one, 15 ms apart, as phase-pinned slots spread them.
	var mark time.Time
	if err := e.pool.QueryRow(ctx, `SELECT now()`).Scan(&mark); err != nil {
		t.Fatal(err)
	}
	e.sim.ResetStats()
	if _, err := e.pool.Exec(ctx, `
		UPDATE tracked_items t SET next_collect_at = now() + o.i * interval '15 milliseconds'
		FROM (SELECT item_id, row_number() OVER (ORDER BY item_id) AS i FROM tracked_items) o
		WHERE t.item_id = o.item_id`); err != nil {
		t.Fatal(err)
	}
	waitPasses(t, cfg, "every item collected again", func() bool {
		return count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_collected_at > $1`, mark) == n
	})
	reqs := e.sim.KeyStats(marketKey).Total
	// They gather ahead of their due time (daemon.pack_wait), not after it: without claiming
	// ahead no claim precedes its due time, and every item waits up to a pack_wait. (Most are
	// early on a quiet machine; on a loaded one a pass can outlast the pack_wait and the items
	// due meanwhile are claimed late, so only a share is required.)
	early := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_claimed_at < last_due_at`)
	tooEarly := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_claimed_at < last_due_at - $1 * interval '1 millisecond'`,
		cfg.Daemon.PackWait.Milliseconds())
	again := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE next_collect_at < last_due_at + interval '27 seconds'`)
	if early < n/20 || tooEarly > 0 || again > 0 {
		t.Errorf("%d of %d items claimed before their due time (want at least %d), %d more than a pack_wait early (want 0), %d due again within half an interval of the slot they were claimed for (want 0)",
			early, n, n/20, tooEarly, again)
	}
	// Alone every collection costs 2; the small half packed ten to a call costs 0.2 each.
	t.Logf("%d requests for %d collections", reqs, n)
	if perItem := float64(reqs) / n; perItem > 1.0 {
		t.Errorf("%d requests for %d collections (%.2f each, %d items small): items falling due apart did not share calls", reqs, n, perItem, small)
	}
}
