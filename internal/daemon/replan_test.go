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

// New items (an import) seen by a gauge refresh make the cost loop ask for a plan, not an
// hour later at the next catalog.recalc_interval; the refresh itself plans nothing, and the
// demand and budget gauges describe the key.
func TestNewItemsAreReplannedWithoutWaitingForTheInterval(t *testing.T) {
	e := newEnv(t, 10, neoplesim.Options{})
	cfg := testConfig()
	cfg.Catalog = config.Default().Catalog
	cfg.Catalog.RecalcInterval = time.Hour
	// A budget far below even all-COLD: the plan moves every item to COLD_10M.
	cfg.Market.Rate, cfg.Market.PerMinute = 0.01, 1
	d := e.build(t, cfg, nil)
	ctx := context.Background()
	refresh := func() {
		t.Helper()
		if _, err := d.gauges.runOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	refresh()
	if d.loop.ReplanDue(time.Now(), 1) {
		t.Fatal("a plan asked for before any item was added")
	}

	ids := e.trackObserved(t)
	refresh()
	planned := `SELECT count(*) FROM tracked_items WHERE collection_tier = 'COLD_10M' AND tier_reason LIKE 'budget plan%'`
	if n := count(t, e.pool, planned); n != 0 {
		t.Fatalf("%d items planned by a gauge refresh, want none", n)
	}
	if !d.loop.ReplanDue(time.Now(), 1) {
		t.Fatal("the new items did not ask for a plan")
	}
	if st, err := Status(ctx, e.pool, "neople"); err != nil || !st.PlannedAt.IsZero() {
		t.Fatalf("status before any plan: planned at %s (%v), want no forecast", st.PlannedAt, err)
	}
	// A plan that fails (here its context is gone, as its database may be) leaves the new
	// items asking for one.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	failedAt := time.Now()
	if _, err := d.plan.runOnce(gone, failedAt); err == nil {
		t.Fatal("a plan without its database succeeded")
	}
	if !d.loop.ReplanDue(failedAt.Add(time.Hour), 1) {
		t.Fatal("a plan that failed was taken as made: the new items stopped asking for one")
	}
	if _, err := d.plan.runOnce(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.pool, planned); n != len(ids) {
		t.Fatalf("%d of %d new items planned to COLD_10M", n, len(ids))
	}
	// The plan stored what it predicts, and status reads it beside the tier.
	st, err := Status(ctx, e.pool, "neople")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Tiers) != 1 || st.Tiers[0].Forecast == nil || st.Tiers[0].Forecast.Items != len(ids) ||
		!(st.Tiers[0].Forecast.Freshness > 0 && st.Tiers[0].Forecast.Freshness <= 1) || st.PlannedAt.IsZero() {
		t.Fatalf("status after the plan: %+v planned at %s, want COLD_10M's forecast for %d items", st.Tiers, st.PlannedAt, len(ids))
	}
	refresh()
	if d := testutil.ToFloat64(d.Metrics().TierDemand.WithLabelValues(string(tiers.Cold))); d <= 0 {
		t.Errorf("COLD_10M demand gauge %v, want the planned items' demand", d)
	}
	if got := testutil.ToFloat64(d.Metrics().BudgetRate.WithLabelValues(string(provider.WorkloadMarket))); got != 0.01 {
		t.Errorf("budget gauge %v, want the tighter of 0.01/s and 1/min", got)
	}
}

// The plan service's loop plans when the cost loop asks, without waiting for its interval, and
// hands the collection loop a wake-up (promotions may have made items due sooner).
func TestPlanServicePlansWhenTheCostLoopAsks(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	cfg := testConfig()
	cfg.Catalog = config.Default().Catalog
	cfg.Catalog.RecalcInterval = time.Hour
	cfg.GaugeInterval = 100 * time.Millisecond
	cfg.signals.planned.Init(t)
	d := e.build(t, cfg, nil)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.plan.Start(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

	d.loop.SawTracked(0)
	d.loop.SawTracked(1)
	if res := cfg.signals.planned.Wait(t); res.Skipped || res.Share != 1 {
		t.Fatalf("plan %+v: want one made for the whole budget", res)
	}
	testkit.Recv(t, d.wake, testkit.Timeout, "the wake-up handed to the collection loop after a plan")
}
