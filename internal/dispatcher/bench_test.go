package dispatcher

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// zeroFetcher is a provider that answers at once with one listing and no sales, so the
// benchmark measures our claim, write-back and reschedule path and nothing else.
type zeroFetcher struct{ NoPacking }

func (zeroFetcher) Auction(context.Context, string) (provider.Answer[provider.Listing], error) {
	return provider.Answer[provider.Listing]{Rows: []provider.Listing{{UnitPrice: 100, Count: 3, AveragePrice: 90}}, Sent: 1}, nil
}
func (zeroFetcher) AuctionSold(context.Context, string) (provider.Answer[provider.Sale], error) {
	return provider.Answer[provider.Sale]{}, nil
}
func (zeroFetcher) AuctionLimit() int { return provider.MaxAuctionLimit }
func (zeroFetcher) SoldLimit() int    { return provider.MaxSoldLimit }

// BenchmarkClaimRescheduleCycle: N tracked items all due, one collect-due pass with a
// zero-latency provider claims, snapshots, enqueues and reschedules every one of them.
// BENCH_ITEMS overrides N (default 100,000).
func BenchmarkClaimRescheduleCycle(b *testing.B) {
	n := 100_000
	if s := os.Getenv("BENCH_ITEMS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	pool, _ := storetest.NewPool(b)
	ctx := context.Background()
	storetest.Items(b, pool, numberedItems(n, func(i int) tiers.Tier {
		return []tiers.Tier{tiers.Hot, tiers.Active, tiers.Warm, tiers.Cold}[i%4]
	})...)
	d, err := New(pool, zeroFetcher{}, configured(pool, Config{BatchSize: 1000, Concurrency: 8, FlushSize: 500}), nil)
	if err != nil {
		b.Fatal(err)
	}
	var total time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		if _, err := pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
			b.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `VACUUM ANALYZE tracked_items`); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		s, err := d.RunOnce(ctx)
		total += time.Since(t0)
		if err != nil || s.Collected != n {
			b.Fatalf("%s %v", s, err)
		}
	}
	b.ReportMetric(float64(n*b.N)/total.Seconds(), "items/s")
}
