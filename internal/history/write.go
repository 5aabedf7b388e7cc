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
	// decision (Outcome) is known before anything is written. The insert still skips any that
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

// Outcome is what Write will store for c, known before anything is written, so the caller can
// record it on the item in the same statement that fences the batch.
func (p Policy) Outcome(c Collection) Stored {
	return Stored{Reason: p.Decide(c.Last, c.State, len(c.Sales), c.At), NewSales: len(c.Sales)}
}

// Write stores a batch of collections in the caller's transaction: the new sales, then a
// snapshot, its candles and its event for each collection the policy writes (Outcome). The
// caller records on the item that it was seen at c.At, whatever the reason.
func (p Policy) Write(ctx context.Context, tx pgx.Tx, cs []Collection) ([]Stored, error) {
	out := make([]Stored, len(cs))
	agg, err := insertSales(ctx, tx, cs)
	if err != nil {
		return nil, err
	}
	var write []int
	for i, c := range cs {
		out[i] = p.Outcome(c)
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
	FROM s CROSS JOIN (VALUES ('1h', interval '1 hour'), ('1d', interval '1 day')) AS r(resolution, width)
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

// InsertSnapshotsSQL (exported for the benchmark's raw-SQL ceiling) stores a batch's snapshots, once per claim, and folds exactly the stored
// ones into their hours' and days' candles (open and close by collected_at, so the order
// write-backs commit in does not matter); it returns the new snapshot ids.
const InsertSnapshotsSQL = `
WITH s AS (
	INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, reason, listing_count, listing_quantity,
		lowest_unit_price, median_unit_price, weighted_unit_price, api_average_price,
		sales_count, sales_quantity, sales_vwap, listings_truncated, packed)
	SELECT * FROM unnest($1::text[], $2::uuid[], $3::timestamptz[], $4::text[], $5::text[], $6::int[], $7::bigint[],
		$8::bigint[], $9::bigint[], $10::float8[], $11::bigint[], $12::int[], $13::bigint[], $14::float8[],
		$15::bool[], $16::bool[])
	ON CONFLICT (claim_token, collected_at) DO NOTHING
	RETURNING snapshot_id, item_id, collected_at, lowest_unit_price, listing_count),
c AS (
	INSERT INTO price_candles AS c (item_id, resolution, bucket, snapshots, open_at, open_price, high_price, low_price,
		close_at, close_price, listings_min, listings_max)
	SELECT s.item_id, r.resolution, date_bin(r.width, s.collected_at, '2000-01-01 00:00:00+00'), count(*),
	       min(s.collected_at), (array_agg(s.lowest_unit_price ORDER BY s.collected_at))[1],
	       max(s.lowest_unit_price), min(s.lowest_unit_price),
	       max(s.collected_at), (array_agg(s.lowest_unit_price ORDER BY s.collected_at DESC))[1],
	       min(s.listing_count), max(s.listing_count)
	FROM s CROSS JOIN (VALUES ('1h', interval '1 hour'), ('1d', interval '1 day')) AS r(resolution, width)
	GROUP BY 1, 2, 3
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
	rows, err := tx.Query(ctx, InsertSnapshotsSQL,
		ids, tokens, at, tierNames, reasons, counts, quantities, lowest, median, weighted, apiAvg,
		salesCount, salesQty, vwap, truncated, packed)
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
WITH r(resolution, width) AS (VALUES ('1h', interval '1 hour'), ('1d', interval '1 day')),
snap AS (
	SELECT s.item_id, r.resolution, date_bin(r.width, s.collected_at, '2000-01-01 00:00:00+00') AS bucket,
	       count(*) AS n, min(collected_at) AS open_at, (array_agg(lowest_unit_price ORDER BY collected_at))[1] AS open,
	       max(lowest_unit_price) AS high, min(lowest_unit_price) AS low, max(collected_at) AS close_at,
	       (array_agg(lowest_unit_price ORDER BY collected_at DESC))[1] AS close,
	       min(listing_count) AS lmin, max(listing_count) AS lmax
	FROM auction_snapshots s CROSS JOIN r WHERE s.item_id = ANY ($1) GROUP BY 1, 2, 3),
sale AS (
	SELECT s.item_id, r.resolution, date_bin(r.width, s.sold_at, '2000-01-01 00:00:00+00') AS bucket,
	       count(*) AS n, sum(quantity) AS q, sum(quantity::numeric * unit_price) AS v
	FROM auction_sales s CROSS JOIN r WHERE s.item_id = ANY ($1) GROUP BY 1, 2, 3)
INSERT INTO price_candles (item_id, resolution, bucket, snapshots, open_at, open_price, high_price, low_price,
	close_at, close_price, listings_min, listings_max, sales_count, sales_quantity, sales_value)
SELECT item_id, resolution, bucket, coalesce(snap.n, 0), open_at, open, high, low, close_at, close, lmin, lmax,
       coalesce(sale.n, 0), coalesce(sale.q, 0), coalesce(sale.v, 0)
FROM snap FULL JOIN sale USING (item_id, resolution, bucket)`
