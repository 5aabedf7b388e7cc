package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// New items (an import) are planned at the next gauge refresh, not an hour later at the next
// catalog.recalc_interval; the demand and budget gauges describe the key.
func TestNewItemsAreReplannedWithoutWaitingForTheInterval(t *testing.T) {
	e := newEnv(t, 10, neoplesim.Options{})
	cfg := testConfig()
	cfg.Catalog = config.Default().Catalog
	cfg.Catalog.RecalcInterval = time.Hour
	// A budget far below even all-COLD: the plan moves every item to COLD_10M.
	cfg.Market.Rate, cfg.Market.PerMinute = 0.01, 1
	r := e.start(t, cfg, nil)
	budgetGauge := r.d.Metrics().BudgetRate.WithLabelValues(string(provider.WorkloadMarket))
	testkit.Eventually(t, 10*time.Second, "first gauge refresh", func() bool { return testutil.ToFloat64(budgetGauge) > 0 })

	ctx := context.Background()
	ids := e.trackObserved(t)
	testkit.Eventually(t, 20*time.Second, "the new items planned", func() bool {
		var n int
		_ = e.pool.QueryRow(ctx, `SELECT count(*) FROM tracked_items WHERE collection_tier = 'COLD_10M' AND tier_reason LIKE 'budget plan%'`).Scan(&n)
		return n == len(ids)
	})
	testkit.Eventually(t, 10*time.Second, "demand gauge", func() bool {
		return testutil.ToFloat64(r.d.Metrics().TierDemand.WithLabelValues(string(tiers.Cold))) > 0
	})
	if got := testutil.ToFloat64(budgetGauge); got != 0.01 {
		t.Errorf("budget gauge %v, want the tighter of 0.01/s and 1/min", got)
	}
}
