package history

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

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
