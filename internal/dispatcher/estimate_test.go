package dispatcher

import (
	"context"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// Against the realistic market, rounds of collection at simulated times: the collector's gap
// count per item is the simulator's count of fetches that lost sales, and its change counts
// are the rounds in which the listings changed or new sales arrived.
func TestGapsAndChangesMatchTheMarketsGroundTruth(t *testing.T) {
	// Not parallel: its passes are heavy, and beside the other tests on a loaded 2-core machine
	// they outlast the leases and schedules it checks.
	t.Run("alone", func(t *testing.T) { gapsAndChanges(t, Config{}) })
	// Items that sold little share calls; one that sells a page's worth between two collections
	// is fetched alone again, and that fetch's gap counts too.
	t.Run("packed", func(t *testing.T) { gapsAndChanges(t, Config{PackSize: 10, PackMaxListings: 100, PackMaxSales: 5}) })
}

func gapsAndChanges(t *testing.T, cfg Config) {
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	var simNow atomic.Int64
	simNow.Store(start.UnixMilli())
	sim := neoplesim.New(neoplesim.Options{Items: 400, Seed: 5, ItemKey: itemKey, MarketKey: marketKey,
		Market: market.Realistic, Now: func() time.Time { return time.UnixMilli(simNow.Load()) }})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	client, err := provider.NewClient(provider.ClientConfig{Workload: provider.WorkloadMarket, BaseURL: srv.URL,
		Key: marketKey, Rate: 100000, Burst: 10000, PerMinute: 10000000})
	if err != nil {
		t.Fatal(err)
	}
	// The busiest sellers (where gaps happen) and a sample of the rest.
	truths := sim.Market().Truths()
	var ids []string
	var tracked []storetest.Item
	for i, it := range sim.Catalog() {
		if truths[it.ItemID].SalesPerHour > 200 || i%10 == 0 {
			ids = append(ids, it.ItemID)
			tracked = append(tracked, storetest.Item{ID: it.ItemID, Name: it.ItemName, Tier: tiers.Hot})
		}
	}
	storetest.Items(t, pool, tracked...)
	cfg.BatchSize, cfg.Concurrency = 1000, 8
	d, err := New(pool, client, configured(pool, cfg), nil)
	if err != nil {
		t.Fatal(err)
	}
	collect := func() {
		t.Helper()
		if _, err := pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now()`); err != nil {
			t.Fatal(err)
		}
		s, err := d.RunOnce(ctx)
		if err != nil || s.Collected != len(ids) {
			t.Fatalf("pass: %+v, %v", s, err)
		}
	}
	collect()
	sim.ResetStats() // the simulator's window starts where the collector has a watermark
	steps := []time.Duration{40 * time.Second, 7 * time.Minute, 2 * time.Minute, 25 * time.Minute, 30 * time.Second, 13 * time.Minute}
	prev := start
	wantChanges := map[string]int{}
	hadSale := map[string]bool{}
	for _, id := range ids {
		_, s, _ := sim.Market().Events(id, start.Add(-30*24*time.Hour), start)
		hadSale[id] = s > 0
	}
	for _, step := range steps {
		now := prev.Add(step)
		simNow.Store(now.UnixMilli())
		collect()
		for _, id := range ids {
			c, s, _ := sim.Market().Events(id, prev, now)
			if s == 100 && hadSale[id] {
				t.Fatalf("item %s had exactly 100 sales in a round: the page cannot tell that from a loss; pick other steps", id)
			}
			if c > 0 || s > 0 {
				wantChanges[id]++
			}
			hadSale[id] = hadSale[id] || s > 0
		}
		prev = now
	}
	rep := sim.Scorer().Report()
	if rep.Gaps == 0 {
		t.Fatal("no sales were lost: the test proves nothing")
	}
	rows, err := pool.Query(ctx, `SELECT item_id, sales_gaps, est_collections, est_changes, seen_listing_count FROM tracked_items`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var total int64
	for rows.Next() {
		var id string
		var gaps int64
		var n, x float64
		var listings int
		if err := rows.Scan(&id, &gaps, &n, &x, &listings); err != nil {
			t.Fatal(err)
		}
		total += gaps
		if want := rep.Items[id].Gaps; gaps != want {
			t.Errorf("item %s: collector counted %d gaps, the simulator saw %d", id, gaps, want)
		}
		if int(n+0.5) != len(steps) {
			t.Errorf("item %s: %.3f collections observed, want %d", id, n, len(steps))
		}
		// Listing-free items can only show changes through sales; the rest changed when the market did.
		if listings > 0 && int(x+0.5) != wantChanges[id] {
			t.Errorf("item %s: %.3f changes detected, the market changed in %d rounds", id, x, wantChanges[id])
		}
	}
	if total != rep.Gaps {
		t.Errorf("collector counted %d gaps, the simulator %d", total, rep.Gaps)
	}
	if n := count(t, pool, `SELECT count(*) FROM outbox WHERE (payload->>'sales_gap')::bool`); int64(n) != rep.Gaps {
		t.Errorf("%d snapshot events say sales_gap, the simulator saw %d gaps", n, rep.Gaps)
	}
}

func TestClaimLimitCapsEachClaim(t *testing.T) {
	e := setup(t, 20, tiers.Cold, nil)
	d := e.dispatcher(t, Config{BatchSize: 100, MaxBatches: 1, ClaimLimit: func() int { return 3 }}, nil)
	s, err := d.RunOnce(context.Background())
	if err != nil || s.Claimed != 3 {
		t.Fatalf("one batch under a claim limit of 3: %+v, %v", s, err)
	}
	d = e.dispatcher(t, Config{BatchSize: 100, MaxBatches: 1, ClaimLimit: func() int { return 0 }}, nil)
	if s, err := d.RunOnce(context.Background()); err != nil || s.Claimed != 1 {
		t.Fatalf("a limit below 1 still claims one: %+v, %v", s, err)
	}
}

// A pass that has claimed for Config.Span ends, items still due: through a backlog a daemon's
// pass would otherwise never end, and the cost loop learns only when one does.
func TestAPassEndsAfterItsSpan(t *testing.T) {
	e := setup(t, 20, tiers.Cold, nil)
	d := e.dispatcher(t, Config{BatchSize: 5, Span: time.Nanosecond}, nil)
	s, err := d.RunOnce(context.Background())
	if err != nil || s.Stop != StopSpan || s.Claimed != 5 || s.Batches != 1 {
		t.Fatalf("a pass past its span: %+v, %v; want one batch of 5, stopped for its span", s, err)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE next_collect_at <= now()`); n != 15 {
		t.Fatalf("%d items still due, want the 15 the pass left to the next", n)
	}
}
