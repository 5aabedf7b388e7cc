package catalog

import (
	"context"
	"testing"

	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// BenchmarkRecalculationAtScale times one popularity recalculation (read every item's signals,
// score, move tiers) over a catalog of 100k items, 30k of them with a day of market history:
// 20 sales and 40 snapshots each within catalog.signal_window.
//
//	go test -run '^$' -bench RecalculationAtScale -benchtime 5x ./internal/catalog/
func BenchmarkRecalculationAtScale(b *testing.B) {
	ctx := context.Background()
	pool, _ := storetest.NewPool(b)
	storetest.PartitionDays(b, pool, -2, 1, partition.Snapshots, partition.Sales)
	for _, q := range []string{`
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at, last_sale_at)
		SELECT 'item-' || g, 'Item ' || g, (ARRAY['HOT_1M','ACTIVE_3M','WARM_5M','COLD_10M'])[1 + g % 4],
		       now() + (g % 600) * interval '1 second', CASE WHEN g <= 30000 THEN now() - interval '1 minute' END
		FROM generate_series(1, 100000) g`, `
		INSERT INTO auction_sales (item_id, sold_at, seq, quantity, unit_price, total_price)
		SELECT 'item-' || g, now() - (s * 1000 + g % 900) * interval '1 second', 0, 1, 1000 + s, 1000 + s
		FROM generate_series(1, 30000) g, generate_series(1, 20) s`, `
		INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, listing_count, listing_quantity)
		SELECT 'item-' || g, gen_random_uuid(), now() - (s * 600 + g % 500) * interval '1 second', 'HOT_1M', (g + s) % 37, 10
		FROM generate_series(1, 30000) g, generate_series(1, 40) s`,
		`VACUUM ANALYZE tracked_items, auction_sales, auction_snapshots`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	p := testPolicy()
	for b.Loop() {
		if _, err := RecalculatePopularity(ctx, pool, p); err != nil {
			b.Fatal(err)
		}
	}
}
