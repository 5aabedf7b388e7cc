package history_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// lockedPartitions runs read in a transaction and counts the history partitions it locked.
func lockedPartitions(t *testing.T, pool *pgxpool.Pool, read func(ctx context.Context, tx pgx.Tx) error) int {
	t.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if err := read(ctx, tx); err != nil {
		t.Fatal(err)
	}
	return storetest.LockedPartitions(t, tx, "auction_snapshots", "auction_sales")
}

// A read of one item plans only the partitions its time bounds reach, however long the history
// is kept: unbounded, a read of a history kept a year opens and locks all of them (820 locks
// with their keys, an eighth of the server's default lock table, for a page of sales). Each
// read below finds what it must in a history of 64 daily partitions per table while locking at
// most a few days' worth: RecentSales looks within two days first, a raw series' snapshot in
// force at the item's last snapshot, HeldUntil a day past its end, and popularity's activity
// from a time the planner is given rather than now() less an interval, which it cannot
// evaluate and so prunes only at execution, after locking everything.
func TestReadsPlanOnlyThePartitionsTheyReach(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	today := storetest.PartitionDays(t, pool, -60, 4, "auction_snapshots", "auction_sales")
	storetest.Items(t, pool, storetest.Item{ID: "busy"}, storetest.Item{ID: "quiet"})
	quietAt := today.AddDate(0, 0, -40).Add(3 * time.Hour)
	longAgo := today.AddDate(0, 0, -30)
	storetest.Sales(t, pool,
		storetest.Sale{ItemID: "busy", SoldAt: storetest.Ago(time.Hour)},
		storetest.Sale{ItemID: "busy", SoldAt: storetest.Ago(time.Hour), Seq: 1},
		storetest.Sale{ItemID: "busy", SoldAt: storetest.Ago(time.Minute)},
		storetest.Sale{ItemID: "quiet", SoldAt: storetest.At(quietAt)},
	)
	storetest.Snapshots(t, pool,
		storetest.Snapshot{ItemID: "busy", CollectedAt: storetest.At(longAgo.Add(2 * time.Hour))},
		storetest.Snapshot{ItemID: "quiet", CollectedAt: storetest.At(quietAt)},
	)
	const most = 2 * 7 // a week of partitions of both tables, against 128
	for _, c := range []struct {
		name string
		read func(ctx context.Context, tx pgx.Tx) error
	}{
		{"RecentSales of an item sold today", func(ctx context.Context, tx pgx.Tx) error {
			got, err := history.RecentSales(ctx, tx, "busy", 3)
			if err == nil && len(got) != 3 {
				t.Errorf("recent sales of busy: %d, want 3", len(got))
			}
			return err
		}},
		{"raw series of an item quiet for 40 days", func(ctx context.Context, tx pgx.Tx) error {
			s, err := history.ReadBetween(ctx, tx, "quiet", "raw", time.Now().Add(-2*time.Hour), time.Time{}, &quietAt)
			if err == nil && (len(s.Points) != 1 || !s.Points[0].At.Equal(quietAt)) {
				t.Errorf("raw series of quiet: %+v, want its one snapshot at %v, in force since", s.Points, quietAt)
			}
			return err
		}},
		{"HeldUntil a month ago", func(ctx context.Context, tx pgx.Tx) error {
			_, found, err := history.HeldUntil(ctx, tx, "busy", longAgo)
			if err == nil && !found {
				t.Error("HeldUntil a month ago found no snapshot after it; busy has one two hours later")
			}
			return err
		}},
		{"RecentActivity of the last hour", func(ctx context.Context, tx pgx.Tx) error {
			got := map[string]history.Activity{}
			err := history.RecentActivity(ctx, tx, []string{"busy", "quiet"}, time.Now().Add(-2*time.Hour), func(id string, a history.Activity) error {
				got[id] = a
				return nil
			})
			if err == nil && (got["busy"].Sales != 3 || got["quiet"].Sales != 0) {
				t.Errorf("activity of busy, quiet: %+v, want 3 and 0 sales", got)
			}
			return err
		}},
	} {
		if n := lockedPartitions(t, pool, c.read); n > most {
			t.Errorf("%s locked %d history partitions, want at most %d", c.name, n, most)
		}
	}

	// What the first, bounded looks miss, the second finds: an item whose sales are all old,
	// a series read with no last snapshot known, HeldUntil where the next snapshot came days later.
	sales, err := history.RecentSales(context.Background(), pool, "quiet", 3)
	if err != nil || len(sales) != 1 || !sales[0].SoldAt.Equal(quietAt) {
		t.Errorf("recent sales of quiet: %+v (%v), want its one sale 40 days ago", sales, err)
	}
	s, err := history.ReadBetween(context.Background(), pool, "quiet", "raw", time.Now().Add(-2*time.Hour), time.Time{}, nil)
	if err != nil || len(s.Points) != 1 || !s.Points[0].At.Equal(quietAt) {
		t.Errorf("raw series of quiet, last snapshot unknown: %+v (%v), want its snapshot at %v", s.Points, err, quietAt)
	}
	wrong := quietAt.Add(-time.Hour) // a row that disagrees with the table (a fixture's)
	s, err = history.ReadBetween(context.Background(), pool, "quiet", "raw", time.Now().Add(-2*time.Hour), time.Time{}, &wrong)
	if err != nil || len(s.Points) != 1 || !s.Points[0].At.Equal(quietAt) {
		t.Errorf("raw series of quiet, last snapshot misstated: %+v (%v), want its snapshot at %v", s.Points, err, quietAt)
	}
	if _, found, err := history.HeldUntil(context.Background(), pool, "quiet", quietAt.AddDate(0, 0, -5)); err != nil || !found {
		t.Errorf("HeldUntil five days before quiet's snapshot: found %v (%v), want it found", found, err)
	}
}
