package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
	"github.com/duecollector/duecollector/internal/store/storetest"
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

// On a budget of a few requests a second the claims are small and the most urgent tier is
// claimed on its own between them. Items of that tier falling due apart must still share
// calls: a claim is never smaller than a packed call's worth, and a HOT-only claim always has
// room for a full claim (budget.Loop.ClaimRequests, dispatcher's mayClaim; each has its own
// unit test, and either alone keeps this one green).
func TestATightBudgetStillSharesCalls(t *testing.T) {
	const want = 60
	e := newEnv(t, 400, neoplesim.Options{Market: market.Realistic})
	e.fullPages = true
	// One item falling due each 20 ms, 50 a second at 0.2 requests: 10 req/s, over twice what
	// 4 req/s buys.
	storetest.Items(t, e.pool, e.smallQuiet(t, want, 0, 20*time.Millisecond)...)
	cfg := testConfig()
	cfg.Dispatch.PackSize, cfg.Dispatch.PackMaxListings, cfg.Dispatch.PackMaxSales = 10, 100, 5
	cfg.Market = config.WorkloadLimits{Rate: 4, Burst: 4, PerMinute: 240}
	cfg.Daemon.Notify = true
	cfg.signals.passed.Init(t)
	e.sim.ResetStats()
	e.start(t, cfg, nil)
	waitCollected(t, cfg, e.pool, want)
	// Each claim statement stamps its items with its own now(): ten to a claim is 6 claims.
	// Claims of one horizon of budget (1 request, 5 items) and HOT-only slivers of room (one
	// item each) made 24. What shares a call is then the completeness rule's (a cut
	// sales answer sends items alone), logged for information.
	claims := count(t, e.pool, `SELECT count(DISTINCT last_claimed_at) FROM tracked_items`)
	t.Logf("%d claims, %d requests for %d collections", claims, e.sim.KeyStats(marketKey).Total, want)
	if claims > want/cfg.Dispatch.PackSize+3 {
		t.Errorf("%d claims took %d items on a tight budget, want at most %d: too few items in each to fill a packed call",
			claims, want, want/cfg.Dispatch.PackSize+3)
	}
}

// smallQuiet is n tracked HOT items of the realistic market known small and quiet from earlier
// collections (their size and newest sale stored) and planned at a packed call's tenth each,
// as the plan service stores requests_per_collection; the first due after first, each every
// later.
func (e *env) smallQuiet(t *testing.T, n int, first, every time.Duration) []storetest.Item {
	t.Helper()
	truths, newest := e.sim.Market().Truths(), e.newestSale(t)
	var rows []storetest.Item
	for _, it := range e.items {
		tr := truths[it.ItemID]
		if tr.Listings > 20 || tr.SalesPerHour > 60 || len(rows) == n {
			continue
		}
		listings := int32(tr.Listings)
		rows = append(rows, storetest.Item{ID: it.ItemID, Name: it.ItemName, Tier: tiers.Hot, SeenListingCount: &listings,
			LastSaleAt: newest(it.ItemID), Requests: 0.2, NextCollectAt: storetest.In(first + time.Duration(len(rows))*every)})
	}
	if len(rows) < n {
		t.Fatalf("only %d small quiet items among %d; the market model changed", len(rows), len(e.items))
	}
	return rows
}

// newestSale returns, for an item of the simulator, the time of its newest sale as a
// collection would have stored it (NULL without one).
func (e *env) newestSale(tb testing.TB) func(itemID string) storetest.Time {
	tb.Helper()
	client, err := provider.NewClient(provider.ClientConfig{Workload: provider.WorkloadMarket, BaseURL: e.srv.URL, Key: marketKey,
		Rate: 1e6, Burst: 1e6, PerMinute: 1e9, SoldLimit: 1})
	if err != nil {
		tb.Fatal(err)
	}
	return func(itemID string) storetest.Time {
		a, err := client.AuctionSold(context.Background(), itemID)
		if err != nil {
			tb.Fatal(err)
		}
		if len(a.Rows) == 0 {
			return storetest.Null()
		}
		return storetest.At(a.Rows[0].SoldAt)
	}
}
