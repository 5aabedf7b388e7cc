package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store"
)

// ReadSeries is history.ReadBetween for a tracked item, with SeenUntil the last collection
// that saw the series' last point's market (its last successful collection, unless a snapshot
// at or after until replaced it): the last point held at least until then. An id nobody tracks is
// ErrNotTracked. Synthetic fixtures are read like any item: the operator's tools (the console,
// `collector history`) show them.
func ReadSeries(ctx context.Context, db history.Reader, itemID, resolution string, since, until time.Time) (history.Series, error) {
	return readSeries(ctx, db, itemID, resolution, since, until, true)
}

// ReadPublicSeries is ReadSeries for consumers (the read API): a synthetic fixture is
// ErrNotTracked, as /latest and /items do not know it either.
func ReadPublicSeries(ctx context.Context, db history.Reader, itemID, resolution string, since, until time.Time) (history.Series, error) {
	return readSeries(ctx, db, itemID, resolution, since, until, false)
}

func readSeries(ctx context.Context, db history.Reader, itemID, resolution string, since, until time.Time, fixtures bool) (history.Series, error) {
	if store.ServedFrom(ctx) == nil {
		// Over a read replica, the statements below stay on the primary once one ran there
		// (store.Served): seen_until from the primary over points from a trailing replica
		// could claim a market held across a change the points lack.
		ctx, _ = store.WithServed(ctx)
	}
	var seen, lastSnapshot *time.Time
	err := db.QueryRow(ctx, `SELECT last_collected_at, last_snapshot_at FROM tracked_items WHERE item_id = $1 AND ($2 OR NOT synthetic_item(item_id))`,
		itemID, fixtures).Scan(&seen, &lastSnapshot)
	if err != nil {
		if errors.Is(err, pgx.ErrNoRows) {
			return history.Series{ItemID: itemID}, fmt.Errorf("item %q: %w", itemID, ErrNotTracked)
		}
		return history.Series{ItemID: itemID}, fmt.Errorf("read item %q: %w", itemID, err)
	}
	// Read before the points: a point collected after it could only make it say less than
	// is known, never claim a market unchanged across a change the points do not show.
	if !until.IsZero() {
		// A candle whose bucket starts before until is read whole: the market that held at its
		// close is the one to follow past the bucket's end, not past until.
		end := until
		switch resolution {
		case history.Hourly:
			end = ceilUTC(until, time.Hour)
		case history.Daily:
			end = ceilUTC(until, 24*time.Hour)
		}
		// The row's last snapshot before end: none came after, so nothing replaced the market
		// (and looking would plan every partition from end on).
		if lastSnapshot == nil || !lastSnapshot.Before(end) {
			held, replaced, err := history.HeldUntil(ctx, db, itemID, end)
			if err != nil {
				return history.Series{ItemID: itemID}, err
			}
			if replaced {
				seen = held // a later snapshot changed the market: it held until the one before
			}
		}
	}
	s, err := history.ReadBetween(ctx, db, itemID, resolution, since, until, lastSnapshot)
	s.SeenUntil = seen
	return s, err
}

// ceilUTC rounds t up to a multiple of d since the Unix epoch (UTC hours and days, as candle
// buckets are).
func ceilUTC(t time.Time, d time.Duration) time.Time {
	f := t.Truncate(d)
	if f.Equal(t) {
		return t
	}
	return f.Add(d)
}
