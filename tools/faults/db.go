package main

import (
	"context"
	"fmt"
	"time"
)

// insertDue tracks items in tier, due now (one second ago, so the first claim takes them).
func (d *database) insertDue(ctx context.Context, items []catalogItem, tier string) error {
	ids := make([]string, len(items))
	names := make([]string, len(items))
	for i, it := range items {
		ids[i], names[i] = it.ItemID, it.ItemName
	}
	_, err := d.pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		SELECT id, name, $3, now() - interval '1 second' FROM unnest($1::text[], $2::text[]) AS u(id, name)`,
		ids, names, tier)
	if err != nil {
		return fmt.Errorf("insert %d tracked items into %s: %w", len(items), d.name, err)
	}
	return nil
}

// makeDue puts items back to due now, as if their next slot had come.
func (d *database) makeDue(ctx context.Context, items []catalogItem) error {
	ids := make([]string, len(items))
	for i, it := range items {
		ids[i] = it.ItemID
	}
	_, err := d.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second' WHERE item_id = ANY($1)`, ids)
	return err
}

func (d *database) count(ctx context.Context, query string, args ...any) (int, error) {
	var n int
	if err := d.pool.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("%s: %w", query, err)
	}
	return n, nil
}

// state is the item-level picture every scenario asserts on.
type state struct {
	items         int // tracked
	withSnapshot  int // items with at least one snapshot
	snapshots     int
	leased        int // lease_token set (live or expired)
	liveLeases    int // lease_expires_at in the future
	due           int // next_collect_at <= now and not leased
	failedStreak  int // failure_streak >= 1
	failedPastDue int // failure_streak >= 1 but next_collect_at <= now
	outbox        int
}

func (d *database) state(ctx context.Context) (state, error) {
	var s state
	err := d.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM tracked_items),
		       (SELECT count(DISTINCT item_id) FROM auction_snapshots),
		       (SELECT count(*) FROM auction_snapshots),
		       (SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL),
		       (SELECT count(*) FROM tracked_items WHERE lease_expires_at > now()),
		       (SELECT count(*) FROM tracked_items WHERE next_collect_at <= now() AND lease_token IS NULL),
		       (SELECT count(*) FROM tracked_items WHERE failure_streak >= 1),
		       (SELECT count(*) FROM tracked_items WHERE failure_streak >= 1 AND next_collect_at <= now()),
		       (SELECT count(*) FROM outbox)`).
		Scan(&s.items, &s.withSnapshot, &s.snapshots, &s.leased, &s.liveLeases, &s.due, &s.failedStreak, &s.failedPastDue, &s.outbox)
	if err != nil {
		return s, fmt.Errorf("read state of %s: %w", d.name, err)
	}
	return s, nil
}

// waitLeasesExpired polls until no lease is live any more (the lease clock is the database's).
func (d *database) waitLeasesExpired(ctx context.Context, timeout time.Duration) error {
	return poll(ctx, timeout, 200*time.Millisecond, func() (bool, error) {
		n, err := d.count(ctx, `SELECT count(*) FROM tracked_items WHERE lease_expires_at > now()`)
		return n == 0, err
	})
}

// waitSnapshots polls until at least n snapshots exist or p exits.
func (d *database) waitSnapshots(ctx context.Context, p *proc, n int, timeout time.Duration) (int, error) {
	var got int
	err := poll(ctx, timeout, 50*time.Millisecond, func() (bool, error) {
		var err error
		got, err = d.count(ctx, `SELECT count(*) FROM auction_snapshots`)
		return got >= n || (p != nil && p.exited()), err
	})
	return got, err
}
