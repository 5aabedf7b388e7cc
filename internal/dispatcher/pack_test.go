package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/history"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

// Whatever shape a packed answer takes (limit per call or per item, rows merged or grouped),
// and wherever the limit falls (ample, exactly at the answer's size, one row short), every
// item collected through a packed call ends with the same listings figures and the same new
// sales as when fetched alone at the same instant: no incomplete snapshot can be stored.
func TestPackedPartsEqualSingleItemAnswersUnderEveryShape(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, provider.KST)
	for _, lim := range []string{neoplesim.LimitPerCall, neoplesim.LimitPerItem} {
		for _, ord := range []string{neoplesim.OrderMerged, neoplesim.OrderGrouped} {
			sim := neoplesim.New(neoplesim.Options{Items: 40, Seed: 9, MarketKey: marketKey,
				ItemIDsLimit: lim, ItemIDsOrder: ord, Now: func() time.Time { return now }})
			srv := httptest.NewServer(sim)
			t.Cleanup(srv.Close)
			probe := marketClient(t, srv.URL, 400, 100)
			// Eight items of a thin-ish market: the first ones with fewer listings than the cap.
			var group []catalog.Claim
			for _, it := range sim.Catalog() {
				rowsA, _ := probe.Auction(context.Background(), it.ItemID)
				rows := rowsA.Rows
				if len(rows) > 0 && len(rows) < 60 && len(group) < 8 {
					group = append(group, catalog.Claim{ItemID: it.ItemID, ItemName: it.ItemName})
				}
			}
			// Half the items have sales stored up to their third newest.
			for i := range group {
				if i%2 == 0 {
					salesA, _ := probe.AuctionSold(context.Background(), group[i].ItemID)
					sales := salesA.Rows
					if len(sales) >= 3 {
						at := sales[2].SoldAt
						group[i].LastSaleAt = &at
					}
				}
			}
			ids := make([]string, len(group))
			for i, c := range group {
				ids[i] = c.ItemID
			}
			fullLA, _ := probe.AuctionMany(context.Background(), ids)
			fullL := fullLA.Rows
			fullSA, _ := probe.AuctionSoldMany(context.Background(), ids)
			fullS := fullSA.Rows
			exactL, exactS := len(fullL), len(fullS)
			if lim == neoplesim.LimitPerItem {
				exactL, exactS = maxPart(fullL, func(l provider.Listing) string { return l.ItemID }), maxPart(fullS, func(s provider.Sale) string { return s.ItemID })
			}
			for _, limits := range []struct {
				name       string
				list, sold int
			}{{"ample", 400, 100}, {"exactly at the limit", exactL, exactS}, {"one short", exactL - 1, exactS - 1}} {
				t.Run(fmt.Sprintf("%s/%s/%s", lim, ord, limits.name), func(t *testing.T) {
					client := marketClient(t, srv.URL, limits.list, limits.sold)
					d, err := New(pool, client, configured(pool, Config{PackSize: 10}), nil)
					if err != nil {
						t.Fatal(err)
					}
					d.clock.set(time.Now()) // a claim anchors it in a pass
					packed := 0
					for _, r := range d.fetchPacked(context.Background(), group, packingState{listings: true, sales: true}, newFlow(1)) {
						if r.err != nil {
							t.Fatalf("item %s: %v", r.claim.ItemID, r.err)
						}
						alone := d.fetchOne(context.Background(), r.claim)
						if !reflect.DeepEqual(r.listings, alone.listings) {
							t.Fatalf("item %s: listings %+v packed, %+v alone", r.claim.ItemID, r.listings, alone.listings)
						}
						if got, want := after(r.sales, r.claim.LastSaleAt), after(alone.sales, r.claim.LastSaleAt); !reflect.DeepEqual(got, want) {
							t.Fatalf("item %s: %d new sales packed, %d alone", r.claim.ItemID, len(got), len(want))
						}
						if r.packed {
							packed++
						}
					}
					if limits.name == "ample" && packed != len(group) {
						t.Fatalf("%d of %d items served by the packed answers with an ample limit", packed, len(group))
					}
				})
			}
		}
	}
}

func marketClient(t *testing.T, url string, auctionLimit, soldLimit int) *provider.Client {
	t.Helper()
	c, err := provider.NewClient(provider.ClientConfig{Workload: provider.WorkloadMarket, BaseURL: url, Key: marketKey,
		Rate: 100000, Burst: 10000, PerMinute: 10000000, AuctionLimit: auctionLimit, SoldLimit: soldLimit})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func maxPart[T any](rows []T, id func(T) string) int {
	n := map[string]int{}
	m := 0
	for _, r := range rows {
		n[id(r)]++
		m = max(m, n[id(r)])
	}
	return m
}

// after keeps the sales strictly newer than the stored one: the sales a snapshot reports.
func after(rows []history.Sale, last *time.Time) []history.Sale {
	var out []history.Sale
	for _, r := range rows {
		if last == nil || r.SoldAt.After(*last) {
			out = append(out, r)
		}
	}
	return out
}

// Packing off for an endpoint (a shadow mismatch, or `collector packing off`) sends every
// item alone on it, cluster-wide.
func TestPackingSwitchIsReadByEveryPass(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	if st, err := readPacking(ctx, pool); err != nil || !st.listings || !st.sales {
		t.Fatalf("fresh database: %+v %v, want both on", st, err)
	}
	if err := SetPacking(ctx, pool, provider.EndpointAuctionSold, false, "test"); err != nil {
		t.Fatal(err)
	}
	if st, _ := readPacking(ctx, pool); !st.listings || st.sales {
		t.Fatalf("after switching sales off: %+v", st)
	}
	if err := SetPacking(ctx, pool, "/df/items", false, "x"); err == nil || !strings.Contains(err.Error(), "allowed") {
		t.Fatalf("unknown endpoint: %v", err)
	}
}

// The second collection of small items shares calls: fewer requests than items, snapshots
// flagged packed, and with every packed item shadow-verified no mismatch.
func TestSmallItemsShareCallsOnceTheirAnswersAreKnown(t *testing.T) {
	e := setup(t, 30, tiers.Cold, nil)
	ctx := context.Background()
	cfg := Config{BatchSize: 30, Concurrency: 4, PackSize: 10, PackMaxListings: 60, PackMaxSales: packMaxSalesMax, ShadowFraction: 1,
		History: everyCollection}
	if _, err := e.dispatcher(t, cfg, nil).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	e.sim.ResetStats()
	s, err := e.dispatcher(t, cfg, nil).RunOnce(ctx)
	if err != nil || s.Collected != 30 {
		t.Fatalf("second pass %+v, %v", s, err)
	}
	packed := count(t, e.pool, `SELECT count(*) FROM auction_snapshots WHERE packed`)
	if packed == 0 {
		t.Fatal("no snapshot came from a packed answer")
	}
	if st, _ := readPacking(ctx, e.pool); !st.listings || !st.sales {
		t.Fatalf("shadow verification switched packing off against a faithful provider: %+v", st)
	}
	t.Logf("%d of 30 snapshots packed; %d requests", packed, e.sim.Stats().Requests)
}

// A packed call answered as no API would (a proxy that refuses the longer itemIds URL with a
// bare 404) does not end the pass: its items are fetched alone, and single calls that work
// collect them all.
func TestAPackedCallThatIsNotTheAPIsFallsBackToSingleCalls(t *testing.T) {
	var refused atomic.Int64
	e := setup(t, 20, tiers.Cold, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("itemIds") == "" {
				next.ServeHTTP(w, r)
				return
			}
			refused.Add(1)
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("<html>URI not allowed</html>"))
		})
	})
	ctx := context.Background()
	cfg := Config{BatchSize: 20, Concurrency: 2, PackSize: 10, PackMaxListings: 60, PackMaxSales: packMaxSalesMax}
	if _, err := e.dispatcher(t, cfg, nil).RunOnce(ctx); err != nil { // first collections: alone
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	s, err := e.dispatcher(t, cfg, nil).RunOnce(ctx)
	if err != nil || s.Collected != 20 || s.Failed != 0 {
		t.Fatalf("second pass %s, %v; want all 20 collected by single calls", s, err)
	}
	if refused.Load() == 0 {
		t.Fatal("no packed call was made: the test proves nothing")
	}
}

// A packed answer that lacks a row its single-item answer has is caught by shadow
// verification: packing goes off for that endpoint, for everyone.
func TestShadowMismatchSwitchesPackingOff(t *testing.T) {
	e := setupSim(t, 12, tiers.Cold, stoppedMarket(), func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/df/auction" || r.URL.Query().Get("itemIds") == "" {
				next.ServeHTTP(w, r)
				return
			}
			// A provider that silently drops the first row of packed listings answers.
			serveDroppingFirstRow(w, r, next, true)
		})
	})
	ctx := context.Background()
	cfg := Config{BatchSize: 20, Concurrency: 2, PackSize: 10, PackMaxListings: 60, PackMaxSales: packMaxSalesMax, ShadowFraction: 1}
	if _, err := e.dispatcher(t, cfg, nil).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dispatcher(t, cfg, nil).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := ReadPackingStatus(ctx, e.pool)
	if err != nil || len(st) != 1 || st[0].Endpoint != provider.EndpointAuction || st[0].Enabled || !strings.Contains(st[0].Reason, "shadow verification of item") {
		t.Fatalf("packing state %+v %v: want /df/auction switched off naming the item", st, err)
	}
}

// The item whose packed part the shadow check shows wrong is not written from it: its listings
// are what the provider answers it alone, not the packed part that lacked one.
func TestAnItemShownWrongByTheShadowCheckIsWrittenFromItsOwnAnswer(t *testing.T) {
	var mu sync.Mutex
	dropped, whole := "", 0 // the item whose row the packed answer dropped, and its rows with it
	e := setupSim(t, 12, tiers.Cold, stoppedMarket(), func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/df/auction" || r.URL.Query().Get("itemIds") == "" {
				next.ServeHTTP(w, r)
				return
			}
			serveRewritingRows(w, r, next, func(rows []map[string]any) []map[string]any {
				mu.Lock()
				defer mu.Unlock()
				if len(rows) == 0 {
					return rows
				}
				if dropped == "" {
					dropped, _ = rows[0]["itemId"].(string)
					for _, row := range rows {
						if row["itemId"] == dropped {
							whole++
						}
					}
				}
				return rows[1:]
			})
		})
	})
	ctx := context.Background()
	cfg := Config{BatchSize: 20, Concurrency: 1, PackSize: 10, PackMaxListings: 60, PackMaxSales: packMaxSalesMax, ShadowFraction: 1}
	if _, err := e.dispatcher(t, cfg, nil).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dispatcher(t, cfg, nil).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if dropped == "" {
		t.Fatal("no packed listings answer had rows: the test proves nothing")
	}
	var stored int
	if err := e.pool.QueryRow(ctx, `SELECT seen_listing_count FROM tracked_items WHERE item_id = $1`, dropped).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != whole {
		t.Fatalf("the item whose packed part lacked a listing stored %d listings, want its own answer's %d", stored, whole)
	}
}

// A packed sales answer with no rows at all (a provider that ignores itemIds on that endpoint)
// is caught by shadow verification: sales made before the packed call was sent must be in it,
// whatever it holds. Packing goes off for that endpoint.
func TestShadowCatchesAnEmptyPackedSalesAnswer(t *testing.T) {
	e := setup(t, 12, tiers.Cold, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/df/auction-sold" || r.URL.Query().Get("itemIds") == "" {
				next.ServeHTTP(w, r)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = w.Write([]byte(`{"rows":[]}`))
		})
	})
	ctx := context.Background()
	cfg := Config{BatchSize: 20, Concurrency: 2, PackSize: 10, PackMaxListings: 60, PackMaxSales: packMaxSalesMax, ShadowFraction: 1}
	if _, err := e.dispatcher(t, cfg, nil).RunOnce(ctx); err != nil { // first collections: alone
		t.Fatal(err)
	}
	// The stored sales end a day back: the provider's last day of sales is new to every item.
	var selling int
	if err := e.pool.QueryRow(ctx, `
		WITH u AS (UPDATE tracked_items SET next_collect_at = now() - interval '1 second',
		                  last_sale_at = last_sale_at - interval '1 day', last_second_sales = 0
		           WHERE last_sale_at IS NOT NULL RETURNING 1)
		SELECT count(*) FROM u`).Scan(&selling); err != nil {
		t.Fatal(err)
	}
	if selling == 0 {
		t.Fatal("no item has sales: the test proves nothing")
	}
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.dispatcher(t, cfg, nil).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := ReadPackingStatus(ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	off := false
	for _, s := range st {
		off = off || s.Endpoint == provider.EndpointAuctionSold && !s.Enabled && strings.Contains(s.Reason, "shadow verification of item")
	}
	if !off {
		t.Fatalf("packing state %+v: want /df/auction-sold switched off naming the item", st)
	}
}

// A listing made and bought between the single-item calls around a packed one shows only in
// the packed answer: not a packing fault (the packed part lacks nothing), so packing stays on.
func TestShadowIgnoresAListingOnlyThePackedAnswerSaw(t *testing.T) {
	e := setup(t, 12, tiers.Cold, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/df/auction" || r.URL.Query().Get("itemIds") == "" {
				next.ServeHTTP(w, r)
				return
			}
			serveRewritingRows(w, r, next, func(rows []map[string]any) []map[string]any {
				if len(rows) == 0 {
					return rows
				}
				extra := maps.Clone(rows[0]) // one more listing of the first row's item, gone by the next call
				extra["auctionNo"] = 9_000_000_000
				return append(rows, extra)
			})
		})
	})
	ctx := context.Background()
	cfg := Config{BatchSize: 20, Concurrency: 2, PackSize: 10, PackMaxListings: 60, PackMaxSales: packMaxSalesMax, ShadowFraction: 1}
	var shadowed bool
	for pass := 0; pass < 2; pass++ {
		s, err := e.dispatcher(t, cfg, nil).RunOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		shadowed = shadowed || pass == 1 && s.Collected > 0
		if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
			t.Fatal(err)
		}
	}
	st, err := ReadPackingStatus(ctx, e.pool)
	if err != nil || !shadowed {
		t.Fatalf("%v (collected in the packed pass: %v)", err, shadowed)
	}
	for _, s := range st {
		if !s.Enabled {
			t.Fatalf("packing switched off by a listing only the packed answer saw: %+v", s)
		}
	}
}

// An item the provider no longer knows is left out of packed answers without a word, and
// answered 404 DNF003 alone. An item that had listings and has none in a packed answer is
// asked alone, so its collection fails item_error instead of storing an empty market as ok;
// failed, it is not packed again.
func TestAnItemLeftOutOfAPackedAnswerIsAskedAlone(t *testing.T) {
	var mu sync.Mutex
	lost := "" // the first item with listings in a packed listings answer, from then on
	e := setup(t, 12, tiers.Cold, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			if r.URL.Path != "/df/auction" && r.URL.Path != "/df/auction-sold" {
				next.ServeHTTP(w, r)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if lost != "" && q.Get("itemId") == lost {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(`{"error":{"status":404,"code":"DNF003","message":"NOT_FOUND_ITEM"}}`))
				return
			}
			if q.Get("itemIds") == "" {
				next.ServeHTTP(w, r)
				return
			}
			serveRewritingRows(w, r, next, func(rows []map[string]any) []map[string]any {
				if lost == "" && r.URL.Path == "/df/auction" && len(rows) > 0 {
					lost, _ = rows[0]["itemId"].(string)
				}
				return slices.DeleteFunc(rows, func(row map[string]any) bool { return row["itemId"] == lost })
			})
		})
	})
	ctx := context.Background()
	cfg := Config{BatchSize: 20, Concurrency: 2, PackSize: 10, PackMaxListings: 60, PackMaxSales: packMaxSalesMax}
	for pass := 0; pass < 3; pass++ {
		if _, err := e.dispatcher(t, cfg, nil).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		id := lost
		mu.Unlock()
		if pass == 0 {
			continue // first collections: alone
		}
		if id == "" {
			t.Fatal("no packed listings answer had rows: the test proves nothing")
		}
		var outcome string
		var listings, streak int
		if err := e.pool.QueryRow(ctx, `SELECT last_outcome, seen_listing_count, failure_streak FROM tracked_items WHERE item_id = $1`, id).
			Scan(&outcome, &listings, &streak); err != nil {
			t.Fatal(err)
		}
		if outcome != "item_error" || listings == 0 || streak != pass {
			t.Fatalf("pass %d: the lost item ended %s with %d listings stored, %d failures in a row; want item_error, its listings kept, %d",
				pass+1, outcome, listings, streak, pass)
		}
	}
}

// A market that moves between the packed call and the single-item check is not a packing
// fault: the item's single-item answers before and after the packed call disagree, so the
// check proves nothing and packing stays on.
func TestShadowCheckIgnoresAMarketThatMovedMeanwhile(t *testing.T) {
	var mu sync.Mutex
	calls := map[string]int{}
	e := setup(t, 12, tiers.Cold, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.URL.Query().Get("itemId")
			if r.URL.Path != "/df/auction" || id == "" {
				next.ServeHTTP(w, r)
				return
			}
			mu.Lock()
			calls[id]++
			moved := calls[id]%2 == 0 // every second single-item answer has lost a listing
			mu.Unlock()
			serveDroppingFirstRow(w, r, next, moved)
		})
	})
	ctx := context.Background()
	cfg := Config{BatchSize: 20, Concurrency: 2, PackSize: 10, PackMaxListings: 60, PackMaxSales: packMaxSalesMax, ShadowFraction: 1}
	for pass := 0; pass < 2; pass++ {
		if _, err := e.dispatcher(t, cfg, nil).RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
			t.Fatal(err)
		}
	}
	st, err := ReadPackingStatus(ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Enabled {
			t.Fatalf("packing switched off by a market that moved between calls: %+v", s)
		}
	}
}

// A sale made between the packed call and the check can share a second with the packed
// answer's newest sale; it is not a difference between the two answers.
func TestSameSalesIgnoresTheNewestSecond(t *testing.T) {
	s := time.Date(2026, 5, 1, 1, 0, 0, 0, time.UTC)
	packed := []history.Sale{{SoldAt: s.Add(-time.Minute), Quantity: 1}, {SoldAt: s, Quantity: 1}}
	alone := append(slices.Clone(packed), history.Sale{SoldAt: s, Seq: 1, Quantity: 1})
	if !sameSales(packed, alone, nil, s) {
		t.Fatal("a sale in the newest second, made after the packed call, counted as a mismatch")
	}
	if sameSales(packed[1:], alone, nil, s) {
		t.Fatal("a sale missing from an older second was not noticed")
	}
}

// serveRewritingRows serves next's answer with its rows as edit returns them.
func serveRewritingRows(w http.ResponseWriter, r *http.Request, next http.Handler, edit func([]map[string]any) []map[string]any) {
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, r)
	var body struct {
		Rows []map[string]any `json:"rows"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	body.Rows = edit(body.Rows)
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	if d := rec.Header().Get("Date"); d != "" {
		w.Header().Set("Date", d) // the provider's clock, as it answered
	}
	_, _ = w.Write(b)
}

// serveDroppingFirstRow serves next's answer, without its first row when drop is set.
func serveDroppingFirstRow(w http.ResponseWriter, r *http.Request, next http.Handler, drop bool) {
	rec := httptest.NewRecorder()
	next.ServeHTTP(rec, r)
	var body struct {
		Rows []json.RawMessage `json:"rows"`
	}
	_ = json.Unmarshal(rec.Body.Bytes(), &body)
	if drop && len(body.Rows) > 0 {
		body.Rows = body.Rows[1:]
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	if d := rec.Header().Get("Date"); d != "" {
		w.Header().Set("Date", d) // the provider's clock, as it answered
	}
	_, _ = w.Write(b)
}

// Sales per collection follow the item's tier: an item selling once a minute shares calls at
// HOT_1M (1 sale a collection) but not at COLD_10M (10), however it was collected before, as
// the budget plan counts it.
func TestSmallJudgesSalesAtTheItemsTier(t *testing.T) {
	d := &Dispatcher{cfg: Config{PackMaxListings: 100, PackMaxSales: 5}}
	listings := int32(5)
	c := catalog.Claim{SeenListings: &listings, EstSales: 60, Est: tierplan.Observations{UnchangedSeconds: 3600}}
	for tier, want := range map[tiers.Tier]bool{tiers.Hot: true, tiers.Active: true, tiers.Warm: true, tiers.Cold: false} {
		c.Tier = tier
		if got := d.small(c); got != want {
			t.Errorf("%s: small %v, want %v", tier, got, want)
		}
	}
	c.SeenListings = nil
	if d.small(c) {
		t.Error("an item never collected shares a call")
	}
}

// jumpingFetcher answers one sale per item, at sale, to packed and single sales calls, and
// makes each single listings call take ten seconds of the database's clock: the later items of
// a pack are read long after their packed sales answer was.
type jumpingFetcher struct {
	Fetcher
	clock *dbClock
	sale  time.Time
}

func (f *jumpingFetcher) Auction(context.Context, string) (provider.Answer[provider.Listing], error) {
	f.clock.set(f.clock.now().Add(10 * time.Second))
	return provider.Answer[provider.Listing]{}, nil
}

func (f *jumpingFetcher) AuctionSold(_ context.Context, id string) (provider.Answer[provider.Sale], error) {
	return provider.Answer[provider.Sale]{Rows: []provider.Sale{{ItemID: id, SoldAt: f.sale, Count: 1, Price: 5, UnitPrice: 5}}, Sent: 1}, nil
}

func (f *jumpingFetcher) AuctionSoldMany(_ context.Context, ids []string) (provider.Answer[provider.Sale], error) {
	var rows []provider.Sale
	for _, id := range ids {
		rows = append(rows, provider.Sale{ItemID: id, SoldAt: f.sale, Count: 1, Price: 5, UnitPrice: 5})
	}
	return provider.Answer[provider.Sale]{Rows: rows, Sent: len(rows)}, nil
}

// The seconds a collection holds back are counted from when its sales page was asked for, not
// from when the item's result was made: in a pack, that is the packed call, and the calls of
// the items before it can take longer than history.SalesSettle.
func TestPackedSalesAreHeldBackFromTheirCall(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	srv := httptest.NewServer(neoplesim.New(neoplesim.Options{Items: 2, Seed: 9, MarketKey: marketKey}))
	t.Cleanup(srv.Close)
	at := time.Now().Truncate(time.Second)
	f := &jumpingFetcher{Fetcher: marketClient(t, srv.URL, 400, 100), sale: at}
	d, err := New(pool, f, configured(pool, Config{PackSize: 10}), nil)
	if err != nil {
		t.Fatal(err)
	}
	f.clock = &d.clock
	d.clock.set(at.Add(300 * time.Millisecond)) // the packed call goes out in the sale's second
	group := []catalog.Claim{{ItemID: strings.Repeat("a", 32)}, {ItemID: strings.Repeat("b", 32)}}
	for _, r := range d.fetchPacked(context.Background(), group, packingState{sales: true}, newFlow(1)) {
		if r.err != nil {
			t.Fatalf("item %s: %v", r.claim.ItemID, r.err)
		}
		if len(r.sales) != 0 {
			t.Fatalf("item %s, read %s after its packed sales call: %d sales of the second under way at the call kept, want them held back",
				r.claim.ItemID, r.at.Sub(at), len(r.sales))
		}
	}
}

// packAnsweredMaintenance is a dispatcher and a pack of 4 items, the second of which is
// answered maintenance when its listings are asked alone; with tracked, the items are tracked
// (so a probe has another item to ask).
func packAnsweredMaintenance(t *testing.T, tracked bool) (*Dispatcher, []catalog.Claim, *neoplesim.Server) {
	t.Helper()
	pool, _ := storetest.NewPool(t)
	sim := neoplesim.New(neoplesim.Options{Items: 4, Seed: 9, MarketKey: marketKey})
	var bad atomic.Value
	bad.Store("")
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/df/auction" && r.URL.Query().Get("itemId") == bad.Load() {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	d, err := New(pool, marketClient(t, srv.URL, 400, 100), configured(pool, Config{PackSize: 10}), nil)
	if err != nil {
		t.Fatal(err)
	}
	d.clock.set(time.Now())
	var group []catalog.Claim
	var rows []storetest.Item
	for _, it := range sim.Catalog() {
		group = append(group, catalog.Claim{ItemID: it.ItemID, ItemName: it.ItemName})
		rows = append(rows, storetest.Item{ID: it.ItemID, Name: it.ItemName, Tier: tiers.Hot, NextCollectAt: storetest.Ago(time.Second)})
	}
	if tracked {
		storetest.Items(t, pool, rows...)
	}
	bad.Store(group[1].ItemID)
	return d, group, sim
}

// A maintenance answer to one item's own call in a pack (its listings asked alone) that no
// other item can be asked about (none is tracked) is everyone's: the item's failure is written
// back, its pack-mates after it are not called and go back with the pass unchanged; those
// before it were answered and are written as usual.
func TestAPackMateNotCalledGoesBackUnchanged(t *testing.T) {
	d, group, sim := packAnsweredMaintenance(t, false)
	rs := d.fetchPacked(context.Background(), group, packingState{sales: true}, newFlow(1))
	if len(rs) != len(group) {
		t.Fatalf("%d results for %d items", len(rs), len(group))
	}
	if rs[0].err != nil || !recordedFor(rs[1]) {
		t.Fatalf("first item %v, second %v (unasked %v): want the first collected and the second's own maintenance answer written back",
			rs[0].err, rs[1].err, rs[1].unasked)
	}
	for _, r := range rs[2:] {
		if r.err == nil || recordedFor(r) {
			t.Fatalf("item %s after the answer: err %v, written back %v; want it not called and handed back", r.claim.ItemID, r.err, recordedFor(r))
		}
	}
	if n := sim.ItemRequests(group[3].ItemID); n != 0 {
		t.Fatalf("the last pack-mate's listings were asked %d times after the pass-ending answer, want none", n)
	}
}

// The same answer in a pack, while the provider answers the same call for another item, is the
// item's own: it fails alone (item_maintenance) and its pack-mates after it are called and
// collected.
func TestAPackMateAnsweredAloneStopsNoPackMate(t *testing.T) {
	d, group, _ := packAnsweredMaintenance(t, true)
	rs := d.fetchPacked(context.Background(), group, packingState{sales: true}, newFlow(1))
	for i, r := range rs {
		if i == 1 {
			if r.err == nil || r.outcome != "item_maintenance" {
				t.Fatalf("the answered item: err %v outcome %q; want failed as its own answer", r.err, r.outcome)
			}
			continue
		}
		if r.err != nil {
			t.Fatalf("pack-mate %d: %v; want collected", i, r.err)
		}
	}
}
