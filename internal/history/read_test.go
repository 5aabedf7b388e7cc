package history_test

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// RecentSales lists an item's newest sales first, stops at the limit, and leaves other items'
// sales alone; sales of one second come last-seq first.
func TestRecentSalesNewestFirst(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	storetest.Items(t, pool, storetest.Item{ID: "a"}, storetest.Item{ID: "b"})
	storetest.Sales(t, pool,
		storetest.Sale{ItemID: "a", SoldAt: storetest.Ago(3 * time.Hour), UnitPrice: 300},
		storetest.Sale{ItemID: "a", SoldAt: storetest.Ago(time.Hour), UnitPrice: 100},
		storetest.Sale{ItemID: "a", SoldAt: storetest.Ago(time.Hour), Seq: 1, UnitPrice: 101},
		storetest.Sale{ItemID: "a", SoldAt: storetest.Ago(2 * time.Hour), UnitPrice: 200},
		storetest.Sale{ItemID: "b", SoldAt: storetest.Ago(time.Minute), UnitPrice: 999},
	)
	got, err := history.RecentSales(context.Background(), pool, "a", 3)
	if err != nil {
		t.Fatal(err)
	}
	var prices []int64
	for _, s := range got {
		prices = append(prices, s.UnitPrice)
	}
	if len(prices) != 3 || prices[0] != 101 || prices[1] != 100 || prices[2] != 200 {
		t.Fatalf("recent sales of a: %v, want [101 100 200]", prices)
	}
}
