package history

import (
	"context"
	"testing"

	"github.com/duecollector/duecollector/internal/store/storetest"
)

// Rows never analyzed still count: a fresh or small history is not analyzed until autovacuum
// gets to it, and status must not say it holds none.
func TestUsageCountsRowsNotYetAnalyzed(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	storetest.Items(t, pool, storetest.Item{ID: "a"}, storetest.Item{ID: "b"})
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	snaps := make([]storetest.Snapshot, 12)
	for i := range snaps {
		snaps[i] = storetest.Snapshot{ItemID: "a", CollectedAt: storetest.Ago(0)}
	}
	storetest.Snapshots(t, tx, snaps...)
	// The flag makes the session report its counts to the statistics system when it next goes
	// idle outside a transaction: after the COMMIT, before the COMMIT's answer reaches us.
	// (pg_stat_force_next_flush is PostgreSQL 15's.)
	if _, err := tx.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows := func() int64 {
		t.Helper()
		u, err := ReadUsage(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		for _, tu := range u.Tables {
			if tu.Table == "auction_snapshots" {
				return tu.Rows
			}
		}
		t.Fatal("no auction_snapshots in the usage")
		return 0
	}
	if n := rows(); n != 12 {
		t.Fatalf("auction_snapshots: %d rows estimated, want the 12 just written (never analyzed)", n)
	}
	if _, err := pool.Exec(ctx, `ANALYZE auction_snapshots`); err != nil {
		t.Fatal(err)
	}
	if n := rows(); n != 12 {
		t.Fatalf("auction_snapshots after ANALYZE: %d rows estimated, want 12", n)
	}
}
