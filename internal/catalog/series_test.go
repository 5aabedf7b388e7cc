package catalog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/store/storetest"
)

// A synthetic fixture's series is the operator's to read (ReadSeries, for the console and
// `collector history`) and unknown to consumers (ReadPublicSeries, for the read API), by the
// schema's one rule; a real item reads the same through both.
func TestPublicSeriesLeavesFixturesOut(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	real, fixture := randomItemID(t), SyntheticPrefix+"0001"
	storetest.Items(t, pool, storetest.Item{ID: real}, storetest.Item{ID: fixture}, storetest.Item{ID: "integration-item-7"})
	storetest.Snapshots(t, pool, storetest.Snapshot{ItemID: real}, storetest.Snapshot{ItemID: fixture})
	since := time.Now().Add(-time.Hour)
	for _, id := range []string{real, fixture} {
		if s, err := ReadSeries(ctx, pool, id, "raw", since, time.Time{}); err != nil || len(s.Points) != 1 {
			t.Fatalf("ReadSeries(%s): %d points, %v; want its snapshot", id, len(s.Points), err)
		}
	}
	if s, err := ReadPublicSeries(ctx, pool, real, "raw", since, time.Time{}); err != nil || len(s.Points) != 1 {
		t.Fatalf("ReadPublicSeries(%s): %d points, %v; want its snapshot", real, len(s.Points), err)
	}
	for _, id := range []string{fixture, "integration-item-7"} {
		if s, err := ReadPublicSeries(ctx, pool, id, "raw", since, time.Time{}); !errors.Is(err, ErrNotTracked) || len(s.Points) != 0 {
			t.Fatalf("ReadPublicSeries(%s): %d points, %v; want ErrNotTracked", id, len(s.Points), err)
		}
	}
}

// The item row's last snapshot bounds a quiet item's series read, and popularity's activity
// read gets its window's start as a value the planner can prune with: in a history of 64 daily
// partitions a table, each locks only a few days of them (history's
// TestReadsPlanOnlyThePartitionsTheyReach shows why that matters).
func TestSeriesAndSignalsLockOnlyRecentPartitions(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	today := storetest.PartitionDays(t, pool, -60, 4, "auction_snapshots", "auction_sales")
	quiet := randomItemID(t)
	at := today.AddDate(0, 0, -40).Add(3 * time.Hour)
	storetest.Items(t, pool, storetest.Item{ID: quiet})
	storetest.Snapshots(t, pool, storetest.Snapshot{ItemID: quiet, CollectedAt: storetest.At(at)})
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET last_snapshot_at = $2 WHERE item_id = $1`, quiet, at); err != nil {
		t.Fatal(err)
	}
	const most = 2 * 7 // a week of both tables' partitions, against 128
	for name, read := range map[string]func(tx pgx.Tx) error{
		"ReadSeries of an item quiet for 40 days": func(tx pgx.Tx) error {
			s, err := ReadSeries(ctx, tx, quiet, "raw", time.Now().Add(-2*time.Hour), time.Time{})
			if err == nil && (len(s.Points) != 1 || !s.Points[0].At.Equal(at)) {
				t.Errorf("series of the quiet item: %+v, want its snapshot at %v", s.Points, at)
			}
			return err
		},
		"ReadSeries of a window a month ago, the item quiet since": func(tx pgx.Tx) error {
			until := today.AddDate(0, 0, -30)
			s, err := ReadSeries(ctx, tx, quiet, "raw", until.Add(-24*time.Hour), until)
			if err == nil && (len(s.Points) != 1 || !s.Points[0].At.Equal(at) || s.SeenUntil != nil) {
				t.Errorf("series a month ago: %+v until %v, want its snapshot at %v, seen until its last collection (none)", s.Points, s.SeenUntil, at)
			}
			return err
		},
		"readSignals": func(tx pgx.Tx) error {
			_, _, err := readSignals(ctx, tx, testPolicy())
			return err
		},
	} {
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if err := read(tx); err != nil {
			t.Fatal(err)
		}
		if n := storetest.LockedPartitions(t, tx, "auction_snapshots", "auction_sales"); n > most {
			t.Errorf("%s locked %d history partitions, want at most %d", name, n, most)
		}
		_ = tx.Rollback(ctx)
	}
}
