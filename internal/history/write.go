package history

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/duecollector/duecollector/internal/outbox"
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

// outcome is what Write will store for c, known before anything is written, so WriteItems can
// record it on the item in the same statement that fences the batch.
func (p Policy) outcome(c Collection) Stored {
	return Stored{Reason: p.Decide(c.Last, c.State, len(c.Sales), c.At), NewSales: len(c.Sales)}
}

// Write stores a batch of collections in the caller's transaction: the new sales, then a
// snapshot, its candles and its event (none with NoOutbox) for each collection the policy
// writes (Decide). The caller (WriteItems, in the same transaction) records on the item that it
// was seen at c.At, whatever the reason.
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
	INSERT INTO auction_sales (item_id, sold_at, seq, quantity, unit_price, total_price)
	SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[])
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
	for _, c := range cs {
		for _, s := range c.Sales {
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
	rows, err := tx.Query(ctx, insertSalesSQL, ids, soldAt, seqs, qty, unit, total)
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
}

// WriteItems writes back a batch of claimed items in the caller's transaction: one statement
// writes every item whose lease is still ours (its next slot, outcome, change and sales counts
// and the market of its last snapshot) and fences out the rest; then, under those row locks,
// Write stores what the collections of the items still ours bring. It returns those items and
// what Write stored. Whatever Decide says is known before the statement runs, so the item's
// row records it in the same write.
func (p Policy) WriteItems(ctx context.Context, tx pgx.Tx, items []Item) (live map[string]bool, stored []Stored, err error) {
	live, err = writeItems(ctx, tx, p, items)
	if err != nil {
		return nil, nil, err
	}
	var ours []Collection
	for _, it := range items {
		if it.Err == nil && live[it.ItemID] {
			ours = append(ours, it.Collection)
		}
	}
	if len(ours) == 0 {
		return live, nil, nil
	}
	stored, err = p.Write(ctx, tx, ours)
	return live, stored, err
}

// writeItemsSQL writes each item of a batch once, fenced by its lease token, and returns the
// items it wrote (those still ours, now locked until commit): its next slot and outcome with
// the lease cleared; if the tier changed while the item was leased, whoever changed
// it also set the new schedule, which is kept. For a collection it also adds one interval to the
// decayed counts (the same arithmetic as tierplan.Observations.Decay then Observe): the interval
// since the previous successful collection ($10, from the claim), whether the market changed in
// it (Decide), and the new sales; and it records the market of the item's last
// snapshot and, when one was written, its time, and where its stored sales end. last_collected_at
// is also when that snapshot was last seen unchanged. The first collection only records the
// market. Each count repeats the test "observed" (a successful collection with an earlier one
// to measure from) so the batch meets the table once, in the UPDATE, not in a join before it.
//
// It finds each row by the ctid its claim returned ($24), a TID lookup instead of a
// primary-key probe (a fifth of the statement's time at 1M items); a row that something else
// updated since the claim (a re-plan, a pin) has moved, is not matched, and is written by
// writeItemsByKeySQL.
const writeItemsSQL = writeItemsSet + `
WHERE t.ctid = o.tid AND t.item_id = o.item_id AND t.lease_token = o.token
RETURNING t.item_id`

// writeItemsByKeySQL is writeItemsSQL finding the rows by key: for the items whose row moved.
const writeItemsByKeySQL = writeItemsSet + `
WHERE t.item_id = o.item_id AND t.lease_token = o.token
RETURNING t.item_id`

const writeItemsSet = `
WITH o AS (
	SELECT u.*, extract(epoch FROM u.attempt_at - u.prev_at)::float8 AS secs
	FROM unnest($1::text[], $2::uuid[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::bool[], $7::text[], $8::text[],
	            $9::timestamptz[], $10::timestamptz[], $11::bigint[], $12::bigint[], $13::float8[], $14::bigint[], $15::int[],
	            $16::bigint[], $17::bool[], $18::bool[], $19::int[], $20::bool[], $21::float8[], $22::timestamptz[], $23::int[],
	            $24::tid[])
	     AS u(item_id, token, tier, next_at, attempt_at, ok, outcome, err, last_sale,
	          prev_at, lowest, median, weighted, api_avg, cnt, qty, truncated, changed, new_sales, gap, win, written_at,
	          last_second, tid)
)
UPDATE tracked_items t
SET next_collect_at = CASE WHEN t.collection_tier = o.tier THEN o.next_at ELSE t.next_collect_at END,
    lease_expires_at = NULL, lease_token = NULL, leased_by = NULL,
    last_attempt_at = o.attempt_at,
    last_collected_at = CASE WHEN o.ok THEN o.attempt_at ELSE t.last_collected_at END,
    last_outcome = o.outcome,
    failure_streak = CASE WHEN o.ok THEN 0 ELSE t.failure_streak + 1 END,
    last_error = o.err,
    last_sale_at = greatest(t.last_sale_at, o.last_sale),
    last_second_sales = CASE WHEN o.last_sale IS NULL OR o.last_sale < t.last_sale_at THEN t.last_second_sales
                             WHEN o.last_sale = t.last_sale_at THEN greatest(t.last_second_sales, o.last_second)
                             ELSE o.last_second END,
    updated_at = now(),
    est_collections = CASE WHEN o.ok AND t.seen_listing_count IS NOT NULL AND o.secs > 0
                           THEN t.est_collections * exp(-o.secs / o.win) + 1 ELSE t.est_collections END,
    est_changes = CASE WHEN o.ok AND t.seen_listing_count IS NOT NULL AND o.secs > 0
                       THEN t.est_changes * exp(-o.secs / o.win) + o.changed::int ELSE t.est_changes END,
    est_changed_seconds = CASE WHEN o.ok AND t.seen_listing_count IS NOT NULL AND o.secs > 0
                               THEN t.est_changed_seconds * exp(-o.secs / o.win) + CASE WHEN o.changed THEN o.secs ELSE 0 END
                               ELSE t.est_changed_seconds END,
    est_unchanged_seconds = CASE WHEN o.ok AND t.seen_listing_count IS NOT NULL AND o.secs > 0
                                 THEN t.est_unchanged_seconds * exp(-o.secs / o.win) + CASE WHEN o.changed THEN 0 ELSE o.secs END
                                 ELSE t.est_unchanged_seconds END,
    est_sales = CASE WHEN o.ok AND t.seen_listing_count IS NOT NULL AND o.secs > 0
                     THEN t.est_sales * exp(-o.secs / o.win) + o.new_sales ELSE t.est_sales END,
    seen_lowest_price = CASE WHEN o.ok THEN o.lowest ELSE t.seen_lowest_price END,
    seen_median_price = CASE WHEN o.ok THEN o.median ELSE t.seen_median_price END,
    seen_weighted_price = CASE WHEN o.ok THEN o.weighted ELSE t.seen_weighted_price END,
    seen_api_average_price = CASE WHEN o.ok THEN o.api_avg ELSE t.seen_api_average_price END,
    seen_listing_count = CASE WHEN o.ok THEN o.cnt ELSE t.seen_listing_count END,
    seen_listing_quantity = CASE WHEN o.ok THEN o.qty ELSE t.seen_listing_quantity END,
    seen_truncated = CASE WHEN o.ok THEN o.truncated ELSE t.seen_truncated END,
    last_snapshot_at = coalesce(o.written_at, t.last_snapshot_at),
    sales_gaps = t.sales_gaps + (o.ok AND o.gap)::int
FROM o`

// writeItems runs writeItemsSQL (then writeItemsByKeySQL for rows that moved) over items and
// returns the items it wrote.
func writeItems(ctx context.Context, tx pgx.Tx, p Policy, items []Item) (map[string]bool, error) {
	n := len(items)
	ids, tokens, tierNames := make([]string, n), make([]pgtype.UUID, n), make([]string, n)
	nextAt, attemptAt := make([]pgtype.Timestamptz, n), make([]time.Time, n)
	oks, outcomesText, errTexts := make([]bool, n), make([]string, n), make([]*string, n)
	lastSale, prevAt, writtenAt := make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
	lowest, median, apiAvg := make([]*int64, n), make([]*int64, n), make([]*int64, n)
	weighted := make([]*float64, n)
	counts, newSales, lastSecond := make([]int32, n), make([]int32, n), make([]int32, n)
	qty := make([]int64, n)
	truncated, changed, gaps := make([]bool, n), make([]bool, n), make([]bool, n)
	windows, tids := make([]float64, n), make([]pgtype.TID, n)
	for i := range items {
		it := &items[i]
		ids[i], tokens[i], tierNames[i], attemptAt[i], tids[i] = it.ItemID, it.Token, it.Tier, it.At, it.TID
		nextAt[i], oks[i], outcomesText[i], windows[i], errTexts[i] = it.NextAt, it.Err == nil, it.Outcome, it.Window.Seconds(), it.Err
		if it.Err != nil {
			continue
		}
		lastSale[i], lastSecond[i] = lastSecondOf(it.Sales)
		l, st := it.State, p.outcome(it.Collection)
		prevAt[i] = it.SeenAt
		lowest[i], median[i], weighted[i], apiAvg[i] = l.Lowest, l.Median, l.Weighted, l.APIAverage
		counts[i], qty[i], truncated[i] = int32(l.Count), l.Quantity, l.Truncated
		changed[i], newSales[i], gaps[i] = st.Reason == Change, int32(st.NewSales), it.SalesGap
		if st.Reason != Skip {
			writtenAt[i] = &it.At
		}
	}
	args := []any{ids, tokens, tierNames, nextAt, attemptAt, oks, outcomesText, errTexts, lastSale,
		prevAt, lowest, median, weighted, apiAvg, counts, qty, truncated, changed, newSales, gaps, windows, writtenAt, lastSecond, tids}
	live := make(map[string]bool, n)
	if err := collectWritten(ctx, tx, writeItemsSQL, args, live); err != nil {
		return nil, err
	}
	if len(live) < n {
		// Rows that moved since their claim (or whose lease was lost, which the key finds no
		// better). The rows just written no longer hold their token, so passing the whole batch
		// again writes none twice; this path is rare enough not to be worth trimming the arrays.
		if err := collectWritten(ctx, tx, writeItemsByKeySQL, args, live); err != nil {
			return nil, err
		}
	}
	return live, nil
}

// collectWritten runs one of the write-items statements and adds the items it wrote to live.
func collectWritten(ctx context.Context, tx pgx.Tx, sql string, args []any, live map[string]bool) error {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("write items: %w", err)
	}
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { live[id] = true; return nil }); err != nil {
		return fmt.Errorf("write items: %w", err)
	}
	return nil
}
