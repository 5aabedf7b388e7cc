package history_test

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// RecentActivity counts what happened within the window only, per item, in the order asked;
// an item with nothing (or unknown) reads as zero.
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
	got, err := history.RecentActivity(context.Background(), pool, []string{"b", "quiet", "a", "unknown", "b"}, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	// An id asked twice reads the same twice, not doubled.
	want := []history.Activity{{Sales: 1, Gold: 7, Churn: 7}, {}, {Sales: 2, Gold: 250}, {}, {Sales: 1, Gold: 7, Churn: 7}}
	if len(got) != len(want) {
		t.Fatalf("got %d activities for 5 ids: %+v", len(got), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("activity %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}
