package budget

import (
	"context"
	"fmt"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

// joinAdaptive starts one process with an adaptive share.
func (c *cluster) joinAdaptive(t *testing.T, name string, ceiling float64, workers int) *member {
	t.Helper()
	return c.start(t, Config{KeyLabel: c.label, Rate: ceiling, Headroom: 0.03, Heartbeat: 500 * time.Millisecond, Cooldown: time.Second,
		Instance: name, Adaptive: true}, workers)
}

// newLimitedCluster is a database and a simulator that allows limit requests/s per key (0:
// no limit) and answers the rate limit with status (0: 429).
func newLimitedCluster(t *testing.T, limit float64, status int) *cluster {
	t.Helper()
	pool, _ := storetest.NewPool(t)
	sim := neoplesim.New(neoplesim.Options{Items: 5, Seed: 3, MarketKey: marketKey, Rate: limit, RateLimitStatus: status})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	client, err := provider.NewClient(provider.ClientConfig{
		Workload: provider.WorkloadMarket, BaseURL: srv.URL, Key: marketKey,
		Rate: 100000, Burst: 10000, PerMinute: 100000000, AuctionLimit: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{pool: pool, sim: sim, client: client, item: sim.Catalog()[0].ItemID, label: KeyLabel("market", marketKey)}
}

// Two processes configured for 500/s against a provider that allows 40/s: the shared rate is
// cut on the provider's answers and settles near its real limit, which the cluster then uses
// without being refused more than rarely. (The figures against 5, 50 and 400/s are in
// BENCHMARKS.md; the bounds here leave room for a loaded machine.)
func TestAdaptiveRateConvergesOnTheProvidersRealLimit(t *testing.T) {
	const limit, ceiling = 40.0, 500.0
	for _, status := range []int{429, 400} {
		t.Run(fmt.Sprint(status), func(t *testing.T) {
			c := newLimitedCluster(t, limit, status)
			a := c.joinAdaptive(t, "a", ceiling, 8)
			b := c.joinAdaptive(t, "b", ceiling, 8)
			testkit.Eventually(t, 60*time.Second, "the learned rate to come down near the limit", func() bool {
				return a.share.Stats().ClusterRate < 1.5*limit && b.share.Stats().ClusterRate < 1.5*limit
			})
			var learned float64
			if err := c.pool.QueryRow(context.Background(), `SELECT rate FROM budget_rates WHERE key_label = $1`, c.label).Scan(&learned); err != nil {
				t.Fatal(err)
			}
			if learned >= ceiling*0.97 || learned < 1 {
				t.Fatalf("budget_rates holds %v, want a learned rate under the ceiling", learned)
			}
			start := untilSecond(t, time.Now(), 3*time.Second)
			c.sim.ResetStats()
			end := untilSecond(t, start, 10*time.Second-time.Millisecond)
			ks := c.sim.KeyStats(marketKey)
			served := float64(ks.Total-ks.RateLimited) / end.Sub(start).Seconds()
			refused := float64(ks.RateLimited) / float64(max(ks.Total, 1))
			t.Logf("served %.1f/s of %v (%.0f%%), %.1f%% refused, learned %.1f/s, cuts %d+%d",
				served, limit, 100*served/limit, 100*refused, a.share.Stats().ClusterRate, a.share.Stats().Cuts, b.share.Stats().Cuts)
			if served < 0.7*limit {
				t.Errorf("served %.1f/s, want at least 70%% of the real limit %v/s", served, limit)
			}
			if refused > 0.05 {
				t.Errorf("%.1f%% of requests refused after convergence, want at most 5%%", 100*refused)
			}
		})
	}
}

// Without rate-limit answers the rate stays at the ceiling; one answer cuts it for every
// process, and further answers within the hold do not cut again.
func TestOneCutPerHoldForTheWholeCluster(t *testing.T) {
	c := newCluster(t)
	a := c.joinAdaptive(t, "a", 100, 0)
	b := c.joinAdaptive(t, "b", 100, 0)
	testkit.Eventually(t, 15*time.Second, "both live", func() bool { return a.share.Stats().Live == 2 && b.share.Stats().Live == 2 })
	if r := a.share.Stats().ClusterRate; r < 96 || r > 97.01 {
		t.Fatalf("cluster rate %v before any answer, want the ceiling 97", r)
	}
	ctx := context.Background()
	a.share.RateLimited(ctx, 0, "test: API002")
	a.share.RateLimited(ctx, 0, "test: API002")
	b.share.RateLimited(ctx, 0, "test: API002")
	cut := DefaultDecrease * 97
	if got := a.share.Stats().ClusterRate; got < cut-1 || got > cut+0.5 {
		t.Fatalf("after one cut: %v, want %v × 97", got, DefaultDecrease)
	}
	testkit.Eventually(t, 5*time.Second, "the other process to learn the cut", func() bool { return b.share.Stats().ClusterRate < cut+1 })
	if a.share.CooldownRemaining() != 0 {
		t.Fatal("without Retry-After the cut is the back-off; no cool-down expected")
	}
	if a.share.Stats().Cuts+b.share.Stats().Cuts != 1 {
		t.Fatalf("cuts %d + %d, want one for the cluster", a.share.Stats().Cuts, b.share.Stats().Cuts)
	}
	b.share.RateLimited(ctx, 2*time.Second, "test: API002 with Retry-After")
	if b.share.CooldownRemaining() == 0 {
		t.Fatal("a Retry-After must still be honoured")
	}
}
