package history

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/store"
)

// Activity is an item's recent market, as the popularity score weighs it.
type Activity struct {
	Sales int64   // sales in the window
	Gold  float64 // their total price
	Churn float64 // listings added or removed between the item's snapshots in the window
}

// RecentActivity calls fn with the activity of each of ids since a time (the caller's
// database clock less its window), each id once, in their byte order. It aggregates the
// window's rows of each table once and joins them to ids: the partitions before the window
// are pruned when the statement is planned (a bound the planner cannot evaluate, now() less
// an interval, would open and lock every partition to prune them only at execution), and a
// recalculation reads every item, so one pass over the window beats a probe of each item's
// index (BenchmarkRecalculationAtScale in BENCHMARKS.md). Most of what is left is ordering
// the window's snapshots for the churn. The rows come through a cursor (store.EachRow): the
// recalculation reads them in the transaction that holds its lock, which a reader frozen
// mid-read must not keep for good.
func RecentActivity(ctx context.Context, tx pgx.Tx, ids []string, since time.Time, fn func(itemID string, a Activity) error) error {
	// Each id once: the joins below would count an id's rows once for every time it is asked.
	asked := slices.Compact(slices.Sorted(slices.Values(ids)))
	fnFailed := false // fn's own error comes back as it was; the rest say what was read
	err := store.EachRow(ctx, tx, "recent_activity", `
		WITH ids AS (
			SELECT item_id, pos FROM unnest($1::text[]) WITH ORDINALITY AS u(item_id, pos)
		), sa AS (
			SELECT s.item_id, count(*) AS n, sum(s.total_price)::float8 AS gold
			FROM auction_sales s JOIN ids USING (item_id)
			WHERE s.sold_at > $2
			GROUP BY s.item_id
		), ch AS (
			SELECT item_id, sum(abs(d))::float8 AS churn FROM (
				SELECT a.item_id, a.listing_count - lag(a.listing_count) OVER (PARTITION BY a.item_id ORDER BY a.collected_at) AS d
				FROM auction_snapshots a JOIN ids USING (item_id)
				WHERE a.collected_at > $2
			) x
			GROUP BY item_id
		)
		SELECT ids.item_id, coalesce(sa.n, 0), coalesce(sa.gold, 0), coalesce(ch.churn, 0)
		FROM ids LEFT JOIN sa USING (item_id) LEFT JOIN ch USING (item_id)
		ORDER BY ids.pos`, []any{asked, since}, func(rows pgx.Rows) error {
		var id string
		var a Activity
		if err := rows.Scan(&id, &a.Sales, &a.Gold, &a.Churn); err != nil {
			return err
		}
		err := fn(id, a)
		fnFailed = err != nil
		return err
	})
	if err != nil && !fnFailed {
		return fmt.Errorf("read recent activity of %d items: %w", len(asked), err)
	}
	return err
}
