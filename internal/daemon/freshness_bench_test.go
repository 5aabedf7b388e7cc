package daemon

import (
	"encoding/json"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// BenchmarkFreshnessRun is the real-daemon half of `make bench`'s freshness section: one daemon
// over the realistic market (seed 7) with the tiers and budget the bench tool chose, every item
// due at the start, measured by the simulator's ground truth. The tool replays the same setting
// from the logged start time and compares.
//
//	DUECOLLECTOR_FRESH_TIERS=tiers.json DUECOLLECTOR_FRESH_BUDGET=40 DUECOLLECTOR_FRESH_DURATION=5m \
//	  go test -run '^$' -bench FreshnessRun -benchtime 1x ./internal/daemon/
//
// tiers.json maps item id → tier and planned cost for the first N items of the catalog (N = its
// size).
func BenchmarkFreshnessRun(b *testing.B) {
	raw, err := os.ReadFile(os.Getenv("DUECOLLECTOR_FRESH_TIERS"))
	if err != nil {
		b.Skipf("DUECOLLECTOR_FRESH_TIERS: %v (run through make bench)", err)
	}
	var assigned map[string]freshPlanned
	if err := json.Unmarshal(raw, &assigned); err != nil {
		b.Fatal(err)
	}
	budget, err := strconv.ParseFloat(os.Getenv("DUECOLLECTOR_FRESH_BUDGET"), 64)
	if err != nil || budget <= 0 {
		b.Fatalf("DUECOLLECTOR_FRESH_BUDGET: %v", err)
	}
	dur, err := time.ParseDuration(os.Getenv("DUECOLLECTOR_FRESH_DURATION"))
	if err != nil {
		b.Fatalf("DUECOLLECTOR_FRESH_DURATION: %v", err)
	}
	for range b.N {
		freshnessRun(b, assigned, budget, dur)
	}
}

// freshPlanned is an item's tier and what the plan counts its collection at there, as the plan
// service would have stored them (requests_per_collection sizes the claims).
type freshPlanned struct {
	Tier     tiers.Tier `json:"tier"`
	Requests float64    `json:"requests"`
}

func freshnessRun(b *testing.B, assigned map[string]freshPlanned, budget float64, dur time.Duration) {
	e := newEnv(b, len(assigned), neoplesim.Options{Market: market.Realistic})
	e.fullPages = true
	// Every item due, as if collected before (so it may share calls at once, as the bench
	// tool's replay of this run assumes): its size and its newest sale known.
	truths, newest := e.sim.Market().Truths(), e.newestSale(b)
	var rows []storetest.Item
	for _, it := range e.items {
		listings := int32(truths[it.ItemID].Listings)
		rows = append(rows, storetest.Item{ID: it.ItemID, Name: it.ItemName, Tier: assigned[it.ItemID].Tier,
			SeenListingCount: &listings, LastSaleAt: newest(it.ItemID), Requests: assigned[it.ItemID].Requests})
	}
	storetest.Items(b, e.pool, rows...)
	cfg := testConfig()
	cfg.Daemon.Notify = true
	cfg.Market.Rate, cfg.Market.Burst, cfg.Market.PerMinute = budget, max(1, int(budget)), int(budget*60)
	// The product default: the cluster budget's per-second quota, not a bare token bucket,
	// whose full bucket would let one second carry the burst on top of the rate.
	cfg.Daemon.Budget.Enabled = true
	cfg.Dispatch.Concurrency = 32
	cfg.Dispatch.BatchSize = 100
	// Collections share packed calls as the product's defaults make them (collect.pack_*,
	// provider.*_limit, daemon.pack_wait).
	def := config.Default()
	cfg.Dispatch.PackSize, cfg.Dispatch.PackMaxListings, cfg.Dispatch.PackMaxSales = def.Collect.PackSize, packing.MaxListingsDefault, packing.MaxSalesDefault
	cfg.Dispatch.ShadowFraction = packing.ShadowFractionDefault
	e.sim.ResetStats()
	start := time.Now()
	b.Logf("fresh-start-ms %d", start.UnixMilli())
	r := e.start(b, cfg, zaptest.NewLogger(b, zaptest.Level(zap.WarnLevel)))
	b.ResetTimer()
	tick := time.NewTicker(time.Second) // a benchmark's clock, not synchronisation
	for time.Since(start) < dur {
		<-tick.C
	}
	tick.Stop()
	rep := e.sim.Scorer().Report()
	elapsed := time.Since(start)
	b.StopTimer()
	r.stop()

	lags := claimLags(b, e.pool, time.Time{}, time.Now().AddDate(1, 0, 0)) // every claim
	p99 := func(xs []float64) float64 { return quantile(xs, 0.99) }
	ks := e.sim.KeyStats(marketKey)
	// Collections, not snapshots: with history.mode changes an unchanged one writes none.
	collections := int(testutil.ToFloat64(r.d.Metrics().Collections.WithLabelValues("collected")))
	b.ReportMetric(float64(ks.Total)/float64(max(collections, 1)), "req/collection")
	b.ReportMetric(rep.Freshness, "freshness")
	b.ReportMetric(rep.MeanAge, "mean-age-s")
	b.ReportMetric(float64(ks.Total)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(ks.MaxPerSecond), "max-req/s")
	b.ReportMetric(p99(lags["HOT_1M"]), "hot-lag-p99-s")
	b.ReportMetric(p99(lags["COLD_10M"]), "cold-lag-p99-s")
	b.ReportMetric(elapsed.Seconds(), "seconds")
	b.Logf("realistic market, %d items, budget %.0f/s, %s: freshness %.3f, mean age %.1f s, %d requests (busiest second %d), latest-claim lag p99 HOT %.2f s COLD %.2f s",
		len(e.items), budget, elapsed.Round(time.Second), rep.Freshness, rep.MeanAge, ks.Total, ks.MaxPerSecond, p99(lags["HOT_1M"]), p99(lags["COLD_10M"]))
}
