package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/config"
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
	if !cfg.Daemon.Budget.Adaptive || !cfg.Daemon.Budget.SlowStart {
		t.Fatal("daemon.budget.adaptive and slow_start must be on by default")
	}
	r := e.start(t, cfg, nil)
	testkit.Eventually(t, 30*time.Second, "the learned rate to come down to the provider's limit", func() bool {
		return r.d.Share().Stats().ClusterRate < 2*limit
	})
	// Answers to requests sent before the last cuts may still come back refused: measure from
	// the end of a run of two seconds' worth of requests at the provider's limit with none refused.
	for deadline := time.Now().Add(30 * time.Second); ; {
		ks := e.sim.KeyStats(marketKey)
		testkit.Recv(t, e.sim.Served(marketKey, ks.Total+2*limit), 20*time.Second, "the cuts to settle")
		if e.sim.KeyStats(marketKey).RateLimited == ks.RateLimited {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("requests were still refused 30 s after the learned rate came down to %d/s", limit)
		}
	}
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

// A provider whose real limit is far below the configured budget gets a tier plan it can serve:
// once the adaptive budget has learned the limit, the daemon plans within it (not at the next
// catalog.recalc_interval), so HOT no longer asks for more than the provider gives.
func TestPlanFollowsTheLearnedBudget(t *testing.T) {
	const n, learned = 600, 5.0
	e := newEnv(t, n, neoplesim.Options{})
	ctx := context.Background()
	// Every item HOT, viewed, with a known change rate: 600 × 2 requests a minute = 20 req/s,
	// which the configured 500/s allows; not due, so no traffic moves the learned rate.
	ids := e.trackObserved(t)
	if _, err := e.pool.Exec(ctx, `INSERT INTO item_interest (item_id, kind) SELECT id, 'view' FROM unnest($1::text[]) AS u(id)`, ids); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Catalog = config.Default().Catalog
	cfg.Catalog.RecalcInterval = time.Hour
	cfg.Daemon.Budget.Enabled = true
	cfg.Daemon.Budget.Heartbeat = 100 * time.Millisecond
	cfg.Market.Rate, cfg.Market.PerMinute = 500, 30000
	// What earlier rate-limit answers taught the cluster about this key.
	if _, err := e.pool.Exec(ctx, `INSERT INTO budget_rates (key_label, rate) VALUES ($1, $2)`, cfg.KeyLabel, learned); err != nil {
		t.Fatal(err)
	}
	cfg.signals.planned.Init(t)
	e.start(t, cfg, nil)
	demand := func() float64 {
		var d float64
		err := e.pool.QueryRow(ctx, `
			SELECT coalesce(sum(CASE collection_tier WHEN 'HOT_1M' THEN 2.0/60 WHEN 'ACTIVE_3M' THEN 2.0/180
			                    WHEN 'WARM_5M' THEN 2.0/300 WHEN 'COLD_10M' THEN 2.0/600 ELSE 0 END), 0)
			FROM tracked_items WHERE tier_reason LIKE 'budget plan%'`).Scan(&d)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	// The first plan is the one the learned budget asks for: the items were there at the start.
	if res := cfg.signals.planned.Wait(t); res.Skipped || res.Share > 0.1 {
		t.Fatalf("first plan %+v: want one made within the learned share (%.3f)", res, learned/(500*0.97))
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE tier_reason LIKE 'budget plan%'`); c != n {
		t.Fatalf("%d of %d items planned", c, n)
	}
	// All COLD would ask for 2 req/s: the plan spends the learned budget, and no more.
	if d := demand(); d > learned || d <= 2.01 {
		t.Fatalf("planned demand %.2f req/s, want within the learned %.0f req/s (and above all-COLD's 2)", d, learned)
	}
}

// Collections that cost more than the plan counted (here: counted as packed at 0.5 requests,
// collected alone at 2 with packing off) leave demand the budget cannot serve: the daemon
// measures the difference and plans again within what the budget really buys.
func TestPlanCountsWhatCollectionsReallyCost(t *testing.T) {
	const n = 300
	e := newEnv(t, n, neoplesim.Options{})
	ctx := context.Background()
	ids := e.trackObserved(t)
	if _, err := e.pool.Exec(ctx, `INSERT INTO item_interest (item_id, kind) SELECT id, 'view' FROM unnest($1::text[]) AS u(id)`, ids); err != nil {
		t.Fatal(err)
	}
	// 300 HOT items: 2.5 req/s as counted, 10 req/s as collected.
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now(), requests_per_collection = 0.5`); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Catalog = config.Default().Catalog
	cfg.Catalog.RecalcInterval = time.Hour
	cfg.GaugeInterval = 100 * time.Millisecond
	cfg.Dispatch.PackSize = 1
	const perSecond = 12.0
	cfg.Market.Rate, cfg.Market.PerMinute = perSecond, perSecond*60
	limit := budget.PlanLimit(cfg.Market, cfg.Daemon.Budget.Headroom, 1) // what the plan may use
	cfg.signals.planned.Init(t)
	e.start(t, cfg, nil)
	// Nothing asks for a plan until the measured cost ratio has cut the plan's share.
	if res := cfg.signals.planned.Wait(t); res.Skipped || res.Share >= budget.ReplanBelowDefault {
		t.Fatalf("first plan %+v: want one made after collections cost more than counted", res)
	}
	var demand float64 // at the 2 requests a collection really costs
	if err := e.pool.QueryRow(ctx, `
		SELECT sum(2.0 / CASE collection_tier WHEN 'HOT_1M' THEN 60 WHEN 'ACTIVE_3M' THEN 180
		                    WHEN 'WARM_5M' THEN 300 WHEN 'COLD_10M' THEN 600 END)
		FROM tracked_items`).Scan(&demand); err != nil {
		t.Fatal(err)
	}
	if demand > limit {
		t.Fatalf("real demand after the new plan %.2f req/s, over the %.1f req/s the budget allows", demand, limit)
	}
}
