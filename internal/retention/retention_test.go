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
		INSERT INTO item_interest (item_id, kind, occurred_at)
		SELECT 'item-1', 'view', now() - d * interval '1 day' FROM generate_series(1, 30) d;
		INSERT INTO price_candles (item_id, resolution, bucket, snapshots)
		SELECT 'item-1', r, date_bin('1 hour', now() - d * interval '1 day', '2000-01-01 00:00:00+00'), 1
		FROM generate_series(1, 30) d, unnest(ARRAY['1h', '1d']) r`); err != nil {
		t.Fatal(err)
	}
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cfg := config.Default().Retention
	cfg.Interest, cfg.CandlesHourly, cfg.Batch = 10*24*time.Hour+time.Hour, 20*24*time.Hour+time.Hour, 3

	// A bounded pass: 4 statements of 3 rows, all on interest (the first table).
	res, err := Prune(ctx, pool, cfg, 4)
	if err != nil || res.Interest != 12 || res.CandlesHourly != 0 || !res.More {
		t.Fatalf("bounded pass: %+v %v", res, err)
	}
	res, err = Prune(ctx, pool, cfg, 0)
	if err != nil || res.Interest != 20-12 || res.CandlesHourly != 10 || res.CandlesDaily != 0 || res.More {
		t.Fatalf("full pass: %+v %v", res, err)
	}
	i := count(`SELECT count(*) FROM item_interest`)
	h := count(`SELECT count(*) FROM price_candles WHERE resolution = '1h'`)
	d := count(`SELECT count(*) FROM price_candles WHERE resolution = '1d'`)
	if i != 10 || h != 20 || d != 30 {
		t.Fatalf("left %d interest events, %d hourly and %d daily candles; want 10, 20, 30", i, h, d)
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
