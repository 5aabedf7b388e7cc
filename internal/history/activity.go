package history

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Activity is an item's recent market, as the popularity score weighs it.
type Activity struct {
	Sales int64   // sales in the window
	Gold  float64 // their total price
	Churn float64 // listings added or removed between the item's snapshots in the window
}

// RecentActivity reads the activity of each of ids over the last window, in ids' order, in
// one statement. Each item's subqueries walk its (item_id, time) index over just the window
// (the partitions before it are pruned), so the cost grows with the items and the recent
// activity, not with the size of the history tables.
func RecentActivity(ctx context.Context, q interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, ids []string, window time.Duration) ([]Activity, error) {
	rows, err := q.Query(ctx, `
		SELECT sa.n, sa.gold, ch.churn
		FROM unnest($1::text[]) WITH ORDINALITY AS u(item_id, pos)
		CROSS JOIN LATERAL (
			SELECT count(*) AS n, coalesce(sum(total_price), 0)::float8 AS gold
			FROM auction_sales s WHERE s.item_id = u.item_id AND s.sold_at > now() - $2::float8 * interval '1 second'
		) sa
		CROSS JOIN LATERAL (
			SELECT coalesce(sum(abs(d)), 0)::float8 AS churn FROM (
				SELECT listing_count - lag(listing_count) OVER (ORDER BY collected_at) AS d
				FROM auction_snapshots a WHERE a.item_id = u.item_id AND a.collected_at > now() - $2::float8 * interval '1 second'
			) x
		) ch
		ORDER BY u.pos`, ids, window.Seconds())
	if err != nil {
		return nil, fmt.Errorf("read recent activity of %d items: %w", len(ids), err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Activity])
	if err != nil {
		return nil, fmt.Errorf("read recent activity of %d items: %w", len(ids), err)
	}
	return out, nil
}
