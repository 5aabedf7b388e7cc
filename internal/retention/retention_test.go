package retention

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// Old rows go, recent rows stay, in statements of at most retention.batch rows; a table
// whose age is 0 is not touched; a bounded pass says that more is left.
func TestPruneDeletesOnlyRowsPastTheirAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	// 30 rows per table at ages 1..30 days.
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier) VALUES ('item-1', 'one', 'WARM_5M');
		INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, listing_count, listing_quantity)
		SELECT 'item-1', gen_random_uuid(), now() - d * interval '1 day', 'WARM_5M', 1, 1 FROM generate_series(1, 30) d;
		INSERT INTO auction_sales (item_id, sold_at, seq, quantity, unit_price, total_price)
		SELECT 'item-1', now() - d * interval '1 day', 0, 1, 5, 5 FROM generate_series(1, 30) d;
		INSERT INTO item_interest (item_id, kind, occurred_at)
		SELECT 'item-1', 'view', now() - d * interval '1 day' FROM generate_series(1, 30) d`); err != nil {
		t.Fatal(err)
	}
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
