package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/history"
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
func LatestStates(ctx context.Context, db history.Reader) ([]Latest, time.Time, error) {
	return latest(ctx, db, `NOT synthetic_item(item_id)`)
}

// LatestOf is LatestStates for the given ids; ids nobody tracks are left out.
func LatestOf(ctx context.Context, db history.Reader, ids []string) ([]Latest, time.Time, error) {
	return latest(ctx, db, `item_id = ANY($1) AND NOT synthetic_item(item_id)`, ids)
}

// LatestChanged is LatestStates of the items whose row was written at or after since (every
// writer of these columns sets updated_at, to its transaction's start), with how many items
// LatestStates would return, so a reader holding the rest can tell an item left or came. One
// pass over the rows' updated_at, no index: a few milliseconds at 20,000 items.
func LatestChanged(ctx context.Context, db history.Reader, since time.Time) ([]Latest, time.Time, int, error) {
	var now time.Time
	var total int
	rows, err := db.Query(ctx, `
		WITH c AS (SELECT now() AS now, count(*)::int AS n FROM tracked_items WHERE NOT synthetic_item(item_id))
		SELECT c.now, c.n, t.item_id, t.item_name, t.collection_tier, t.last_snapshot_at, t.last_collected_at,
		       t.seen_lowest_price, t.seen_median_price, t.seen_weighted_price, t.seen_api_average_price,
		       t.seen_listing_count, t.seen_listing_quantity, t.seen_truncated
		FROM c LEFT JOIN tracked_items t ON t.updated_at >= $1 AND NOT synthetic_item(t.item_id)
		ORDER BY t.item_id`, since)
	if err != nil {
		return nil, now, 0, fmt.Errorf("read the changed markets: %w", err)
	}
	var out []Latest
	for rows.Next() {
		var id, name, tier *string
		var l Latest
		if err := rows.Scan(&now, &total, &id, &name, &tier, &l.SnapshotAt, &l.SeenAt, &l.Lowest, &l.Median, &l.Weighted,
			&l.APIAverage, &l.ListingCount, &l.Quantity, &l.Truncated); err != nil {
			rows.Close()
			return nil, now, 0, fmt.Errorf("read the changed markets: %w", err)
		}
		if id != nil { // nil: the one row of no change
			l.ItemID, l.Name, l.Tier = *id, *name, *tier
			out = append(out, l)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, now, 0, fmt.Errorf("read the changed markets: %w", err)
	}
	return out, now, total, nil
}

func latest(ctx context.Context, db history.Reader, where string, args ...any) ([]Latest, time.Time, error) {
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
