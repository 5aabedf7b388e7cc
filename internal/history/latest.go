package history

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Latest is an item's current market: the figures of its last snapshot (SnapshotAt), which
// still held when it was last collected (SeenAt, later when collections since saw nothing
// new). Figures are nil before the item's first snapshot, and prices when nothing was listed.
type Latest struct {
	ItemID       string
	Name         string
	Tier         string
	SnapshotAt   *time.Time
	SeenAt       *time.Time
	Lowest       *int64
	Median       *int64
	Weighted     *float64
	APIAverage   *int64
	ListingCount *int
	Quantity     *int64
	Truncated    *bool
}

// LatestStates returns every tracked item's current market in item id order (synthetic
// fixtures left out), with the database's clock at the read. The write-back keeps these
// figures on the item's row (seen_*), so this is one pass over tracked_items whatever the
// history holds.
func LatestStates(ctx context.Context, db Reader) ([]Latest, time.Time, error) {
	return latest(ctx, db, `NOT synthetic_item(item_id)`)
}

// LatestOf is LatestStates for the given ids; ids nobody tracks are left out.
func LatestOf(ctx context.Context, db Reader, ids []string) ([]Latest, time.Time, error) {
	return latest(ctx, db, `item_id = ANY($1) AND NOT synthetic_item(item_id)`, ids)
}

func latest(ctx context.Context, db Reader, where string, args ...any) ([]Latest, time.Time, error) {
	var now time.Time
	rows, err := db.Query(ctx, `
		SELECT now(), item_id, item_name, collection_tier, last_snapshot_at, last_collected_at,
		       seen_lowest_price, seen_median_price, seen_weighted_price, seen_api_average_price,
		       seen_listing_count, seen_listing_quantity, seen_truncated
		FROM tracked_items WHERE `+where+` ORDER BY item_id`, args...)
	if err != nil {
		return nil, now, fmt.Errorf("read the latest markets: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Latest, error) {
		var l Latest
		err := r.Scan(&now, &l.ItemID, &l.Name, &l.Tier, &l.SnapshotAt, &l.SeenAt, &l.Lowest, &l.Median, &l.Weighted,
			&l.APIAverage, &l.ListingCount, &l.Quantity, &l.Truncated)
		return l, err
	})
	if err != nil {
		return nil, now, fmt.Errorf("read the latest markets: %w", err)
	}
	if len(out) == 0 {
		if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return nil, now, fmt.Errorf("read the database clock: %w", err)
		}
	}
	return out, now, nil
}
