package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// The livelock this replaces: a provider limited to 5 requests/s and the default budget of
// 500/s, where every rate-limit answer cancelled the calls in flight and handed their items
// back, collected nothing. Now the budget learns the limit and collection goes on.
func TestDefaultBudgetAgainstASlowProviderKeepsCollecting(t *testing.T) {
	const n, limit = 300, 5
	e := newEnv(t, n, neoplesim.Options{Rate: limit})
	e.track(t, 0, n, tiers.Cold, -time.Second)
	cfg := testConfig()
	cfg.Daemon.Budget.Enabled = true
	cfg.Daemon.Budget.Heartbeat = 100 * time.Millisecond
	cfg.Market.Rate, cfg.Market.PerMinute = 500, 30000 // the defaults: far above the provider's limit
	if !cfg.Daemon.Budget.Adaptive {
		t.Fatal("daemon.budget.adaptive must be on by default")
	}
	r := e.start(t, cfg, nil)
	testkit.Eventually(t, 30*time.Second, "the learned rate to come down to the provider's limit", func() bool {
		return r.d.Share().Stats().ClusterRate < 2*limit
	})
	// Answers to requests sent before the last cuts may still come back refused: let them.
	settle := time.Now().Add(2 * time.Second)
	testkit.Eventually(t, 10*time.Second, "the cuts to settle", func() bool { return time.Now().After(settle) })
	e.sim.ResetStats()
	before := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_collected_at IS NOT NULL`)
	testkit.Eventually(t, 30*time.Second, "ten more items collected", func() bool {
		return count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_collected_at IS NOT NULL`) >= before+10
	})
	ks := e.sim.KeyStats(marketKey)
	if ks.Total == 0 || float64(ks.RateLimited) > 0.2*float64(ks.Total) {
		t.Errorf("after convergence %d of %d requests refused", ks.RateLimited, ks.Total)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_outcome = 'rate_limited'`); c > n/10 {
		t.Errorf("%d items failed as rate-limited", c)
	}
	st, err := Status(context.Background(), e.pool, "neople")
	if err != nil || len(st.Budgets) != 1 || st.Budgets[0].LearnedRate == nil || *st.Budgets[0].LearnedRate > 3*limit ||
		st.Budgets[0].LastCut == nil {
		t.Fatalf("status budgets %+v, %v: want the learned rate near %d and its last cut", st.Budgets, err, limit)
	}
}
