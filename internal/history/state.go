package history

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// updateStateSQL records on item_state what a batch of successful collections learnt: the
// market each saw (the last snapshot's, whether or not one was written: an unchanged market
// equals it), when a snapshot was last written, where the stored sales end, any sales gap, and
// one more observed interval in the decayed counts (the same arithmetic as
// tierplan.Observations.Decay then Observe, TestStateDecayMatchesTierplan): the interval since
// the previous successful collection ($13), whether the market changed in it, and its new
// sales. The first collection (no market seen yet) only records the market. Each count repeats
// the test "observed" so the batch meets the table once, in the UPDATE.
const updateStateSQL = `
WITH o AS (
	SELECT u.*, extract(epoch FROM u.at - u.prev_at)::float8 AS secs
	FROM unnest($1::text[], $2::timestamptz[], $3::bigint[], $4::bigint[], $5::float8[], $6::bigint[], $7::int[], $8::bigint[],
	            $9::bool[], $10::bool[], $11::int[], $12::bool[], $13::timestamptz[], $14::float8[], $15::timestamptz[],
	            $16::timestamptz[], $17::int[])
	     AS u(item_id, at, lowest, median, weighted, api_avg, cnt, qty, truncated, changed, new_sales, gap, prev_at, win,
	          written_at, last_sale, last_second)
)
UPDATE item_state s
SET sales_gaps = s.sales_gaps + o.gap::int,
    seen_truncated = o.truncated, seen_listing_count = o.cnt, seen_listing_quantity = o.qty,
    seen_lowest_price = o.lowest, seen_median_price = o.median, seen_weighted_price = o.weighted,
    seen_api_average_price = o.api_avg,
    last_snapshot_at = coalesce(o.written_at, s.last_snapshot_at),
    last_sale_at = greatest(s.last_sale_at, o.last_sale),
    last_second_sales = CASE WHEN o.last_sale IS NULL OR o.last_sale < s.last_sale_at THEN s.last_second_sales
                             WHEN o.last_sale = s.last_sale_at THEN greatest(s.last_second_sales, o.last_second)
                             ELSE o.last_second END,
    est_collections = CASE WHEN s.seen_listing_count IS NOT NULL AND o.secs > 0 AND o.win > 0
                           THEN s.est_collections * exp(-o.secs / o.win) + 1 ELSE s.est_collections END,
    est_changes = CASE WHEN s.seen_listing_count IS NOT NULL AND o.secs > 0 AND o.win > 0
                       THEN s.est_changes * exp(-o.secs / o.win) + o.changed::int ELSE s.est_changes END,
    est_changed_seconds = CASE WHEN s.seen_listing_count IS NOT NULL AND o.secs > 0 AND o.win > 0
                               THEN s.est_changed_seconds * exp(-o.secs / o.win) + CASE WHEN o.changed THEN o.secs ELSE 0 END
                               ELSE s.est_changed_seconds END,
    est_unchanged_seconds = CASE WHEN s.seen_listing_count IS NOT NULL AND o.secs > 0 AND o.win > 0
                                 THEN s.est_unchanged_seconds * exp(-o.secs / o.win) + CASE WHEN o.changed THEN 0 ELSE o.secs END
                                 ELSE s.est_unchanged_seconds END,
    est_sales = CASE WHEN s.seen_listing_count IS NOT NULL AND o.secs > 0 AND o.win > 0
                     THEN s.est_sales * exp(-o.secs / o.win) + o.new_sales ELSE s.est_sales END
FROM o
WHERE s.item_id = o.item_id`

// updateState writes what each collection of cs learnt on its item_state row; out is Write's
// decision for each.
func updateState(ctx context.Context, tx pgx.Tx, cs []Collection, out []Stored) error {
	n := len(cs)
	ids, at := make([]string, n), make([]time.Time, n)
	lowest, median, apiAvg := make([]*int64, n), make([]*int64, n), make([]*int64, n)
	weighted := make([]*float64, n)
	counts, newSales, lastSecond := make([]int32, n), make([]int32, n), make([]int32, n)
	qty := make([]int64, n)
	truncated, changed, gaps := make([]bool, n), make([]bool, n), make([]bool, n)
	prevAt, writtenAt, lastSale := make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
	windows := make([]float64, n)
	for i, c := range cs {
		s := c.State
		ids[i], at[i], prevAt[i], windows[i] = c.ItemID, c.At, c.SeenAt, c.Window.Seconds()
		lowest[i], median[i], weighted[i], apiAvg[i] = s.Lowest, s.Median, s.Weighted, s.APIAverage
		counts[i], qty[i], truncated[i] = int32(s.Count), s.Quantity, s.Truncated
		changed[i], newSales[i], gaps[i] = out[i].Reason == Change, int32(len(c.Sales)), c.SalesGap
		if out[i].Reason != Skip {
			writtenAt[i] = &cs[i].At
		}
		lastSale[i], lastSecond[i] = lastSecondOf(c.Sales)
	}
	if _, err := tx.Exec(ctx, updateStateSQL, ids, at, lowest, median, weighted, apiAvg, counts, qty, truncated, changed,
		newSales, gaps, prevAt, windows, writtenAt, lastSale, lastSecond); err != nil {
		return fmt.Errorf("update item state: %w", err)
	}
	return nil
}

// lastSecondOf is the newest second among sales and how many of its positions they fill (the
// item's new last_sale_at and last_second_sales once they are stored); nil without sales.
func lastSecondOf(sales []Sale) (*time.Time, int32) {
	var last *time.Time
	var n int32
	for i := range sales {
		switch s := &sales[i]; {
		case last == nil || s.SoldAt.After(*last):
			last, n = &s.SoldAt, s.Seq+1
		case s.SoldAt.Equal(*last):
			n = max(n, s.Seq+1)
		}
	}
	return last, n
}
