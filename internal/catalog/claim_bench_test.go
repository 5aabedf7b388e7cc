package catalog

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/store/storetest"
)

// BenchmarkClaimAtABacklog times the daemon's claim (ClaimByCost: 200 locked, about 50 taken
// at the default 2 requests an item) against a catalog of 100k items of four tiers with 60k of
// them due: a cold start, or a provider back from an outage. Each claim's leases are handed
// back untimed, so every claim sees the same backlog.
//
//	go test -run '^$' -bench ClaimAtABacklog ./internal/catalog/
func BenchmarkClaimAtABacklog(b *testing.B) {
	ctx := context.Background()
	pool, _ := storetest.NewPool(b)
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		SELECT 'item-' || g, 'Item ' || g, (ARRAY['HOT_1M','ACTIVE_3M','WARM_5M','COLD_10M'])[1 + g % 4],
		       now() + CASE WHEN g % 10 < 6 THEN -1 ELSE 1 END * (1 + g % 3600) * interval '1 second'
		FROM generate_series(1, 100000) g`); err != nil {
		b.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE tracked_items`); err != nil {
		b.Fatal(err)
	}
	taken := 0
	for b.Loop() {
		claims, _, err := ClaimByCost(ctx, pool, 200, time.Minute, "bench", time.Second, 30*time.Second, 100, false)
		if err != nil || len(claims) == 0 {
			b.Fatalf("claim: %d items, %v", len(claims), err)
		}
		taken += len(claims)
		b.StopTimer()
		if _, err := ReleaseLeases(ctx, pool, claims); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.ReportMetric(float64(taken)/float64(b.N), "items/claim")
}
