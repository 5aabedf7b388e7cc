package daemon

import (
	"context"
	"os"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// BenchmarkHotUnderBacklog is issue #30's case: 150 HOT items due spread over a minute (5
// requests a second at 2 a collection) and 2,850 WARM items all due at once, one daemon with a
// budget of 10 requests a second, tiers held (no recalculation, as with catalog.policy
// thresholds between plans). The WARM backlog alone is ten minutes of budget, so the budget is
// saturated throughout; HOT must still be claimed within about half a second of its due time.
// It reports the HOT due → claim lag p50/p99 over the last minute of the run (90 s by default),
// the busiest second the provider saw and the claim statements a second (empty ones included).
//
//	go test -run '^$' -bench HotUnderBacklog -benchtime 1x ./internal/daemon/
//	DUECOLLECTOR_HOT_DURATION=30s go test ...   (measured over its last two thirds when under 90 s)
func BenchmarkHotUnderBacklog(b *testing.B) {
	for _, bc := range []struct {
		name string
		pack bool
	}{{"packing-off", false}, {"packing-on", true}} {
		b.Run(bc.name, func(b *testing.B) {
			for range b.N {
				hotUnderBacklog(b, bc.pack)
			}
		})
	}
}

func hotUnderBacklog(b *testing.B, pack bool) {
	dur := 90 * time.Second
	if s := os.Getenv("DUECOLLECTOR_HOT_DURATION"); s != "" {
		var err error
		if dur, err = time.ParseDuration(s); err != nil {
			b.Fatalf("DUECOLLECTOR_HOT_DURATION: %v", err)
		}
	}
	// The last minute, or the last two thirds of a shorter run: the first part lets the
	// budget's join delay and the first claims settle.
	measure := min(time.Minute, dur*2/3)
	const hot, warm = 150, 2850
	e := newEnv(b, hot+warm, neoplesim.Options{})
	e.fullPages = pack
	ctx := context.Background()
	now := time.Now()
	var rows []storetest.Item
	for i, it := range e.items {
		if i < hot {
			// Spread over the minute by their phase slots, as the dispatcher reschedules them.
			iv, _ := tiers.Hot.Interval()
			next := tiers.NextSlot(it.ItemID, iv, now.Add(-iv/2))
			rows = append(rows, storetest.Item{ID: it.ItemID, Name: it.ItemName, Tier: tiers.Hot, NextCollectAt: storetest.At(next)})
			continue
		}
		rows = append(rows, storetest.Item{ID: it.ItemID, Name: it.ItemName, Tier: tiers.Warm, NextCollectAt: storetest.In(-time.Second)})
	}
	storetest.Items(b, e.pool, rows...)

	const budget = 10
	cfg := testConfig()
	cfg.Daemon.Notify = true
	cfg.Daemon.Budget.Enabled = true
	cfg.Market.Rate, cfg.Market.Burst, cfg.Market.PerMinute = budget, budget, budget*60
	cfg.Dispatch.Concurrency = 32
	cfg.Dispatch.BatchSize = 100
	if pack {
		def := config.Default()
		cfg.Daemon.PackWait = def.Daemon.PackWait
		cfg.Dispatch.PackSize, cfg.Dispatch.PackMaxListings, cfg.Dispatch.PackMaxSales = def.Collect.PackSize, packing.MaxListingsDefault, packing.MaxSalesDefault
		cfg.Dispatch.ShadowFraction = packing.ShadowFractionDefault
	}
	claims := countClaims(b, &cfg)
	e.sim.ResetStats()
	wallStart := time.Now()
	r := e.start(b, cfg, zaptest.NewLogger(b, zaptest.Level(zap.WarnLevel)))
	b.ResetTimer()
	tick := time.NewTicker(time.Second) // a benchmark's clock, not synchronisation
	var from time.Time
	for time.Since(wallStart) < dur {
		<-tick.C
		if from.IsZero() && time.Since(wallStart) >= dur-measure {
			if err := e.pool.QueryRow(ctx, `SELECT now()`).Scan(&from); err != nil {
				b.Fatal(err)
			}
		}
	}
	tick.Stop()
	var to time.Time
	if err := e.pool.QueryRow(ctx, `SELECT now()`).Scan(&to); err != nil {
		b.Fatal(err)
	}
	// Each HOT item is claimed about once a minute, so its latest claim is the one in the window
	// for all but those claimed twice in it; items still waiting count with their wait so far.
	lags := claimLags(b, e.pool, from, to)[string(tiers.Hot)]
	lags = append(lags, waiting(b, e.pool)[string(tiers.Hot)]...)
	b.StopTimer()
	elapsed := time.Since(wallStart)
	ks := e.sim.KeyStats(marketKey)
	if err := r.shutdown(b); err != nil {
		b.Fatal(err)
	}
	statements := claims()
	pct := func(q float64) float64 { return quantile(lags, q) * 1000 }
	b.ReportMetric(pct(0.5), "hot-lag-p50-ms")
	b.ReportMetric(pct(0.99), "hot-lag-p99-ms")
	b.ReportMetric(float64(ks.MaxPerSecond), "busiest-req/s")
	b.ReportMetric(float64(ks.Total)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(statements)/elapsed.Seconds(), "claims/s")
	b.Logf("packing %v, budget %d/s, %s (HOT measured over the last %s): HOT claims %d, lag p50 %.0f ms p99 %.0f ms max %.0f ms; served %.1f req/s, busiest second %d; %d claim statements (%.1f/s)",
		pack, budget, elapsed.Round(time.Second), measure, len(lags), pct(0.5), pct(0.99), pct(1), float64(ks.Total)/elapsed.Seconds(), ks.MaxPerSecond,
		statements, float64(statements)/elapsed.Seconds())
}

// countClaims counts the claim statements of a daemon started with cfg, from its passes'
// summaries as they end (the last when the daemon stops). Call the function it returns once
// the daemon has stopped.
func countClaims(b *testing.B, cfg *Config) func() int {
	cfg.signals.passed.Init(b)
	stop, total := make(chan struct{}), make(chan int, 1)
	go func() {
		n := 0
		for {
			select {
			case res := <-cfg.signals.passed.C():
				n += res.Summary.Batches + res.Summary.EmptyClaims
				continue
			case <-stop:
			}
			// The daemon has stopped: every pass has signalled.
			for {
				select {
				case res := <-cfg.signals.passed.C():
					n += res.Summary.Batches + res.Summary.EmptyClaims
				default:
					total <- n
					return
				}
			}
		}
	}()
	return func() int {
		close(stop)
		return <-total
	}
}
