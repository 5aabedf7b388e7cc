package retention

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// Old rows go, recent rows stay, in statements of at most retention.batch rows; a table
// whose age is 0 is not touched; a bounded pass says that more is left.
func TestPruneDeletesOnlyRowsPastTheirAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	// 30 rows per table at ages 1..30 days.
	storetest.Items(t, pool, storetest.Item{ID: "item-1", Name: "one", Tier: tiers.Warm, NextCollectAt: storetest.Null()})
	var snaps []storetest.Snapshot
	var sales []storetest.Sale
	var interest []storetest.Interest
	for d := 1; d <= 30; d++ {
		age := storetest.Ago(time.Duration(d) * 24 * time.Hour)
		snaps = append(snaps, storetest.Snapshot{ItemID: "item-1", CollectedAt: age, Tier: tiers.Warm, ListingCount: 1, ListingQuantity: 1})
		sales = append(sales, storetest.Sale{ItemID: "item-1", SoldAt: age, UnitPrice: 5})
		interest = append(interest, storetest.Interest{ItemID: "item-1", Kind: "view", OccurredAt: age})
	}
	storetest.Snapshots(t, pool, snaps...)
	storetest.Sales(t, pool, sales...)
	storetest.Interests(t, pool, interest...)
	count := func(table string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cfg := config.Default().Retention
	cfg.Snapshots, cfg.Sales, cfg.Batch = 10*24*time.Hour+time.Hour, 20*24*time.Hour+time.Hour, 3

	// A bounded pass: 4 statements of 3 rows, all on snapshots (the first table).
	res, err := Prune(ctx, pool, cfg, 4)
	if err != nil || res.Snapshots != 12 || res.Sales != 0 || !res.More {
		t.Fatalf("bounded pass: %+v %v", res, err)
	}
	res, err = Prune(ctx, pool, cfg, 0)
	if err != nil || res.Snapshots != 20-12 || res.Sales != 10 || res.Interest != 0 || res.More {
		t.Fatalf("full pass: %+v %v", res, err)
	}
	if s, sa, i := count("auction_snapshots"), count("auction_sales"), count("item_interest"); s != 10 || sa != 20 || i != 30 {
		t.Fatalf("left %d snapshots, %d sales, %d interest events; want 10, 20, 30", s, sa, i)
	}
	var oldest time.Duration
	if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - min(collected_at)) * interval '1 second' FROM auction_snapshots`).Scan(&oldest); err != nil || oldest > cfg.Snapshots {
		t.Fatalf("oldest snapshot left is %s old (%v), want under %s", oldest, err, cfg.Snapshots)
	}
	if res, err := Prune(ctx, pool, cfg, 0); err != nil || res.Total() != 0 {
		t.Fatalf("second pass: %+v %v", res, err)
	}
}

// The ages must leave popularity the history it reads.
func TestRetentionConfigKeepsWhatPopularityReads(t *testing.T) {
	cfg := config.Default()
	if cfg.Retention.Enabled() {
		t.Fatal("history is pruned by default")
	}
	cfg.Retention.Snapshots = time.Hour     // under catalog.signal_window (24h)
	cfg.Retention.Interest = 24 * time.Hour // under catalog.dormant_after (72h)
	err := cfg.Validate()
	if err == nil {
		t.Fatal("ages under what popularity reads were accepted")
	}
	for _, want := range []string{"retention.snapshots", "COLLECTOR_RETENTION_SNAPSHOTS", "retention.interest", "catalog.dormant_after"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
