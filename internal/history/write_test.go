package history_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"math"
	mrand "math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tierplan"
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
// summarises (history.RebuildCandles, one statement over the raw rows) and compares it with the
// candles the write-backs kept incrementally.
func TestCandlesEqualWhatTheRawRowsSay(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	p := history.Policy{Heartbeat: 20 * time.Minute}
	start := time.Now().UTC().Truncate(time.Hour).Add(-30 * time.Hour)
	var ids []string
	for item := range 3 {
		m := newMarket(uint64(item))
		var last *history.Written
		var seen *time.Time
		id := fmt.Sprint("item-", item)
		ids = append(ids, id)
		for i := range 30 * 60 / 2 {
			at := start.Add(time.Duration(i)*2*time.Minute + time.Duration(item)*time.Second)
			m.step(at)
			collect(t, pool, p, id, at, m, &last, &seen)
		}
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE kept AS SELECT * FROM price_candles`); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return history.RebuildCandles(ctx, tx, ids) }); err != nil {
		t.Fatal(err)
	}
	var bad, total int
	err := pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE c.item_id IS NULL OR k.item_id IS NULL
		           OR (k.snapshots, k.open_at, k.open_price, k.high_price, k.low_price, k.close_at, k.close_price,
		               k.listings_min, k.listings_max, k.sales_count, k.sales_quantity, k.sales_value)
		              IS DISTINCT FROM (c.snapshots, c.open_at, c.open_price, c.high_price, c.low_price, c.close_at, c.close_price,
		                                c.listings_min, c.listings_max, c.sales_count, c.sales_quantity, c.sales_value)),
		       count(*)
		FROM kept k FULL JOIN price_candles c USING (item_id, resolution, bucket)`).Scan(&bad, &total)
	if err != nil {
		t.Fatal(err)
	}
	if bad != 0 || total < 3*31 {
		t.Fatalf("%d of %d candles differ from their raw rows", bad, total)
	}
}

// candle is a bucket's market figures: what a series of collections saw in it.
type candle struct {
	open, high, low, close string // lowest unit price, "-" for none
	lmin, lmax             int
}

// seenCandles computes, from every collection's market, the candles a reader of the full
// series expects: each bucket's first, highest, lowest and last lowest price and its listing
// count range, over the collections in it.
func seenCandles(seen []history.Written, width time.Duration) map[time.Time]candle {
	origin := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	out := map[time.Time]candle{}
	price := func(p *int64) string {
		if p == nil {
			return "-"
		}
		return fmt.Sprint(*p)
	}
	for _, w := range seen {
		b := origin.Add(w.At.Sub(origin).Truncate(width))
		c, ok := out[b]
		p := price(w.State.Lowest)
		if !ok {
			c = candle{open: p, high: p, low: p, lmin: w.State.Count, lmax: w.State.Count}
		}
		if w.State.Lowest != nil && (c.high == "-" || *w.State.Lowest > mustInt(c.high)) {
			c.high = p
		}
		if w.State.Lowest != nil && (c.low == "-" || *w.State.Lowest < mustInt(c.low)) {
			c.low = p
		}
		c.close, c.lmin, c.lmax = p, min(c.lmin, w.State.Count), max(c.lmax, w.State.Count)
		out[b] = c
	}
	return out
}

func mustInt(s string) int64 {
	var v int64
	_, _ = fmt.Sscan(s, &v)
	return v
}

// TestChangeOnlyCandlesEqualTheCandlesOfEveryCollection runs one market through both modes at
// an irregular cadence (a collection 1 to 25 minutes after the last, the default one-hour
// heartbeat) and compares each mode's hourly and daily candles with the candles of what every
// collection saw: an hour whose first collections saw the previous snapshot's market unchanged
// opens with that market, and an hour of unchanged collections alone still gets its candle,
// once the next snapshot is written.
func TestChangeOnlyCandlesEqualTheCandlesOfEveryCollection(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	rng := mrand.New(mrand.NewPCG(3, 4))
	start := time.Now().UTC().Truncate(24 * time.Hour).Add(-72 * time.Hour)
	modes := map[string]history.Policy{"every": {Every: true, Heartbeat: time.Hour}, "changes": {Heartbeat: time.Hour}}
	markets := map[string]*market{"every": newMarket(11), "changes": newMarket(11)}
	lasts := map[string]*history.Written{}
	seens := map[string]*time.Time{}
	var seen []history.Written
	var lastWrite time.Time // the changes-mode item's last snapshot
	reasons := map[history.Reason]int{}
	for at := start; at.Before(start.Add(60 * time.Hour)); at = at.Add(time.Duration(1+rng.IntN(25)) * time.Minute) {
		for _, mode := range []string{"every", "changes"} {
			m := markets[mode]
			m.step(at)
			last, s := lasts[mode], seens[mode]
			st := collect(t, pool, modes[mode], mode, at, m, &last, &s)
			lasts[mode], seens[mode] = last, s
			if mode == "changes" {
				reasons[st.Reason]++
				seen = append(seen, history.Written{State: m.state, At: at})
				if st.Reason != history.Skip {
					lastWrite = at
				}
			}
		}
	}
	if reasons[history.Skip] == 0 || reasons[history.Change] == 0 || reasons[history.Heartbeat] == 0 {
		t.Fatalf("the market should give skips, changes and heartbeats: %v", reasons)
	}
	for _, res := range []struct {
		name  string
		width time.Duration
	}{{"1h", time.Hour}, {"1d", 24 * time.Hour}} {
		want := seenCandles(seen, res.width)
		for _, mode := range []string{"every", "changes"} {
			rows, err := pool.Query(ctx, `
				SELECT bucket, coalesce(open_price::text, '-'), coalesce(high_price::text, '-'), coalesce(low_price::text, '-'),
				       coalesce(close_price::text, '-'), listings_min, listings_max
				FROM price_candles WHERE item_id = $1 AND resolution = $2 AND open_at IS NOT NULL`, mode, res.name)
			if err != nil {
				t.Fatal(err)
			}
			got := map[time.Time]candle{}
			var b time.Time
			var c candle
			if _, err := pgx.ForEachRow(rows, []any{&b, &c.open, &c.high, &c.low, &c.close, &c.lmin, &c.lmax}, func() error {
				got[b.UTC()] = c
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			diffs := 0
			for bucket, w := range want {
				// A bucket after the item's last snapshot is written with the next snapshot.
				if mode == "changes" && bucket.After(lastWrite) {
					continue
				}
				if got[bucket] != w {
					diffs++
					if diffs <= 3 {
						t.Errorf("%s %s candle at %v: got %+v, want %+v", mode, res.name, bucket, got[bucket], w)
					}
				}
			}
			if diffs > 0 || len(got) > len(want) {
				t.Fatalf("%s %s: %d of %d candles differ from what the collections saw (%d stored)", mode, res.name, diffs, len(want), len(got))
			}
		}
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
	// A sale was first seen by the collection that reports it, not when a write committed.
	var seen, collected time.Time
	if err := pool.QueryRow(ctx, `SELECT (SELECT first_seen_at FROM auction_sales), (SELECT collected_at FROM auction_snapshots)`).
		Scan(&seen, &collected); err != nil {
		t.Fatal(err)
	}
	if !seen.Equal(collected) || !seen.Equal(at) {
		t.Fatalf("sale first seen at %v, its snapshot collected at %v; want both the collection's %v", seen, collected, at)
	}
}

// Only outbox.enabled decides whether a snapshot writes its event. With the defaults, which
// configure no Kafka in this process, it does: a relay may run on another host. With
// outbox.enabled false the snapshot, its sales and candles are written, and no outbox row.
func TestOutboxEnabledAloneDecidesTheEvent(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	at := time.Now().UTC().Truncate(time.Hour).Add(-30 * time.Minute)
	off := config.Default()
	off.Outbox.Enabled = false
	for _, tc := range []struct {
		item   string
		cfg    *config.Config
		events int
	}{{"defaults", config.Default(), 1}, {"outbox-off", off, 0}} {
		if len(tc.cfg.Kafka.Brokers) != 0 {
			t.Fatalf("%s: kafka.brokers %v; the case is a process with no Kafka configured", tc.item, tc.cfg.Kafka.Brokers)
		}
		c := history.Collection{ItemID: tc.item, Token: token(), At: at, State: history.State{Count: 1, Quantity: 1, Lowest: p64(5)},
			Sales: []history.Sale{{SoldAt: at.Add(-time.Second), Quantity: 1, UnitPrice: 5, Total: 5}}}
		var out []history.Stored
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			out, err = history.FromConfig(tc.cfg).Write(ctx, tx, []history.Collection{c})
			return err
		}); err != nil {
			t.Fatalf("%s: %v", tc.item, err)
		}
		var snaps, sales, candles, events, pending int
		if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM auction_snapshots WHERE item_id = $1),
			(SELECT count(*) FROM auction_sales WHERE item_id = $1), (SELECT count(*) FROM price_candles WHERE item_id = $1),
			(SELECT count(*) FROM outbox WHERE item_id = $1),
			(SELECT count(*) FROM outbox_pending p JOIN outbox o USING (id) WHERE o.item_id = $1)`, tc.item).
			Scan(&snaps, &sales, &candles, &events, &pending); err != nil {
			t.Fatal(err)
		}
		if out[0].SnapshotID == 0 || snaps != 1 || sales != 1 || candles != 2 || events != tc.events || pending != tc.events {
			t.Errorf("%s: snapshot %d, %d snapshots, %d sales, %d candles, %d events (%d pending); want 1 snapshot, 1 sale, 2 candles and %d events",
				tc.item, out[0].SnapshotID, snaps, sales, candles, events, pending, tc.events)
		}
	}
}

// A write-back adds the collection's interval to the item's decayed counts with the tier
// plan's own arithmetic (tierplan.Observations: Decay by the interval, then Observe it; sales
// decay by the same factor), starting from what the claim read, and the row stores them; the
// first collection, with nothing to measure from, leaves them as they were.
func TestWriteBackAddsTheIntervalToTheDecayedCounts(t *testing.T) {
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	seen := int32(5)
	start := tierplan.Observations{Accesses: 7, Changes: 3, ChangedSeconds: 240, UnchangedSeconds: 300}
	const startSales = 4.5
	storetest.Items(t, pool,
		storetest.Item{ID: "changed", SeenListingCount: &seen, EstCollections: start.Accesses, EstChanges: start.Changes,
			EstChangedSeconds: start.ChangedSeconds, EstUnchangedSeconds: start.UnchangedSeconds},
		storetest.Item{ID: "same", SeenListingCount: &seen, EstCollections: start.Accesses, EstChanges: start.Changes,
			EstChangedSeconds: start.ChangedSeconds, EstUnchangedSeconds: start.UnchangedSeconds},
		storetest.Item{ID: "first", EstCollections: start.Accesses, EstChanges: start.Changes,
			EstChangedSeconds: start.ChangedSeconds, EstUnchangedSeconds: start.UnchangedSeconds})
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET est_sales = $1, lease_token = gen_random_uuid(),
		lease_expires_at = now() + interval '1 minute'`, startSales); err != nil {
		t.Fatal(err)
	}
	var at time.Time
	if err := pool.QueryRow(ctx, `SELECT date_trunc('second', now())`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	const secs, window = 90.0, 600 * time.Second
	prev := at.Add(-secs * time.Second)
	last := &history.Written{State: history.State{Count: 5, Quantity: 9, Lowest: p64(100)}, At: prev}
	sales := []history.Sale{{SoldAt: prev.Add(time.Second), Quantity: 1, UnitPrice: 100, Total: 100},
		{SoldAt: prev.Add(2 * time.Second), Quantity: 2, UnitPrice: 100, Total: 200}}
	var items []history.Item
	for _, id := range []string{"changed", "same", "first"} {
		it := history.Item{Collection: history.Collection{ItemID: id, ItemName: id, Tier: "WARM_5M", At: at,
			State: last.State, Last: last, SeenAt: &prev}, Outcome: "ok", Window: window,
			Est: start, EstSales: startSales, Observed: id != "first"}
		if id == "changed" {
			it.Sales = sales
		}
		if err := pool.QueryRow(ctx, `SELECT lease_token, ctid FROM tracked_items WHERE item_id = $1`, id).Scan(&it.Token, &it.TID); err != nil {
			t.Fatal(err)
		}
		items = append(items, it)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		live, err := catalog.WriteBack(ctx, tx, history.Policy{Heartbeat: time.Hour}.Rows(items))
		if err == nil && len(live) != 3 {
			t.Errorf("wrote %v, want every item", live)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id       string
		changed  bool
		newSales float64
		first    bool
	}{{"changed", true, 2, false}, {"same", false, 0, false}, {"first", false, 0, true}} {
		var got tierplan.Observations
		var gotSales float64
		if err := pool.QueryRow(ctx, `SELECT est_collections, est_changes, est_changed_seconds, est_unchanged_seconds, est_sales
			FROM tracked_items WHERE item_id = $1`, tc.id).Scan(&got.Accesses, &got.Changes, &got.ChangedSeconds, &got.UnchangedSeconds, &gotSales); err != nil {
			t.Fatal(err)
		}
		want := start.Decay(secs, window.Seconds()).Observe(secs, tc.changed)
		// Sales decay like any count: Decay's factor on a count of startSales.
		wantSales := tierplan.Observations{Accesses: startSales}.Decay(secs, window.Seconds()).Accesses + tc.newSales
		if tc.first {
			want, wantSales = start, startSales
		}
		if !near(got.Accesses, want.Accesses) || !near(got.Changes, want.Changes) || !near(got.ChangedSeconds, want.ChangedSeconds) ||
			!near(got.UnchangedSeconds, want.UnchangedSeconds) || !near(gotSales, wantSales) {
			t.Errorf("%s: stored counts %+v sales %v, tierplan %+v sales %v", tc.id, got, gotSales, want, wantSales)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
