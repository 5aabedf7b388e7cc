package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store"
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
// fixtures left out), with the database's clock at the read and its horizon (see Horizon).
// The write-back keeps these figures on the item's row (seen_*), so this is one pass over
// tracked_items whatever the history holds.
func LatestStates(ctx context.Context, db history.Reader) ([]Latest, Clock, error) {
	return latest(ctx, db, `NOT synthetic_item(item_id)`)
}

// Clock is the database's clock at a read of the latest markets, and its horizon: the start
// of the oldest transaction then running in this database (Now when none). Every writer of
// these columns sets updated_at to its transaction's start, and one that began before the
// read may commit after it: a later read that looks for rows written since Horizon misses
// none of them, however long they ran. Sessions of other roles are invisible without
// pg_read_all_stats; a reader keeps a few seconds of overlap for them. A long transaction
// that writes nothing here (an export, a backup) holds the horizon back too: refreshes then
// read more rows, up to all of them, and miss nothing. Writers cannot be told apart by their
// xid: one waiting on a lock at its first write has none yet.
type Clock struct {
	Now, Horizon time.Time
}

// readHorizon reads the horizon in a statement of its own, before the rows: read in the same
// statement, after its snapshot was taken, it would miss a writer that committed in between
// (invisible to the read, gone from pg_stat_activity). On a standby (database.url pointed at
// one, for a console) the writers run on the primary, out of its sight: the horizon is then
// the epoch, and every refresh reads every row.
func readHorizon(ctx context.Context, db history.Reader) (time.Time, error) {
	var h time.Time
	err := db.QueryRow(ctx, `SELECT CASE WHEN pg_is_in_recovery() THEN timestamptz 'epoch' ELSE
		least(now(), (SELECT min(xact_start) FROM pg_stat_activity
		WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid())) END`).Scan(&h)
	if err != nil {
		return h, fmt.Errorf("read the oldest running transaction: %w", err)
	}
	return h, nil
}

// LatestChanged is LatestStates of the items whose row was written at or after since (every
// writer of these columns sets updated_at, to its transaction's start), with how many items
// LatestStates would return, so a reader holding the rest can tell an item left or came. One
// pass over the rows' updated_at, no index: a few milliseconds at 20,000 items.
func LatestChanged(ctx context.Context, db history.Reader, since time.Time) ([]Latest, Clock, int, error) {
	var now Clock
	var total int
	horizon, err := readHorizon(ctx, db)
	if err != nil {
		return nil, now, 0, err
	}
	rows, err := db.Query(ctx, `
		WITH c AS (SELECT now(), count(*)::int AS n FROM tracked_items WHERE NOT synthetic_item(item_id))
		SELECT c.*, t.item_id, t.item_name, t.collection_tier, t.last_snapshot_at, t.last_collected_at,
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
		if err := rows.Scan(&now.Now, &total, &id, &name, &tier, &l.SnapshotAt, &l.SeenAt, &l.Lowest, &l.Median, &l.Weighted,
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
	now.Horizon = horizon
	return out, now, total, nil
}

func latest(ctx context.Context, db history.Reader, where string, args ...any) ([]Latest, Clock, error) {
	var now Clock
	horizon, err := readHorizon(ctx, db)
	if err != nil {
		return nil, now, err
	}
	now.Horizon = horizon
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
		err := r.Scan(&now.Now, &l.ItemID, &l.Name, &l.Tier, &l.SnapshotAt, &l.SeenAt, &l.Lowest, &l.Median, &l.Weighted,
			&l.APIAverage, &l.ListingCount, &l.Quantity, &l.Truncated)
		return l, err
	})
	if err != nil {
		return nil, now, fmt.Errorf("read the latest markets: %w", err)
	}
	if len(out) == 0 {
		if now.Now, err = store.Now(ctx, db); err != nil {
			return nil, now, err
		}
	}
	return out, now, nil
}
