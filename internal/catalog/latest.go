package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store"
)

// Latest is an item's current market: its last snapshot (Market: figures and when collected,
// nil before the item's first), which still held when the item was last collected (SeenAt,
// later when collections since saw nothing new).
type Latest struct {
	ItemID string
	Name   string
	Tier   string
	SeenAt *time.Time
	Market *history.Written
}

// seenCols are the item row's copy of its last snapshot's market, which the write-back keeps:
// the claim (what history compares a collection with) and the latest reads take them in this
// order, into seen.
const seenCols = `t.last_snapshot_at, t.seen_listing_count, t.seen_listing_quantity, t.seen_lowest_price,
	t.seen_median_price, t.seen_weighted_price, t.seen_api_average_price, t.seen_truncated`

// seen receives seenCols.
type seen struct {
	at        *time.Time
	count     *int32
	quantity  *int64
	truncated *bool
	state     history.State // the figures that may be absent (nothing listed)
}

func (s *seen) dest() []any {
	return []any{&s.at, &s.count, &s.quantity, &s.state.Lowest, &s.state.Median, &s.state.Weighted, &s.state.APIAverage, &s.truncated}
}

// written is the market read: nil before the item's first snapshot.
func (s *seen) written() *history.Written {
	if s.at == nil || s.count == nil || s.quantity == nil || s.truncated == nil {
		return nil
	}
	st := s.state
	st.Count, st.Quantity, st.Truncated = int(*s.count), *s.quantity, *s.truncated
	return &history.Written{State: st, At: *s.at}
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
		SELECT c.*, t.item_id, t.item_name, t.collection_tier, t.last_collected_at, `+seenCols+`
		FROM c LEFT JOIN tracked_items t ON t.updated_at >= $1 AND NOT synthetic_item(t.item_id)
		ORDER BY t.item_id`, since)
	if err != nil {
		return nil, now, 0, fmt.Errorf("read the changed markets: %w", err)
	}
	var out []Latest
	for rows.Next() {
		var id, name, tier *string
		var l Latest
		var sn seen
		if err := rows.Scan(append([]any{&now.Now, &total, &id, &name, &tier, &l.SeenAt}, sn.dest()...)...); err != nil {
			rows.Close()
			return nil, now, 0, fmt.Errorf("read the changed markets: %w", err)
		}
		if id != nil { // nil: the one row of no change
			l.ItemID, l.Name, l.Tier, l.Market = *id, *name, *tier, sn.written()
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
		SELECT now(), t.item_id, t.item_name, t.collection_tier, t.last_collected_at, `+seenCols+`
		FROM tracked_items t WHERE `+where+` ORDER BY t.item_id`, args...)
	if err != nil {
		return nil, now, fmt.Errorf("read the latest markets: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Latest, error) {
		var l Latest
		var sn seen
		err := r.Scan(append([]any{&now.Now, &l.ItemID, &l.Name, &l.Tier, &l.SeenAt}, sn.dest()...)...)
		l.Market = sn.written()
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
