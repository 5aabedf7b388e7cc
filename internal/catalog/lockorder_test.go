package catalog

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

// Every statement that locks many tracked_items rows locks them in item_id order, as the
// write-back does, even when its plan is a hash join that spills into batches (which yields a
// few sorted runs: at 100k items and the default work_mem for the recalculation's 2,000-row
// batches and for leases of a 10,000-item claim; here forced at 3,000 items with work_mem
// 64kB, 8 batches). Held behind a row, none has locked a row after it, so a write-back holding
// a later row while waiting for an earlier one waits for it instead of deadlocking. Batched, an
// update met the held row after the rows of the batches before its own, so holding in turn
// each of four rows finds that unless all four fell in the first batch (one chance in 8⁴).
func TestManyRowLockersTakeItemsInIdOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	first, url := storetest.NewPool(t)
	if _, err := first.Exec(ctx, `INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		SELECT md5(i::text), 'item ' || i, 'HOT_1M', now() FROM generate_series(1, 3000) i`); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Exec(ctx, `ANALYZE tracked_items`); err != nil {
		t.Fatal(err)
	}
	var db string
	if err := first.QueryRow(ctx, `SELECT current_database()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	if _, err := first.Exec(ctx, `ALTER DATABASE `+pgx.Identifier{db}.Sanitize()+` SET work_mem = '64kB'`); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url) // sessions that start with the small work_mem
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	rows, _ := pool.Query(ctx, `SELECT item_id FROM tracked_items ORDER BY item_id LIMIT 2000`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// claims leases the items anew and returns them as claimed.
	claims := func() []Claim {
		rows, _ := pool.Query(ctx, `UPDATE tracked_items SET lease_token = gen_random_uuid(), lease_expires_at = now() + interval '1 hour'
			WHERE item_id = ANY($1) RETURNING item_id, lease_token`, ids)
		cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (c Claim, err error) { return c, r.Scan(&c.ItemID, &c.Token) })
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	for _, c := range []struct {
		what string
		lock func(i int, leased []Claim) error
	}{
		{"the recalculation", func(i int, _ []Claim) error {
			var u updates
			for _, id := range ids {
				u.ids, u.oldTiers, u.oldPins, u.newTiers, u.reasons = append(u.ids, id), append(u.oldTiers, "HOT_1M"), append(u.oldPins, ""), append(u.newTiers, "HOT_1M"), append(u.reasons, "")
				u.scores, u.requests, u.nexts = append(u.scores, float64(i)), append(u.requests, 2), append(u.nexts, nil)
				u.dueNow, u.promote = append(u.dueNow, false), append(u.promote, false)
			}
			return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error { return u.flush(ctx, tx, &Result{}) })
		}},
		{"lease renewal", func(_ int, leased []Claim) error {
			_, err := RenewLeases(ctx, pool, leased, time.Hour)
			return err
		}},
		{"lease release", func(_ int, leased []Claim) error {
			_, err := ReleaseLeases(ctx, pool, leased)
			return err
		}},
	} {
		for i, held := range ids[:4] {
			leased := claims()
			holder, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := holder.Exec(ctx, `SELECT 1 FROM tracked_items WHERE item_id = $1 FOR UPDATE`, held); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- c.lock(i, leased) }()
			testkit.Eventually(t, 20*time.Second, c.what+" to wait for the held row", func() bool {
				var n int
				// The only session here that can wait for a lock (its text, arrays inlined by
				// the simple protocol, is cut at track_activity_query_size).
				if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
					WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n > 0
			})
			later := ids[i+1:]
			var free int
			probe, err := pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			err = probe.QueryRow(ctx, `SELECT count(*) FROM (SELECT 1 FROM tracked_items WHERE item_id = ANY($1) FOR UPDATE SKIP LOCKED) x`, later).Scan(&free)
			_ = probe.Rollback(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := holder.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if err := testkit.Recv(t, done, testkit.Timeout, c.what); err != nil {
				t.Fatal(err)
			}
			if free != len(later) {
				t.Fatalf("waiting for row %d, %s had locked %d of the %d after it", i, c.what, len(later)-free, len(later))
			}
		}
	}
}
