package catalog

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/history"
)

// WriteBack writes each item of a batch once in the caller's transaction, fenced by its lease
// token (writeItemsSQL), and returns the items it wrote: those still ours, now locked until
// commit, whose collections history.Policy.WriteItems then stores.
func WriteBack(ctx context.Context, tx pgx.Tx, r history.Rows) (map[string]bool, error) {
	n := len(r.IDs)
	estN, estX, estC, estU := make([]float64, n), make([]float64, n), make([]float64, n), make([]float64, n)
	for i, e := range r.Est {
		estN[i], estX[i], estC[i], estU[i] = e.Accesses, e.Changes, e.ChangedSeconds, e.UnchangedSeconds
	}
	args := []any{r.IDs, r.Tokens, r.Tiers, r.NextAt, r.AttemptAt, r.OK, r.Outcomes, r.Errs, r.LastSale,
		r.Lowest, r.Median, r.Weighted, r.APIAverage, r.Counts, r.Quantity, r.Truncated,
		r.Gaps, r.WrittenAt, r.LastSecond, r.TIDs, estN, estX, estC, estU, r.EstSales}
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

// writeItemsSQL writes each item of a batch once, fenced by its lease token, and returns the
// items it wrote (those still ours, now locked until commit): its next slot and outcome with
// the lease cleared; if the tier changed while the item was leased, whoever changed it also set
// the new schedule, which is kept. For a collection it records the market of the item's last
// snapshot and, when one was written, its time, and where its stored sales end;
// last_collected_at is also when that snapshot was last seen unchanged. The decayed change and
// sales counts are stored as history worked them out (history.Policy.Rows) from the values
// the claim read: only the lease holder writes them.
//
// It finds each row by the ctid its claim returned ($20), a TID lookup instead of a
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
	SELECT * FROM unnest($1::text[], $2::uuid[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::bool[], $7::text[], $8::text[],
	            $9::timestamptz[], $10::bigint[], $11::bigint[], $12::float8[], $13::bigint[], $14::int[], $15::bigint[], $16::bool[],
	            $17::bool[], $18::timestamptz[], $19::int[], $20::tid[], $21::float8[], $22::float8[], $23::float8[], $24::float8[],
	            $25::float8[])
	     AS u(item_id, token, tier, next_at, attempt_at, ok, outcome, err, last_sale,
	          lowest, median, weighted, api_avg, cnt, qty, truncated, gap, written_at, last_second, tid,
	          est_n, est_x, est_c, est_u, est_sales)
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
    est_collections = o.est_n,
    est_changes = o.est_x,
    est_changed_seconds = o.est_c,
    est_unchanged_seconds = o.est_u,
    est_sales = o.est_sales,
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
