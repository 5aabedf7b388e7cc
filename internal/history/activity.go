package history

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Activity is an item's recent market, as the popularity score weighs it.
type Activity struct {
	Sales int64   // sales in the window
	Gold  float64 // their total price
	Churn float64 // listings added or removed between the item's snapshots in the window
}

// RecentActivity reads the activity of each of ids since a time (the caller's database clock
// less its window), in ids' order, in one statement. It aggregates the window's rows of each
// table once and joins them to ids: the partitions before the window are pruned when the
// statement is planned (a bound the planner cannot evaluate, now() less an interval, would
// open and lock every partition to prune them only at execution), and a recalculation reads
// every item, so one pass over the window beats a probe of each item's index
// (BenchmarkRecalculationAtScale in BENCHMARKS.md). Most of what is left is ordering the
// window's snapshots for the churn.
func RecentActivity(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, ids []string, since time.Time) ([]Activity, error) {
	// Each id once: the joins below would count an id's rows once for every time it is asked.
	asked := slices.Compact(slices.Sorted(slices.Values(ids)))
	rows, err := q.Query(ctx, `
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
		SELECT coalesce(sa.n, 0), coalesce(sa.gold, 0), coalesce(ch.churn, 0)
		FROM ids LEFT JOIN sa USING (item_id) LEFT JOIN ch USING (item_id)
		ORDER BY ids.pos`, asked, since)
	if err != nil {
		return nil, fmt.Errorf("read recent activity of %d items: %w", len(ids), err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Activity])
	if err != nil {
		return nil, fmt.Errorf("read recent activity of %d items: %w", len(ids), err)
	}
	out := make([]Activity, len(ids))
	for i, id := range ids {
		j, _ := slices.BinarySearch(asked, id)
		out[i] = got[j]
	}
	return out, nil
}
