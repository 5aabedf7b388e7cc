package history_test

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

func token() pgtype.UUID {
	var u pgtype.UUID
	_, _ = rand.Read(u.Bytes[:])
	u.Valid = true
	return u
}

func p64(v int64) *int64 { return &v }

// market is a scripted item market: a few listings whose prices and counts move now and then,
// and sales that arrive now and then, seen by one collection a minute.
type market struct {
	rng      *mrand.Rand
	state    history.State
	sales    []history.Sale
	lastSale time.Time
	offered  int // sales handed to a collection so far: the next one gets only the newer
}

func newMarket(seed uint64) *market {
	m := &market{rng: mrand.New(mrand.NewPCG(seed, 1))}
	m.state = history.State{Count: 5, Quantity: 12, Lowest: p64(1000), Median: p64(1200), APIAverage: p64(1100)}
	return m
}

// step advances the market to t: it changes with probability 0.2 a minute, sells with 0.1.
func (m *market) step(t time.Time) {
	if m.rng.Float64() < 0.2 {
		s := m.state
		switch m.rng.IntN(4) {
		case 0:
			s.Lowest = p64(900 + m.rng.Int64N(200))
		case 1:
			s.Count++
			s.Quantity += 2
		case 2:
			s.Median = p64(1100 + m.rng.Int64N(200))
		case 3:
			s.Lowest = nil
			s.Count, s.Quantity = 0, 0
		}
		if s.Count > 0 && s.Lowest == nil {
			s.Lowest = p64(1000)
		}
		m.state = s
	}
	if m.rng.Float64() < 0.1 {
		at := t.Add(-time.Duration(m.rng.IntN(50)) * time.Second).Truncate(time.Second)
		if !at.After(m.lastSale) {
			at = m.lastSale.Add(time.Second)
		}
		q := 1 + m.rng.Int64N(5)
		u := 900 + m.rng.Int64N(300)
		m.sales = append(m.sales, history.Sale{SoldAt: at, Quantity: q, UnitPrice: u, Total: q * u})
		m.lastSale = at
	}
}

// collect writes one collection of item at t through the policy and returns what was stored;
// last and seen carry the item's row between collections as tracked_items does.
func collect(t *testing.T, pool *pgxpool.Pool, p history.Policy, item string, at time.Time, m *market, last **history.Written, seen **time.Time) history.Stored {
	t.Helper()
	c := history.Collection{ItemID: item, ItemName: item, Tier: "HOT_1M", Token: token(), At: at, State: m.state,
		Sales: m.sales[m.offered:], Last: *last, SeenAt: *seen}
	m.offered = len(m.sales)
	var out []history.Stored
	err := pgx.BeginFunc(context.Background(), pool, func(tx pgx.Tx) error {
		var err error
		out, err = p.Write(context.Background(), tx, []history.Collection{c})
		return err
	})
	if err != nil {
		t.Fatalf("write %s at %v: %v", item, at, err)
	}
	if out[0].Reason != history.Skip {
		*last = &history.Written{State: m.state, At: at}
	}
	s := at
	*seen = &s
	return out[0]
}

// TestChangeOnlySeriesEqualsEveryCollection runs one market through both modes (two items,
// same collections) and rebuilds the change-only series at every collection instant: each
// snapshot holds until the next one.
func TestChangeOnlySeriesEqualsEveryCollection(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	every := history.Policy{Every: true, Heartbeat: 10 * time.Minute}
	changes := history.Policy{Heartbeat: 10 * time.Minute}
	start := time.Now().UTC().Truncate(time.Minute).Add(-6 * time.Hour)
	mEvery, mChanges := newMarket(7), newMarket(7)
	var lastE, lastC *history.Written
	var seenE, seenC *time.Time
	var instants []time.Time
	reasons := map[history.Reason]int{}
	for i := range 360 {
		at := start.Add(time.Duration(i) * time.Minute)
		mEvery.step(at)
		mChanges.step(at)
		collect(t, pool, every, "every", at, mEvery, &lastE, &seenE)
		st := collect(t, pool, changes, "changes", at, mChanges, &lastC, &seenC)
		reasons[st.Reason]++
		instants = append(instants, at)
	}
	if reasons[history.Skip] == 0 || reasons[history.Change] == 0 || reasons[history.Heartbeat] == 0 {
		t.Fatalf("the market should give skips, changes and heartbeats: %v", reasons)
	}
	state := `coalesce(lowest_unit_price::text, '-') || '/' || coalesce(median_unit_price::text, '-') || '/' ||
	          coalesce(weighted_unit_price::text, '-') || '/' || coalesce(api_average_price::text, '-') || '/' ||
	          listing_count || '/' || listing_quantity || '/' || listings_truncated`
	var diffs, rows int
	err := pool.QueryRow(ctx, `
		WITH i AS (SELECT unnest($1::timestamptz[]) AS at)
		SELECT count(*) FILTER (WHERE e.s IS DISTINCT FROM c.s), count(*)
		FROM i
		CROSS JOIN LATERAL (SELECT `+state+` AS s FROM auction_snapshots WHERE item_id = 'every' AND collected_at = i.at) e
		CROSS JOIN LATERAL (SELECT `+state+` AS s FROM auction_snapshots WHERE item_id = 'changes' AND collected_at <= i.at
		                    ORDER BY collected_at DESC LIMIT 1) c`, instants).Scan(&diffs, &rows)
	if err != nil {
		t.Fatal(err)
	}
	if rows != len(instants) || diffs != 0 {
		t.Fatalf("rebuilt series: %d differences over %d of %d instants", diffs, rows, len(instants))
	}
	var nEvery, nChanges, salesEvery, salesChanges int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE item_id = 'every'), count(*) FILTER (WHERE item_id = 'changes'),
		coalesce(sum(sales_count) FILTER (WHERE item_id = 'every'), 0), coalesce(sum(sales_count) FILTER (WHERE item_id = 'changes'), 0)
		FROM auction_snapshots`).Scan(&nEvery, &nChanges, &salesEvery, &salesChanges); err != nil {
		t.Fatal(err)
	}
	if nEvery != 360 || nChanges >= nEvery/2 || salesEvery != salesChanges || salesEvery == 0 {
		t.Fatalf("snapshots every=%d changes=%d; sales reported every=%d changes=%d", nEvery, nChanges, salesEvery, salesChanges)
	}
	var events int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox WHERE item_id = 'changes'`).Scan(&events); err != nil {
		t.Fatal(err)
	}
	if events != nChanges {
		t.Fatalf("%d events for %d change-only snapshots", events, nChanges)
	}
}

// TestCandlesEqualWhatTheRawRowsSay recomputes every candle from the snapshots and sales it
// summarises.
func TestCandlesEqualWhatTheRawRowsSay(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	p := history.Policy{Heartbeat: 20 * time.Minute}
	start := time.Now().UTC().Truncate(time.Hour).Add(-30 * time.Hour)
	for item := range 3 {
		m := newMarket(uint64(item))
		var last *history.Written
		var seen *time.Time
		id := fmt.Sprint("item-", item)
		for i := range 30 * 60 / 2 {
			at := start.Add(time.Duration(i)*2*time.Minute + time.Duration(item)*time.Second)
			m.step(at)
			collect(t, pool, p, id, at, m, &last, &seen)
		}
	}
	var bad, total int
	err := pool.QueryRow(ctx, `
		WITH r(resolution, width) AS (VALUES ('1h', interval '1 hour'), ('1d', interval '1 day')),
		snap AS (
			SELECT s.item_id, r.resolution, date_bin(r.width, s.collected_at, '2000-01-01 00:00:00+00') AS bucket,
			       count(*) AS n, (array_agg(lowest_unit_price ORDER BY collected_at))[1] AS open,
			       max(lowest_unit_price) AS high, min(lowest_unit_price) AS low,
			       (array_agg(lowest_unit_price ORDER BY collected_at DESC))[1] AS close,
			       min(listing_count) AS lmin, max(listing_count) AS lmax
			FROM auction_snapshots s CROSS JOIN r GROUP BY 1, 2, 3),
		sale AS (
			SELECT s.item_id, r.resolution, date_bin(r.width, s.sold_at, '2000-01-01 00:00:00+00') AS bucket,
			       count(*) AS n, sum(quantity) AS q, sum(quantity::numeric * unit_price) AS v
			FROM auction_sales s CROSS JOIN r GROUP BY 1, 2, 3),
		want AS (
			SELECT coalesce(snap.item_id, sale.item_id) AS item_id, coalesce(snap.resolution, sale.resolution) AS resolution,
			       coalesce(snap.bucket, sale.bucket) AS bucket, coalesce(snap.n, 0) AS n, snap.open, snap.high, snap.low,
			       snap.close, snap.lmin, snap.lmax, coalesce(sale.n, 0) AS sn, coalesce(sale.q, 0) AS sq, coalesce(sale.v, 0) AS sv
			FROM snap FULL JOIN sale USING (item_id, resolution, bucket))
		SELECT count(*) FILTER (WHERE c.item_id IS NULL OR w.item_id IS NULL
		           OR (w.n, w.open, w.high, w.low, w.close, w.lmin, w.lmax, w.sn, w.sq, w.sv)
		              IS DISTINCT FROM (c.snapshots, c.open_price, c.high_price, c.low_price, c.close_price,
		                                c.listings_min, c.listings_max, c.sales_count, c.sales_quantity, c.sales_value)),
		       count(*)
		FROM want w FULL JOIN price_candles c USING (item_id, resolution, bucket)`).Scan(&bad, &total)
	if err != nil {
		t.Fatal(err)
	}
	if bad != 0 || total < 3*31 {
		t.Fatalf("%d of %d candles differ from their raw rows", bad, total)
	}
}

// TestARetriedClaimStoresOneSnapshot: the same claim written twice stores one snapshot, one
// event, and counts once in its candles.
func TestARetriedClaimStoresOneSnapshot(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Hour).Add(-90 * time.Minute) // one hour bucket for both rows
	c := history.Collection{ItemID: "x", Token: token(), At: at, State: history.State{Count: 1, Quantity: 1, Lowest: p64(5)},
		Sales: []history.Sale{{SoldAt: at.Add(-time.Second), Quantity: 1, UnitPrice: 5, Total: 5}}}
	p := history.Policy{Heartbeat: time.Hour}
	for range 2 {
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			_, err := p.Write(ctx, tx, []history.Collection{c})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	var snaps, events, candleSnaps, candleSales int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM auction_snapshots), (SELECT count(*) FROM outbox),
		(SELECT snapshots FROM price_candles WHERE resolution = '1h'), (SELECT sales_count FROM price_candles WHERE resolution = '1h' AND sales_count > 0)`).
		Scan(&snaps, &events, &candleSnaps, &candleSales); err != nil {
		t.Fatal(err)
	}
	if snaps != 1 || events != 1 || candleSnaps != 1 || candleSales != 1 {
		t.Fatalf("snapshots %d, events %d, candle snapshots %d, candle sales %d; want 1 each", snaps, events, candleSnaps, candleSales)
	}
}
