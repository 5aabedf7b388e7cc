package main

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/store/storetest"
)

// prune deletes history past the ages it is given; with none set it says which keys to set
// and deletes nothing; an age popularity would miss names the key.
func TestPruneCommand(t *testing.T) {
	pool, db := storetest.NewPool(t)
	t.Setenv("COLLECTOR_CONFIG", "")
	ctx := context.Background()
	var old []storetest.Sale
	for d := 1; d <= 10; d++ {
		old = append(old, storetest.Sale{ItemID: "item-1", SoldAt: storetest.Ago(time.Duration(d) * 24 * time.Hour), UnitPrice: 5})
	}
	storetest.Sales(t, pool, old...)
	sales := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM auction_sales`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	if _, _, err := runCollector(t, "prune", "--database-url", db); err == nil || !strings.Contains(err.Error(), "retention.sales") || sales() != 10 {
		t.Fatalf("prune with no ages: %v, %d sales left", err, sales())
	}
	if _, _, err := runCollector(t, "prune", "--database-url", db, "--sales", "1h"); err == nil || !strings.Contains(err.Error(), "retention.sales") {
		t.Fatalf("prune --sales 1h (under catalog.dormant_after): %v", err)
	}
	out, _, err := runCollector(t, "prune", "--database-url", db, "--sales", "180h")
	if err != nil || !strings.Contains(out, "deleted 0 snapshots, 3 sales, 0 interest events") || sales() != 7 {
		t.Fatalf("prune --sales 180h: %q %v, %d sales left", out, err, sales())
	}
}
