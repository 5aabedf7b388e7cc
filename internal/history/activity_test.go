package history_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// RecentActivity counts what happened within the window only, per item, each item once, in
// byte order; an item with nothing (or unknown) reads as zero.
func TestRecentActivityCountsTheWindowPerItem(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	storetest.Items(t, pool, storetest.Item{ID: "a"}, storetest.Item{ID: "b"}, storetest.Item{ID: "quiet"})
	storetest.Sales(t, pool,
		storetest.Sale{ItemID: "a", SoldAt: storetest.Ago(10 * time.Minute), Quantity: 2, UnitPrice: 100},
		storetest.Sale{ItemID: "a", SoldAt: storetest.Ago(20 * time.Minute), UnitPrice: 50},
		storetest.Sale{ItemID: "a", SoldAt: storetest.Ago(3 * time.Hour), UnitPrice: 1000}, // before the window
		storetest.Sale{ItemID: "b", SoldAt: storetest.Ago(5 * time.Minute), UnitPrice: 7},
	)
	storetest.Snapshots(t, pool,
		storetest.Snapshot{ItemID: "b", CollectedAt: storetest.Ago(3 * time.Hour), ListingCount: 100}, // before the window
		storetest.Snapshot{ItemID: "b", CollectedAt: storetest.Ago(50 * time.Minute), ListingCount: 10},
		storetest.Snapshot{ItemID: "b", CollectedAt: storetest.Ago(30 * time.Minute), ListingCount: 14},
		storetest.Snapshot{ItemID: "b", CollectedAt: storetest.Ago(10 * time.Minute), ListingCount: 11},
	)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	got := map[string]history.Activity{}
	var order []string
	err = history.RecentActivity(ctx, tx, []string{"b", "quiet", "a", "unknown", "b"}, time.Now().Add(-time.Hour), func(id string, a history.Activity) error {
		if _, twice := got[id]; twice {
			t.Errorf("activity of %s came twice", id)
		}
		got[id] = a
		order = append(order, id)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// An id asked twice comes once, not doubled.
	want := map[string]history.Activity{"b": {Sales: 1, Gold: 7, Churn: 7}, "quiet": {}, "a": {Sales: 2, Gold: 250}, "unknown": {}}
	if len(got) != len(want) {
		t.Fatalf("got activities of %d items for 4 ids: %+v", len(got), got)
	}
	for id, w := range want {
		if got[id] != w {
			t.Errorf("activity of %s = %+v, want %+v", id, got[id], w)
		}
	}
	if !slices.IsSorted(order) {
		t.Errorf("activities came in the order %v, want the ids' byte order", order)
	}
}
