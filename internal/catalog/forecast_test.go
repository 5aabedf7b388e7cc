package catalog

import (
	"context"
	"math"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

// tierWeights are the items and summed popularity per tier as stored.
func tierWeights(t *testing.T, pool *pgxpool.Pool) (map[tiers.Tier]int, map[tiers.Tier]float64) {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT collection_tier, count(*), sum(greatest(popularity_score, 0)) FROM tracked_items GROUP BY 1`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n, w := map[tiers.Tier]int{}, map[tiers.Tier]float64{}
	for rows.Next() {
		var tier string
		var c int
		var s float64
		if err := rows.Scan(&tier, &c, &s); err != nil {
			t.Fatal(err)
		}
		n[tiers.Tier(tier)], w[tiers.Tier(tier)] = c, s
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return n, w
}

// An applied plan stores, per tier, its items, demand and weighted freshness; they add up to the
// plan's own prediction, and the next plan replaces them, tiers it leaves empty included.
func TestAppliedPlanStoresItsForecastPerTier(t *testing.T) {
	pool := plannedCatalog(t, 20)
	ctx := context.Background()
	read := func() []TierForecast {
		t.Helper()
		fs, err := ReadForecast(ctx, pool)
		if err != nil {
			t.Fatal(err)
		}
		return fs
	}
	if fs := read(); len(fs) != 0 {
		t.Fatalf("a forecast before any plan: %+v", fs)
	}
	if _, err := PlanTiers(ctx, pool, budgetPolicy(0.12)); err != nil {
		t.Fatal(err)
	}
	if fs := read(); len(fs) != 0 {
		t.Fatalf("a plan not applied stored a forecast: %+v", fs)
	}

	res, err := RecalculatePopularity(ctx, pool, budgetPolicy(0.12))
	if err != nil {
		t.Fatal(err)
	}
	fs := read()
	counts, weights := tierWeights(t, pool)
	if len(fs) < 2 || len(fs) != len(counts) {
		t.Fatalf("forecast %+v for the tiers %v: want one row per tier, a tight budget spreads them", fs, counts)
	}
	var tfs []tierplan.TierForecast
	for i, f := range fs {
		if i > 0 && f.Tier.Rank() <= fs[i-1].Tier.Rank() {
			t.Errorf("forecast out of tier order: %+v", fs)
		}
		if f.Items != counts[f.Tier] || math.Abs(f.Weight-weights[f.Tier]) > 1e-9 || !f.PlannedAt.Equal(res.Now) ||
			!(f.Freshness > 0 && f.Freshness <= 1) {
			t.Errorf("tier %s: %+v; want its %d items of popularity %v planned at %s", f.Tier, f, counts[f.Tier], weights[f.Tier], res.Now)
		}
		tfs = append(tfs, f.TierForecast)
	}
	if demand, fresh := tierplan.Overall(tfs); math.Abs(demand-res.Plan.DemandAfter) > 1e-9 || math.Abs(fresh-res.Plan.FreshnessAfter) > 1e-9 {
		t.Errorf("the tiers ask %v requests/s with freshness %v; the plan %v, %v", demand, fresh, res.Plan.DemandAfter, res.Plan.FreshnessAfter)
	}

	// An ample budget puts every item on HOT_1M: the slower tiers' rows go.
	res2, err := RecalculatePopularity(ctx, pool, budgetPolicy(100))
	if err != nil {
		t.Fatal(err)
	}
	fs = read()
	if len(fs) != 1 || fs[0].Tier != tiers.Hot || fs[0].Items != 20 || !fs[0].PlannedAt.Equal(res2.Now) ||
		math.Abs(fs[0].Freshness-res2.Plan.FreshnessAfter) > 1e-9 {
		t.Fatalf("after re-planning with an ample budget: %+v, want HOT_1M alone with the plan's freshness %v at %s",
			fs, res2.Plan.FreshnessAfter, res2.Now)
	}

	// The thresholds policy, which plans nothing, stores what its tiers predict all the same.
	p := budgetPolicy(100)
	p.Mode = config.PolicyThresholds
	res3, err := RecalculatePopularity(ctx, pool, p)
	if err != nil {
		t.Fatal(err)
	}
	fs = read()
	counts, _ = tierWeights(t, pool)
	if len(fs) != len(counts) || !fs[0].PlannedAt.Equal(res3.Now) || res3.Plan != nil {
		t.Fatalf("after a thresholds recalculation: %+v for the tiers %v", fs, counts)
	}
}
