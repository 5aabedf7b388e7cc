package history

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/tierplan"
)

// Sale is one sale to store, keyed by its second and its position within that second (the
// API has no sale id and identical rows are distinct sales).
type Sale struct {
	SoldAt    time.Time
	Seq       int32
	Quantity  int64
	UnitPrice int64
	Total     int64
}

// Collection is one successful collection whose lease the writer still holds.
type Collection struct {
	ItemID, ItemName, Tier string
	Token                  pgtype.UUID // the claim: one snapshot per claim, however often a write-back is retried
	At                     time.Time   // when the answers were read (database time)
	State                  State
	// Sales are the new sales: the caller tells them from the item's last stored sale, so the
	// decision (Decide) is known before anything is written. The insert still skips any that
	// is stored already.
	Sales            []Sale
	Packed, SalesGap bool
	// Last is the item's last snapshot (nil: none); SeenAt is its last collection before this
	// one, which saw Last's state unchanged.
	Last   *Written
	SeenAt *time.Time
}

// Stored is what Write did with one collection.
type Stored struct {
	Reason     Reason // Skip: no snapshot and no event, the item was seen unchanged
	NewSales   int
	SnapshotID int64
}

// outcome is what Write will store for c, known before anything is written, so Rows can
// record it on the item in the same statement that fences the batch.
func (p Policy) outcome(c Collection) Stored {
	return Stored{Reason: p.Decide(c.Last, c.State, len(c.Sales), c.At), NewSales: len(c.Sales)}
}

// Write stores a batch of collections in the caller's transaction: the new sales, then a
// snapshot, its candles and its event (none with NoOutbox) for each collection the policy
// writes (Decide). The item's row (Rows, written by catalog.WriteBack in the same transaction)
// records that it was seen at c.At, whatever the reason.
func (p Policy) Write(ctx context.Context, tx pgx.Tx, cs []Collection) ([]Stored, error) {
	out := make([]Stored, len(cs))
	agg, err := insertSales(ctx, tx, cs)
	if err != nil {
		return nil, err
	}
	var write []int
	for i, c := range cs {
		out[i] = p.outcome(c)
		out[i].NewSales = agg[c.ItemID].count // the ones the insert stored
		if out[i].Reason != Skip {
			write = append(write, i)
		}
	}
	if len(write) == 0 {
		return out, nil
	}
	events, err := insertSnapshots(ctx, tx, cs, write, agg, out)
	if err != nil {
		return nil, err
	}
	if p.NoOutbox {
		return out, nil
	}
	return out, outbox.EnqueueSnapshots(ctx, tx, events)
}

type salesAgg struct {
	count    int
	quantity int64
	value    float64
}

// insertSalesSQL stores the sales not seen before and adds exactly those to their hours' and
// days' candles; it returns them, which is what the snapshot reports.
const insertSalesSQL = `
WITH s AS (
	INSERT INTO auction_sales (item_id, sold_at, seq, quantity, unit_price, total_price, first_seen_at)
	SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[], $7::timestamptz[])
	ON CONFLICT (item_id, sold_at, seq) DO NOTHING
	RETURNING item_id, sold_at, quantity, unit_price),
c AS (
	INSERT INTO price_candles AS c (item_id, resolution, bucket, sales_count, sales_quantity, sales_value)
	SELECT s.item_id, r.resolution, date_bin(r.width, s.sold_at, '2000-01-01 00:00:00+00'),
	       count(*), sum(s.quantity), sum(s.quantity::numeric * s.unit_price)
	FROM s CROSS JOIN ` + candleWidths + `
	GROUP BY 1, 2, 3
	ON CONFLICT (item_id, resolution, bucket) DO UPDATE
	SET sales_count = c.sales_count + excluded.sales_count,
	    sales_quantity = c.sales_quantity + excluded.sales_quantity,
	    sales_value = c.sales_value + excluded.sales_value)
SELECT item_id, quantity, unit_price FROM s`

func insertSales(ctx context.Context, tx pgx.Tx, cs []Collection) (map[string]salesAgg, error) {
	var ids []string
	var soldAt []time.Time
	var seqs []int32
	var qty, unit, total []int64
	var seen []time.Time
	for _, c := range cs {
		for _, s := range c.Sales {
			// First seen by the collection that reports it (its snapshot's collected_at), not
			// when its write committed: a retried write-back across midnight would put the
			// sale on the next day beside the snapshot counting it.
			seen = append(seen, c.At)
			ids = append(ids, c.ItemID)
			soldAt = append(soldAt, s.SoldAt)
			seqs = append(seqs, s.Seq)
			qty = append(qty, s.Quantity)
			unit = append(unit, s.UnitPrice)
			total = append(total, s.Total)
		}
	}
	agg := map[string]salesAgg{}
	if len(ids) == 0 {
		return agg, nil
	}
	rows, err := tx.Query(ctx, insertSalesSQL, ids, soldAt, seqs, qty, unit, total, seen)
	if err != nil {
		return nil, fmt.Errorf("insert sales: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var q, u int64
		if err := rows.Scan(&id, &q, &u); err != nil {
			return nil, fmt.Errorf("insert sales: %w", err)
		}
		a := agg[id]
		a.count++
		a.quantity += q
		a.value += float64(q) * float64(u)
		agg[id] = a
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert sales: %w", err)
	}
	return agg, nil
}

// candleWidths are the candle resolutions and their bucket widths (buckets from 2000-01-01 UTC).
const candleWidths = `(VALUES ('1h', interval '1 hour'), ('1d', interval '1 day')) AS r(resolution, width)`

// candleObservations are what a batch of snapshots adds to their items' candles, over a
// relation sp of snapshots (item_id, collected_at, lowest_unit_price, listing_count,
// previous_seen_at) with their previous snapshot's collected_at, lowest price and listing
// count (prev_at, prev_lowest, prev_count): each snapshot in its own buckets, and the
// previous market in the bucket of previous_seen_at when collections there saw it unchanged
// before anything was written in that bucket. That bucket then opens with the market it
// really opened with (at the bucket's start, before any snapshot in it), or, if this snapshot
// falls in a later bucket, gets the flat candle its unchanged collections saw. n counts stored
// rows. With history.heartbeat at most a bucket wide, previous_seen_at is at most one bucket
// past prev_at, so no bucket with collections is missed.
const candleObservations = `
	SELECT sp.item_id, r.resolution, date_bin(r.width, sp.collected_at, '2000-01-01 00:00:00+00') AS bucket, 1 AS n,
	       sp.collected_at AS open_at, sp.collected_at AS close_at, sp.lowest_unit_price AS price, sp.listing_count AS cnt
	FROM sp CROSS JOIN ` + candleWidths + `
	UNION ALL
	SELECT sp.item_id, r.resolution, date_bin(r.width, sp.previous_seen_at, '2000-01-01 00:00:00+00'), 0,
	       date_bin(r.width, sp.previous_seen_at, '2000-01-01 00:00:00+00'), sp.previous_seen_at, sp.prev_lowest, sp.prev_count
	FROM sp CROSS JOIN ` + candleWidths + `
	WHERE date_bin(r.width, sp.previous_seen_at, '2000-01-01 00:00:00+00') > date_bin(r.width, sp.prev_at, '2000-01-01 00:00:00+00')`

// candleFigures folds candleObservations (o) into one row per item, resolution and bucket:
// snapshots, open_at, open, high, low, close_at, close, listings_min, listings_max.
const candleFigures = `
	SELECT o.item_id, o.resolution, o.bucket, sum(o.n) AS n,
	       min(o.open_at) AS open_at, (array_agg(o.price ORDER BY o.open_at))[1] AS open,
	       max(o.price) AS high, min(o.price) AS low,
	       max(o.close_at) AS close_at, (array_agg(o.price ORDER BY o.close_at DESC))[1] AS close,
	       min(o.cnt) AS lmin, max(o.cnt) AS lmax
	FROM (` + candleObservations + `) o
	GROUP BY 1, 2, 3`

// insertSnapshotsSQL stores a batch's
// snapshots, once per claim, and folds exactly the stored ones into their hours' and days'
// candles (candleObservations; open and close by time, so the order write-backs commit in does
// not matter); $18-$20 are each item's previous snapshot (collected_at, lowest price, listing
// count; NULL on a first one). It returns the new snapshot ids.
const insertSnapshotsSQL = `
WITH s AS (
	INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, reason, listing_count, listing_quantity,
		lowest_unit_price, median_unit_price, weighted_unit_price, api_average_price,
		sales_count, sales_quantity, sales_vwap, listings_truncated, packed, previous_seen_at)
	SELECT * FROM unnest($1::text[], $2::uuid[], $3::timestamptz[], $4::text[], $5::text[], $6::int[], $7::bigint[],
		$8::bigint[], $9::bigint[], $10::float8[], $11::bigint[], $12::int[], $13::bigint[], $14::float8[],
		$15::bool[], $16::bool[], $17::timestamptz[])
	ON CONFLICT (claim_token, collected_at) DO NOTHING
	RETURNING snapshot_id, item_id, collected_at, lowest_unit_price, listing_count, previous_seen_at),
sp AS (
	SELECT s.*, p.prev_at, p.prev_lowest, p.prev_count
	FROM s JOIN unnest($1::text[], $18::timestamptz[], $19::bigint[], $20::int[]) AS p(item_id, prev_at, prev_lowest, prev_count)
	     USING (item_id)),
c AS (
	INSERT INTO price_candles AS c (item_id, resolution, bucket, snapshots, open_at, open_price, high_price, low_price,
		close_at, close_price, listings_min, listings_max)
	` + candleFigures + `
	ON CONFLICT (item_id, resolution, bucket) DO UPDATE
	SET snapshots = c.snapshots + excluded.snapshots,
	    open_price = CASE WHEN c.open_at IS NULL OR excluded.open_at < c.open_at THEN excluded.open_price ELSE c.open_price END,
	    open_at = least(c.open_at, excluded.open_at),
	    high_price = greatest(c.high_price, excluded.high_price),
	    low_price = least(c.low_price, excluded.low_price),
	    close_price = CASE WHEN c.close_at IS NULL OR excluded.close_at > c.close_at THEN excluded.close_price ELSE c.close_price END,
	    close_at = greatest(c.close_at, excluded.close_at),
	    listings_min = least(c.listings_min, excluded.listings_min),
	    listings_max = greatest(c.listings_max, excluded.listings_max))
SELECT snapshot_id, item_id FROM s`

func insertSnapshots(ctx context.Context, tx pgx.Tx, cs []Collection, write []int, agg map[string]salesAgg, out []Stored) ([]outbox.SnapshotEvent, error) {
	n := len(write)
	ids := make([]string, n)
	tokens := make([]pgtype.UUID, n)
	at := make([]time.Time, n)
	tierNames := make([]string, n)
	reasons := make([]string, n)
	counts := make([]int32, n)
	quantities := make([]int64, n)
	lowest := make([]*int64, n)
	median := make([]*int64, n)
	weighted := make([]*float64, n)
	apiAvg := make([]*int64, n)
	salesCount := make([]int32, n)
	salesQty := make([]int64, n)
	vwap := make([]*float64, n)
	truncated := make([]bool, n)
	packed := make([]bool, n)
	prevSeen, prevAt := make([]*time.Time, n), make([]*time.Time, n)
	prevLowest, prevCount := make([]*int64, n), make([]*int32, n)
	events := make([]outbox.SnapshotEvent, n)
	byID := make(map[string]int, n)
	for k, i := range write {
		c, s := cs[i], cs[i].State
		ids[k], tokens[k], at[k], tierNames[k], reasons[k] = c.ItemID, c.Token, c.At, c.Tier, string(out[i].Reason)
		counts[k], quantities[k] = int32(s.Count), s.Quantity
		lowest[k], median[k], weighted[k], apiAvg[k] = s.Lowest, s.Median, s.Weighted, s.APIAverage
		truncated[k], packed[k] = s.Truncated, c.Packed
		ev := outbox.SnapshotEvent{
			ItemID: c.ItemID, ItemName: c.ItemName, Tier: c.Tier, Reason: string(out[i].Reason),
			CollectedAt: c.At.UTC(), ListingCount: s.Count, ListingQuantity: s.Quantity,
			LowestUnitPrice: s.Lowest, MedianUnitPrice: s.Median, WeightedUnitPrice: s.Weighted,
			APIAveragePrice: s.APIAverage, ListingsTruncated: s.Truncated, Packed: c.Packed,
			SalesGap: c.SalesGap,
		}
		if c.Last != nil {
			prev := c.Last.At.UTC()
			ev.PreviousSnapshotAt = &prev
			cnt := int32(c.Last.State.Count)
			prevAt[k], prevLowest[k], prevCount[k], prevSeen[k] = &prev, c.Last.State.Lowest, &cnt, c.SeenAt
		}
		if c.SeenAt != nil {
			seen := c.SeenAt.UTC()
			ev.UnchangedUntil = &seen
		}
		if a := agg[c.ItemID]; a.quantity > 0 {
			v := a.value / float64(a.quantity)
			salesCount[k], salesQty[k], vwap[k] = int32(a.count), a.quantity, &v
			ev.SalesCount, ev.SalesQuantity, ev.SalesVWAP = a.count, a.quantity, &v
		}
		events[k] = ev
		byID[c.ItemID] = k
	}
	rows, err := tx.Query(ctx, insertSnapshotsSQL,
		ids, tokens, at, tierNames, reasons, counts, quantities, lowest, median, weighted, apiAvg,
		salesCount, salesQty, vwap, truncated, packed, prevSeen, prevAt, prevLowest, prevCount)
	if err != nil {
		return nil, fmt.Errorf("insert snapshots: %w", err)
	}
	inserted, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.SnapshotEvent, error) {
		var id int64
		var item string
		if err := row.Scan(&id, &item); err != nil {
			return outbox.SnapshotEvent{}, err
		}
		k := byID[item]
		out[write[k]].SnapshotID = id
		ev := events[k]
		ev.SnapshotID = id
		return ev, nil
	})
	if err != nil {
		return nil, fmt.Errorf("insert snapshots: %w", err)
	}
	return inserted, nil
}

// RebuildCandles recomputes the candles of the items from their stored snapshots and sales, for
// rows written past the write-back (dev fixtures).
func RebuildCandles(ctx context.Context, tx pgx.Tx, itemIDs []string) error {
	if _, err := tx.Exec(ctx, `DELETE FROM price_candles WHERE item_id = ANY ($1)`, itemIDs); err != nil {
		return fmt.Errorf("rebuild candles: %w", err)
	}
	if _, err := tx.Exec(ctx, rebuildCandlesSQL, itemIDs); err != nil {
		return fmt.Errorf("rebuild candles: %w", err)
	}
	return nil
}

const rebuildCandlesSQL = `
WITH sp AS (
	SELECT item_id, collected_at, lowest_unit_price, listing_count, previous_seen_at,
	       lag(collected_at) OVER w AS prev_at, lag(lowest_unit_price) OVER w AS prev_lowest, lag(listing_count) OVER w AS prev_count
	FROM auction_snapshots WHERE item_id = ANY ($1)
	WINDOW w AS (PARTITION BY item_id ORDER BY collected_at)),
snap AS (` + candleFigures + `),
sale AS (
	SELECT s.item_id, r.resolution, date_bin(r.width, s.sold_at, '2000-01-01 00:00:00+00') AS bucket,
	       count(*) AS n, sum(quantity) AS q, sum(quantity::numeric * unit_price) AS v
	FROM auction_sales s CROSS JOIN ` + candleWidths + ` WHERE s.item_id = ANY ($1) GROUP BY 1, 2, 3)
INSERT INTO price_candles (item_id, resolution, bucket, snapshots, open_at, open_price, high_price, low_price,
	close_at, close_price, listings_min, listings_max, sales_count, sales_quantity, sales_value)
SELECT item_id, resolution, bucket, coalesce(snap.n, 0), open_at, open, high, low, close_at, close, lmin, lmax,
       coalesce(sale.n, 0), coalesce(sale.q, 0), coalesce(sale.v, 0)
FROM snap FULL JOIN sale USING (item_id, resolution, bucket)`

// Item is one claimed item's write-back: the lease that fences it (Token, its row found at TID),
// its next slot and outcome, and, when Err is nil, what its collection saw.
type Item struct {
	Collection
	TID     pgtype.TID
	NextAt  pgtype.Timestamptz // not Valid: the tier has no next slot
	Outcome string
	Err     *string       // nil: collected
	Window  time.Duration // how fast the change counts decay
	// The item's decayed change counts and sales as its claim read them (only the lease holder
	// writes them, so they are current): Rows adds this collection's interval to them. Observed
	// says an earlier collection recorded a market, so the interval since it can be measured.
	Est      tierplan.Observations
	EstSales float64
	Observed bool
}

// WriteItems stores, in the caller's transaction, what the collections of the items still
// ours bring (live: the items catalog.WriteBack wrote, its row locks held until commit) and
// returns what it stored. The item rows record Decide's answer in the same write, so Rows
// decides before the statement runs and Write decides the same again.
func (p Policy) WriteItems(ctx context.Context, tx pgx.Tx, items []Item, live map[string]bool) ([]Stored, error) {
	var ours []Collection
	for _, it := range items {
		if it.Err == nil && live[it.ItemID] {
			ours = append(ours, it.Collection)
		}
	}
	if len(ours) == 0 {
		return nil, nil
	}
	return p.Write(ctx, tx, ours)
}

// Rows are a batch of item write-backs as the columns catalog.WriteBack stores, one slice per
// column: each item's next slot and outcome, and for a collection the market of its last
// snapshot (when one was written, its time), where its stored sales end, and its decayed
// change and sales counts with this collection's interval added.
type Rows struct {
	IDs        []string
	Tokens     []pgtype.UUID
	Tiers      []string
	NextAt     []pgtype.Timestamptz
	AttemptAt  []time.Time
	OK         []bool
	Outcomes   []string
	Errs       []*string
	LastSale   []*time.Time
	Lowest     []*int64
	Median     []*int64
	Weighted   []*float64
	APIAverage []*int64
	Counts     []int32
	Quantity   []int64
	Truncated  []bool
	Gaps       []bool
	Est        []tierplan.Observations
	EstSales   []float64
	WrittenAt  []*time.Time
	LastSecond []int32
	TIDs       []pgtype.TID
}

// Rows decides each item's write-back row.
func (p Policy) Rows(items []Item) Rows {
	n := len(items)
	r := Rows{IDs: make([]string, n), Tokens: make([]pgtype.UUID, n), Tiers: make([]string, n),
		NextAt: make([]pgtype.Timestamptz, n), AttemptAt: make([]time.Time, n),
		OK: make([]bool, n), Outcomes: make([]string, n), Errs: make([]*string, n),
		LastSale: make([]*time.Time, n), WrittenAt: make([]*time.Time, n),
		Lowest: make([]*int64, n), Median: make([]*int64, n), APIAverage: make([]*int64, n),
		Weighted: make([]*float64, n), Counts: make([]int32, n), LastSecond: make([]int32, n),
		Quantity: make([]int64, n), Truncated: make([]bool, n), Gaps: make([]bool, n),
		Est: make([]tierplan.Observations, n), EstSales: make([]float64, n), TIDs: make([]pgtype.TID, n)}
	for i := range items {
		it := &items[i]
		r.IDs[i], r.Tokens[i], r.Tiers[i], r.AttemptAt[i], r.TIDs[i] = it.ItemID, it.Token, it.Tier, it.At, it.TID
		r.NextAt[i], r.OK[i], r.Outcomes[i], r.Errs[i] = it.NextAt, it.Err == nil, it.Outcome, it.Err
		r.Est[i], r.EstSales[i] = it.Est, it.EstSales
		if it.Err != nil {
			continue
		}
		r.LastSale[i], r.LastSecond[i] = lastSecondOf(it.Sales)
		l, st := it.State, p.outcome(it.Collection)
		r.Lowest[i], r.Median[i], r.Weighted[i], r.APIAverage[i] = l.Lowest, l.Median, l.Weighted, l.APIAverage
		r.Counts[i], r.Quantity[i], r.Truncated[i], r.Gaps[i] = int32(l.Count), l.Quantity, l.Truncated, it.SalesGap
		r.Est[i], r.EstSales[i] = it.observe(st)
		if st.Reason != Skip {
			r.WrittenAt[i] = &it.At
		}
	}
	return r
}

// observe adds the interval since the item's previous successful collection to its decayed
// counts (tierplan.Observations.Decay then Observe; its sales decay by the same factor): whether
// the market changed in it (st, Decide's answer) and the new sales. The first collection, with
// nothing to measure from, only records the market.
func (it *Item) observe(st Stored) (tierplan.Observations, float64) {
	if !it.Observed || it.SeenAt == nil {
		return it.Est, it.EstSales
	}
	secs, win := it.At.Sub(*it.SeenAt).Seconds(), it.Window.Seconds()
	if !(secs > 0) {
		return it.Est, it.EstSales
	}
	return it.Est.Decay(secs, win).Observe(secs, st.Reason == Change),
		it.EstSales*tierplan.DecayFactor(secs, win) + float64(st.NewSales)
}
