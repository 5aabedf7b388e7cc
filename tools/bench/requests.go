package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"time"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
)

// benchRequests measures requests per collected item with packing on and off, on the
// realistic simulated market, and checks every packed snapshot against the snapshot the same
// item got fetched alone at the same simulated instant.
func benchRequests(ctx context.Context, e *env, sz sizes, rep *report) error {
	items, rounds := 2_000, 6
	if sz.daemonWindow == 0 {
		items, rounds = 300, 4
	}
	on, err := requestsRun(ctx, e, items, rounds, 10)
	if err != nil {
		return fmt.Errorf("packing on: %w", err)
	}
	off, err := requestsRun(ctx, e, items, rounds, 1)
	if err != nil {
		return fmt.Errorf("packing off: %w", err)
	}
	incomplete := 0
	for k, v := range on.snapshots {
		if w, ok := off.snapshots[k]; !ok || w != v {
			incomplete++
		}
	}
	how := fmt.Sprintf("in-process collect-due passes (dispatcher.RunOnce, batch 500, concurrency 16) over %s tracked items on `collector-dev sim --market realistic` (simulated clock, +10 min between passes, the database's last collection moved back with it, every item made due each pass; %.0f%% of items had under 20 listings at their first collection), %d passes after a first one in which every item is fetched alone; requests = what the simulator served",
		count(items), 100*on.thinShare, rounds-1)
	rep.add("Requests per collected item, packing on (collect.pack_size 10) / off",
		fmt.Sprintf("%.2f / %.2f (%d of %d snapshots from packed answers)", on.perItem(), off.perItem(), on.packed, on.collected),
		how+"; target ≤ 0.5 with packing on")
	rep.add("Packed snapshots that differ from the single-item run / shadow-verification mismatches",
		fmt.Sprintf("%d / %d", incomplete, on.mismatches),
		"same runs: each snapshot (item, pass) of the packing run compared with the packing-off run's (listing count, lowest and median unit price, quantity, new sales count and volume); mismatches = endpoints switched off by shadow verification (packing.ShadowFractionDefault, 1 %)")
	return nil
}

type requestsResult struct {
	requests, collected, packed int64
	mismatches                  int
	thinShare                   float64
	snapshots                   map[[2]string]string // (item, pass) → its figures
}

func (r requestsResult) perItem() float64 { return float64(r.requests) / float64(max(r.collected, 1)) }

func requestsRun(ctx context.Context, e *env, items, rounds, packSize int) (requestsResult, error) {
	res := requestsResult{snapshots: map[[2]string]string{}}
	db := fmt.Sprintf("bench_requests_%d", packSize)
	u, err := e.freshDB(ctx, db, true)
	if err != nil {
		return res, err
	}
	defer e.dropDB(ctx, db)
	pool, err := openPool(ctx, u, 8)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	var now atomic.Int64
	now.Store(time.Date(2026, 5, 1, 12, 0, 0, 0, provider.KST).Unix())
	rs, err := newRealisticSim(items, 17, &now)
	if err != nil {
		return res, err
	}
	defer rs.close()
	sim, client, ids := rs.sim, rs.client, rs.ids
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		SELECT id, 'item ' || id, 'COLD_10M', now() FROM unnest($1::text[]) AS id`, ids); err != nil {
		return res, err
	}
	dc := dispatcher.FromConfig(config.Default())
	dc.BatchSize, dc.Concurrency, dc.Owner = 500, 16, db
	dc.PackSize, dc.PackMaxListings, dc.PackMaxSales, dc.ShadowFraction = packSize, 100, 5, 0.01
	// Every collection's snapshot, so the packing run's can be compared with the other's.
	dc.History.Every = true
	d, err := newDispatcher(pool, client, dc)
	if err != nil {
		return res, err
	}
	for round := range rounds {
		now.Add(600)
		// The database sees the same ten minutes pass as the simulated market: the last
		// collection ten minutes ago, so observed intervals (and sales rates) are market time.
		if _, err := pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second',
			last_collected_at = CASE WHEN last_collected_at IS NOT NULL THEN now() - interval '600 seconds' END`); err != nil {
			return res, err
		}
		sim.ResetStats()
		s, err := d.RunOnce(ctx)
		if err != nil {
			return res, err
		}
		if round == 0 {
			var thin int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM tracked_items WHERE seen_listing_count < 20`).Scan(&thin); err != nil {
				return res, err
			}
			res.thinShare = float64(thin) / float64(items)
			continue
		}
		res.requests += sim.Stats().Requests
		res.collected += int64(s.Collected)
	}
	rows, err := pool.Query(ctx, `
		SELECT item_id, row_number() OVER (PARTITION BY item_id ORDER BY snapshot_id)::text,
		       concat_ws('/', listing_count, lowest_unit_price, median_unit_price, listing_quantity, sales_count, sales_quantity),
		       packed
		FROM auction_snapshots`)
	if err != nil {
		return res, err
	}
	defer rows.Close()
	for rows.Next() {
		var id, pass, figures string
		var packed bool
		if err := rows.Scan(&id, &pass, &figures, &packed); err != nil {
			return res, err
		}
		if packed {
			res.packed++
		}
		if packed || packSize == 1 {
			res.snapshots[[2]string{id, pass}] = figures
		}
	}
	if err := rows.Err(); err != nil {
		return res, err
	}
	err = pool.QueryRow(ctx, `SELECT count(*) FROM packing_state WHERE NOT enabled`).Scan(&res.mismatches)
	return res, err
}

// realisticSim is `collector-dev sim --market realistic` served in-process on a simulated clock,
// with a client that the simulator alone limits, and its catalog's ids in catalog order.
type realisticSim struct {
	sim    *neoplesim.Server
	srv    *httptest.Server
	client *provider.Client
	ids    []string
}

func newRealisticSim(items int, seed int64, now *atomic.Int64) (realisticSim, error) {
	sim := neoplesim.New(neoplesim.Options{Items: items, Seed: seed, Market: market.Realistic,
		Now: func() time.Time { return time.Unix(now.Load(), 0) }})
	srv := httptest.NewServer(sim)
	client, err := provider.NewClient(provider.ClientConfig{Workload: provider.WorkloadMarket, BaseURL: srv.URL,
		Key: neoplesim.DefaultMarketKey, Rate: 1e6, Burst: 1e5, PerMinute: 1e9})
	if err != nil {
		srv.Close()
		return realisticSim{}, err
	}
	ids := make([]string, 0, items)
	for _, it := range sim.Catalog() {
		ids = append(ids, it.ItemID)
	}
	return realisticSim{sim, srv, client, ids}, nil
}

func (r realisticSim) close() { r.srv.Close() }
