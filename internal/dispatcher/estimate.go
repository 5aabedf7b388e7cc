package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/duecollector/duecollector/internal/provider"
)

// salesGap reports whether sales were lost between two fetches: a full /df/auction-sold page
// (as sent: rows the row check dropped still filled it) whose oldest kept sale is newer than
// the newest sale already stored. With no sale stored, the
// item's last collection bounds what was seen (its page was empty); before the first
// collection there is nothing to compare with.
func salesGap(rows []provider.Sale, full bool, lastStored, lastCollected *time.Time) bool {
	if lastStored == nil {
		lastStored = lastCollected
	}
	if lastStored == nil || !full || len(rows) == 0 {
		return false
	}
	oldest := rows[0].SoldAt
	for _, r := range rows[1:] {
		if r.SoldAt.Before(oldest) {
			oldest = r.SoldAt
		}
	}
	return oldest.Truncate(time.Second).After(*lastStored)
}

// observeChangesSQL adds one interval to each collected item's decayed counts (the same
// arithmetic as tierplan.Observations.Decay then Observe): the interval since its last
// successful collection, whether the listings (lowest unit price, count, quantity) changed or
// new sales arrived in it, and the new sales. The first collection only records the listings.
// Fenced by the lease token; it runs before the reschedule clears it.
const observeChangesSQL = `
WITH o AS (
	SELECT u.item_id, u.token, u.lowest, u.cnt, u.qty, u.new_sales, u.gap,
	       CASE WHEN obs THEN exp(-secs / u.win) ELSE 1 END AS f,
	       CASE WHEN obs THEN 1 ELSE 0 END AS n,
	       CASE WHEN obs AND (t.seen_lowest_price IS DISTINCT FROM u.lowest OR t.seen_listing_count IS DISTINCT FROM u.cnt
	                          OR t.seen_listing_quantity IS DISTINCT FROM u.qty OR u.new_sales > 0) THEN 1 ELSE 0 END AS x,
	       CASE WHEN obs THEN secs ELSE 0 END AS secs
	FROM unnest($1::text[], $2::uuid[], $3::timestamptz[], $4::bigint[], $5::int[], $6::bigint[], $7::int[], $8::bool[], $9::float8[])
	     AS u(item_id, token, at, lowest, cnt, qty, new_sales, gap, win)
	JOIN tracked_items t ON t.item_id = u.item_id AND t.lease_token = u.token
	CROSS JOIN LATERAL (SELECT extract(epoch FROM u.at - t.last_collected_at)::float8 AS secs) s
	CROSS JOIN LATERAL (SELECT t.seen_listing_count IS NOT NULL AND s.secs > 0 AS obs) b
)
UPDATE tracked_items t
SET est_collections = t.est_collections * o.f + o.n,
    est_changes = t.est_changes * o.f + o.x,
    est_changed_seconds = t.est_changed_seconds * o.f + o.x * o.secs,
    est_unchanged_seconds = t.est_unchanged_seconds * o.f + (o.n - o.x) * o.secs,
    est_sales = t.est_sales * o.f + o.n * o.new_sales,
    seen_lowest_price = o.lowest, seen_listing_count = o.cnt, seen_listing_quantity = o.qty,
    sales_gaps = t.sales_gaps + o.gap::int
FROM o
WHERE t.item_id = o.item_id AND t.lease_token = o.token`

// observeChanges updates the change and sales counts of the collected items in ok.
func observeChanges(ctx context.Context, tx pgx.Tx, ok []result) error {
	n := len(ok)
	ids := make([]string, n)
	tokens := make([]pgtype.UUID, n)
	at := make([]time.Time, n)
	lowest := make([]*int64, n)
	counts := make([]int32, n)
	qty := make([]int64, n)
	newSales := make([]int32, n)
	gaps := make([]bool, n)
	windows := make([]float64, n)
	for i, r := range ok {
		ids[i], tokens[i], at[i] = r.claim.ItemID, r.claim.Token, r.at
		lowest[i], counts[i], qty[i] = r.listings.Lowest, int32(r.listings.Count), r.listings.Quantity
		for _, s := range r.sales {
			// Sales of the stored second itself may be known; only later seconds are surely new.
			if r.claim.LastSaleAt == nil || s.SoldAt.After(*r.claim.LastSaleAt) {
				newSales[i]++
			}
		}
		gaps[i], windows[i] = r.salesGap, r.window.Seconds()
	}
	if _, err := tx.Exec(ctx, observeChangesSQL, ids, tokens, at, lowest, counts, qty, newSales, gaps, windows); err != nil {
		return fmt.Errorf("observe changes: %w", err)
	}
	return nil
}
