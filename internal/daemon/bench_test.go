package daemon

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// BenchmarkSteadyState runs two daemons over 20,000 items spread across the tiers on their
// phase-pinned schedules (about 89 items and 178 requests per second are due) and reports the
// due → claim lag p50/p99, overall and for HOT and COLD, and the share of the key's budget the
// provider served.
//
//	go test -run '^$' -bench SteadyState -benchtime 1x ./internal/daemon/
//	DUECOLLECTOR_BENCH_DURATION=3m go test ...   (default 60s per case)
//
// "ample" gives the key 500/s (the budget is not the limit: lag is the dispatcher's);
// "ample-packing" is the same with the product's packing defaults (collect.pack_size 10,
// daemon.pack_wait 1s: passes a second apart, items claimed up to a second ahead); "short"
// and "short-packing" give it 89/s, half of what is due, so the budget is the limit
// (utilisation, and HOT is served first: its lag stays low while COLD falls behind; claiming
// ahead lets each claim take the HOT items of the next second before any COLD one); "short4"
// and "short4-packing" give it 44.5/s, a quarter of what is due. DUECOLLECTOR_BENCH_CASES
// (comma-separated names) runs only those.
func BenchmarkSteadyState(b *testing.B) {
	for _, bc := range []struct {
		name   string
		budget float64
		pack   bool
	}{{"ample", 500, false}, {"ample-packing", 500, true}, {"short", 89, false}, {"short-packing", 89, true},
		{"short4", 44.5, false}, {"short4-packing", 44.5, true}} {
		if only := os.Getenv("DUECOLLECTOR_BENCH_CASES"); only != "" && !slices.Contains(strings.Split(only, ","), bc.name) {
			continue
		}
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				steadyState(b, bc.budget, bc.pack)
			}
		})
	}
}

func steadyState(b *testing.B, budget float64, pack bool) {
	dur := time.Minute
	if s := os.Getenv("DUECOLLECTOR_BENCH_DURATION"); s != "" {
		var err error
		if dur, err = time.ParseDuration(s); err != nil {
			b.Fatalf("DUECOLLECTOR_BENCH_DURATION: %v", err)
		}
	}
	const n = 20000
	e := newEnv(b, n, neoplesim.Options{})
	e.fullPages = pack // the product's page sizes, which packing's completeness rules judge by
	ctx := context.Background()
	// 10 % HOT, 20 % ACTIVE, 30 % WARM, 40 % COLD, each on its phase slot.
	var rows []storetest.Item
	now := time.Now()
	for i, it := range e.items {
		tier := tiers.Cold
		switch {
		case i%10 == 0:
			tier = tiers.Hot
		case i%10 <= 2:
			tier = tiers.Active
		case i%10 <= 5:
			tier = tiers.Warm
		}
		iv, _ := tier.Interval()
		next := tiers.NextSlot(it.ItemID, iv, now.Add(-iv/2)) // the first slot from now on
		rows = append(rows, storetest.Item{ID: it.ItemID, Name: it.ItemName, Tier: tier, NextCollectAt: storetest.At(next)})
	}
	storetest.Items(b, e.pool, rows...)
	var rs []*running
	var counts []func() int
	for range 2 {
		cfg := testConfig()
		counts = append(counts, countClaims(b, &cfg))
		cfg.Daemon.Notify = true
		cfg.Daemon.Budget.Enabled = true
		cfg.Daemon.Budget.SlowStart = false // steady state, not a cold start (tools/bench adaptive has that)
		cfg.Market.Rate, cfg.Market.PerMinute = budget, 1_000_000
		cfg.Dispatch.Concurrency = 32
		cfg.Dispatch.BatchSize = 100
		if pack {
			def := config.Default()
			cfg.Daemon.PackWait = def.Daemon.PackWait
			cfg.Dispatch.PackSize, cfg.Dispatch.PackMaxListings, cfg.Dispatch.PackMaxSales = def.Collect.PackSize, packing.MaxListingsDefault, packing.MaxSalesDefault
			cfg.Dispatch.ShadowFraction = packing.ShadowFractionDefault
		}
		rs = append(rs, e.start(b, cfg, zaptest.NewLogger(b, zaptest.Level(zap.WarnLevel))))
	}
	// Warm up past the budget's join delay and the backlog it leaves: at least 5 s, and until no
	// HOT item is more than a second overdue (when the budget is short, the lower tiers' backlog
	// never clears). A budget short of HOT's own demand (2 requests a minute per HOT item) never
	// clears HOT either: it warms up for 15 s.
	runStart := time.Now()
	warm := time.Now().Add(5 * time.Second)
	if hotDemand := float64(n/10) * 2 / 60; budget < hotDemand {
		warm = time.Now().Add(15 * time.Second)
	}
	testkit.Eventually(b, 2*time.Minute, "warm-up", func() bool {
		return time.Now().After(warm) && budget < float64(n/10)*2/60 || time.Now().After(warm) && count(b, e.pool, `
			SELECT count(*) FROM tracked_items WHERE collection_tier = $1 AND next_collect_at < now() - interval '1 second'`, string(tiers.Hot)) == 0
	})
	b.ResetTimer()
	var dbStart time.Time
	if err := e.pool.QueryRow(ctx, `SELECT now()`).Scan(&dbStart); err != nil {
		b.Fatal(err)
	}
	e.sim.ResetStats()
	wallStart := time.Now()

	// Each item is claimed at most once a minute, so sampling every 10 s sees every claim.
	lags := map[string][]float64{}
	from := dbStart
	sample := func() {
		var to time.Time
		_ = e.pool.QueryRow(ctx, `SELECT now()`).Scan(&to)
		for tier, xs := range claimLags(b, e.pool, from, to) {
			lags[tier] = append(lags[tier], xs...)
			lags["all"] = append(lags["all"], xs...)
		}
		from = to
	}
	tick := time.NewTicker(10 * time.Second)
	for time.Since(wallStart) < dur {
		<-tick.C
		sample()
	}
	tick.Stop()
	sample()
	// Items still waiting count with their wait so far: a tier the budget starves would
	// otherwise show no lag at all.
	for tier, xs := range waiting(b, e.pool) {
		lags[tier] = append(lags[tier], xs...)
		lags["all"] = append(lags["all"], xs...)
	}
	b.StopTimer()
	elapsed := time.Since(wallStart)
	served := float64(e.sim.KeyStats(marketKey).Total) / elapsed.Seconds()
	pct := func(xs []float64, q float64) float64 { return quantile(xs, q) * 1000 }
	all := lags["all"]
	b.ReportMetric(pct(all, 0.5), "lag-p50-ms")
	b.ReportMetric(pct(all, 0.99), "lag-p99-ms")
	b.ReportMetric(pct(lags[string(tiers.Hot)], 0.99), "hot-lag-p99-ms")
	b.ReportMetric(pct(lags[string(tiers.Cold)], 0.99), "cold-lag-p99-ms")
	b.ReportMetric(float64(e.sim.KeyStats(marketKey).MaxPerSecond), "busiest-req/s")
	b.ReportMetric(served, "req/s")
	b.ReportMetric(100*served/budget, "%budget")
	b.Logf("budget %v/s for %s: served %.1f/s (%.1f%%), busiest second %d; claims %d, lag p50 %.0f ms p99 %.0f ms",
		budget, elapsed.Round(time.Second), served, 100*served/budget, e.sim.KeyStats(marketKey).MaxPerSecond, len(all), pct(all, 0.5), pct(all, 0.99))
	for _, tier := range []tiers.Tier{tiers.Hot, tiers.Active, tiers.Warm, tiers.Cold} {
		xs := lags[string(tier)]
		b.Logf("  %-9s claims %6d  lag p50 %7.0f ms  p99 %7.0f ms", tier, len(xs), pct(xs, 0.5), pct(xs, 0.99))
	}
	statements := 0
	for i, r := range rs {
		if err := r.shutdown(b); err != nil {
			b.Fatal(err)
		}
		statements += counts[i]()
	}
	// Over the whole run, warm-up included: both daemons' claim statements a second.
	b.ReportMetric(float64(statements)/time.Since(runStart).Seconds(), "claims/s")
}

// claimLags reads, per tier, the due → claim lag in seconds of each item's latest claim made in
// (from, to]; a claim made ahead of its due time counts 0.
func claimLags(b *testing.B, pool *pgxpool.Pool, from, to time.Time) map[string][]float64 {
	return secondsByTier(b, pool, `
		SELECT collection_tier, greatest(extract(epoch FROM last_claimed_at - last_due_at), 0) FROM tracked_items
		WHERE last_claimed_at > $1 AND last_claimed_at <= $2 AND last_due_at <= last_claimed_at + $3 * interval '1 millisecond'`,
		from, to, catalog.MaxAhead.Milliseconds())
}

// waiting reads, per tier, how long each item due and not yet claimed has waited, in seconds.
func waiting(b *testing.B, pool *pgxpool.Pool) map[string][]float64 {
	return secondsByTier(b, pool, `
		SELECT collection_tier, extract(epoch FROM now() - next_collect_at) FROM tracked_items
		WHERE next_collect_at <= now() AND (lease_expires_at IS NULL OR lease_expires_at <= now())`)
}

// secondsByTier collects a (tier, seconds) query's rows by tier.
func secondsByTier(b *testing.B, pool *pgxpool.Pool, sql string, args ...any) map[string][]float64 {
	b.Helper()
	rows, err := pool.Query(context.Background(), sql, args...)
	if err != nil {
		b.Fatal(err)
	}
	out := map[string][]float64{}
	for rows.Next() {
		var tier string
		var secs float64
		if err := rows.Scan(&tier, &secs); err != nil {
			b.Fatal(err)
		}
		out[tier] = append(out[tier], secs)
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}

// quantile is the q-quantile of xs (nearest rank), 0 when empty.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}
