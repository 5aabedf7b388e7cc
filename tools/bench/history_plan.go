package main

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

// dayPlan is the default configuration's budget plan of a realistic catalog: the tier of each
// item and what the plan said of itself.
type dayPlan struct {
	ids     []string // the planned catalog, in the market's order
	truths  map[string]market.Truth
	tiers   map[string]tiers.Tier
	summary *tierplan.PlanSummary
	market  config.WorkloadLimits // the configured market key, which the plan took its share of
	limit   float64               // what the plan received: budget.ConfiguredPlanLimit
	// changeShare is the expected share of the catalog's collections at the planned tiers that
	// see a listing change or a sale, from the simulator's true rates.
	changeShare float64
}

// planRealistic plans the realistic market's first n items as recalculate-popularity (and
// `collector plan --apply`) does under config.Default(): scores and threshold decisions
// (catalog.Score, tierplan.Decide), then tierplan.ApplyBudget within provider.market's budget
// as budget.ConfiguredPlanLimit leaves it, with collect.pack_* packing. Each item is planned as the
// estimator would know it after a steady day at HOT_1M: its true rate of collections that see
// a change (listing changes and sales, which is what the write-back counts), its sales rate
// and order-book size; its score is the freshness section's (sales and views).
func planRealistic(n int, seed int64) (dayPlan, error) {
	m, err := market.New(market.Realistic, n, seed)
	if err != nil {
		return dayPlan{}, err
	}
	cfg := config.Default()
	p := catalog.PolicyFromConfig(cfg.Catalog, budget.ConfiguredPlanLimit(cfg), defaultPacking(cfg))
	from, err := tiers.Parse(cfg.Catalog.DefaultTier)
	if err != nil {
		return dayPlan{}, err
	}
	now := time.Now()
	truths := m.Truths()
	states := make([]tierplan.State, n)
	scores := make([]float64, n)
	ds := make([]tierplan.Decision, n)
	for i, it := range m.Items() {
		tr := truths[it.ItemID]
		listings := tr.Listings
		obs, secs := steadyObservations((tr.ChangesPerHour+tr.SalesPerHour)/3600, time.Minute, cfg.Catalog.EstimateWindow)
		states[i] = tierplan.State{Tier: from, CreatedAt: now.Add(-24 * time.Hour), Observed: obs,
			ObservedSales: tr.SalesPerHour / 3600 * secs, SeenListings: &listings}
		scores[i] = replayScore(tr.SalesPerHour, tr.Weight, p)
		ds[i] = tierplan.Decide(now, states[i], scores[i], p.Rules)
	}
	plan := dayPlan{truths: truths, tiers: make(map[string]tiers.Tier, n), market: cfg.Provider.Market, limit: p.Limit}
	plan.summary = tierplan.ApplyBudget(states, scores, ds, p.Limit, p.Packing)
	var changed, collections float64
	for i, it := range m.Items() {
		plan.ids = append(plan.ids, it.ItemID)
		plan.tiers[it.ItemID] = ds[i].Tier
		if iv, ok := ds[i].Tier.Interval(); ok {
			tr := truths[it.ItemID]
			changed += -math.Expm1(-(tr.ChangesPerHour+tr.SalesPerHour)/3600*iv.Seconds()) / iv.Seconds()
			collections += 1 / iv.Seconds()
		}
	}
	plan.changeShare = changed / max(collections, 1e-12)
	return plan, nil
}

// steadyObservations are the expected decayed counts of an item with change rate lambda (per
// second) collected every interval for much longer than window, and their seconds.
func steadyObservations(lambda float64, interval, window time.Duration) (tierplan.Observations, float64) {
	iv := interval.Seconds()
	n := window.Seconds() / iv
	x := n * -math.Expm1(-lambda*iv)
	return tierplan.Observations{Accesses: n, Changes: x, ChangedSeconds: x * iv, UnchangedSeconds: (n - x) * iv}, n * iv
}

// sample is n items of the planned catalog stratified by change rate: in order of λ + σ, the
// middle item of each of n equal slices, so the sample's rates (and so its share of collections
// that see a change) stand for the catalog's.
func (p dayPlan) sample(n int) []string {
	byRate := slices.Clone(p.ids)
	rate := func(id string) float64 { return p.truths[id].ChangesPerHour + p.truths[id].SalesPerHour }
	slices.SortStableFunc(byRate, func(a, b string) int { return cmp.Compare(rate(a), rate(b)) })
	out := make([]string, n)
	for j := range out {
		out[j] = byRate[(2*j+1)*len(byRate)/(2*n)]
	}
	return out
}

// mix counts the items of ids by tier, fastest first ("HOT_1M 412, ACTIVE_3M 60, …").
func (p dayPlan) mix(ids []string) string {
	count := map[tiers.Tier]int{}
	for _, id := range ids {
		count[p.tiers[id]]++
	}
	var parts []string
	for _, t := range tiers.All() {
		if count[t] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", t, count[t]))
		}
	}
	return strings.Join(parts, ", ")
}
