package tierplan

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/duecollector/duecollector/internal/tiers"
)

// The planner's fixed-size choices are the scheduled tiers: a tier added to internal/tiers and
// not here would never be planned, and every item on it would be moved off.
func TestChoicesAreTheScheduledTiers(t *testing.T) {
	if !slices.Equal(Choices[:], tiers.Scheduled()) {
		t.Fatalf("Choices %v, scheduled tiers %v", Choices, tiers.Scheduled())
	}
}

// randomCatalog draws heavy-tailed weights and rates, as a real market has.
func randomCatalog(r *rand.Rand, n int) []Item {
	items := make([]Item, n)
	for i := range items {
		items[i] = Item{
			Weight:     math.Exp(r.NormFloat64() * 1.5),
			ChangeRate: math.Exp(r.NormFloat64()*1.5) / 1200,
			SalesRate:  math.Exp(r.NormFloat64()*2) / 20000,
			Requests:   2,
		}
		if r.IntN(2) == 0 { // shares packed calls while its sales per collection are few
			items[i].Packed = 0.2 + r.Float64()*0.5
			items[i].PackedUpTo = 5 / max(items[i].SalesRate, 1e-9)
		}
		if r.IntN(50) == 0 {
			items[i].Pinned = Choices[r.IntN(len(Choices))]
		}
	}
	return items
}

func TestPlanRespectsBudgetOnRandomCatalogs(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := 0; trial < 200; trial++ {
		items := randomCatalog(r, 1+r.IntN(3000))
		b := limitOf(1+r.Float64()*100, 60+r.Float64()*6000, r.Float64()*0.3)
		p := Solve(items, b)
		demand, fresh := Predict(items, p.Tiers)
		if math.Abs(demand-p.Demand) > 1e-9*(1+demand) || math.Abs(fresh-p.Freshness) > 1e-9 {
			t.Fatalf("trial %d: plan reports demand %v freshness %v, its tiers give %v %v", trial, p.Demand, p.Freshness, demand, fresh)
		}
		// The cheapest possible plan (every free item at its cheapest tier, COLD unless it packs
		// only at a faster one) is the only excuse for going over.
		floorDemand := p.PinnedDemand
		for _, it := range items {
			if it.Pinned == "" {
				c := math.Inf(1)
				for k := range Choices {
					c = min(c, it.RequestsAt(choiceSeconds[k])/choiceSeconds[k])
				}
				floorDemand += c
			}
		}
		if math.Abs(p.MinDemand-floorDemand) > 1e-9*(1+floorDemand) {
			t.Fatalf("trial %d: MinDemand %v, the cheapest tiers cost %v", trial, p.MinDemand, floorDemand)
		}
		if p.Demand > b*(1+1e-9) && p.Demand > floorDemand*(1+1e-9) {
			t.Fatalf("trial %d: demand %v over limit %v although the cheapest tiers cost %v", trial, p.Demand, b, floorDemand)
		}
		if p.PinsExceed != (p.PinnedDemand > b) {
			t.Fatalf("trial %d: PinsExceed=%v with pinned demand %v, limit %v", trial, p.PinsExceed, p.PinnedDemand, b)
		}
		for i, it := range items {
			if it.Pinned != "" && p.Tiers[i] != it.Pinned {
				t.Fatalf("trial %d: pinned item %d moved from %s to %s", trial, i, it.Pinned, p.Tiers[i])
			}
		}
	}
}

// limitOf is what a budget of perSecond and perMinute less headroom leaves a plan, as
// budget.PlanLimit computes it (tested there).
func limitOf(perSecond, perMinute, headroom float64) float64 {
	return math.Min(perSecond, perMinute/60) * (1 - headroom)
}

func TestPlanUsesTheBudgetWhenItBuysFreshness(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	items := randomCatalog(r, 5000)
	for i := range items {
		items[i].Pinned = ""
	}
	b := limitOf(20, 1200, 0)
	p := Solve(items, b)
	// The smallest single upgrade costs 2/300 − 2/600 requests/s; a plan leaving more slack than
	// a few of those unspent while items could go faster is wasting budget.
	if slack := b - p.Demand; slack > 0.05 {
		t.Errorf("plan leaves %v req/s of %v unspent", slack, b)
	}
	all := make([]tiers.Tier, len(items))
	for i := range all {
		all[i] = tiers.Cold
	}
	if _, cold := Predict(items, all); p.Freshness <= cold {
		t.Errorf("plan freshness %v is no better than all COLD %v", p.Freshness, cold)
	}
}

func TestPlanPrefersHeavierItems(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for trial := 0; trial < 100; trial++ {
		items := randomCatalog(r, 500)
		for i := range items {
			items[i].Pinned = ""
			items[i].SalesRate = 0
		}
		// Pairs with the same change rate and costs, and different weights.
		for i := 0; i+1 < len(items); i += 2 {
			items[i+1].ChangeRate, items[i+1].Packed, items[i+1].PackedUpTo = items[i].ChangeRate, items[i].Packed, items[i].PackedUpTo
		}
		p := Solve(items, limitOf(1+r.Float64()*5, 1e9, 0))
		for i := 0; i+1 < len(items); i += 2 {
			light, heavy := i, i+1
			if items[light].Weight > items[heavy].Weight {
				light, heavy = heavy, light
			}
			if p.Tiers[heavy].Rank() > p.Tiers[light].Rank() {
				t.Fatalf("trial %d: heavier item (w=%v) got %s, lighter (w=%v) got %s at the same change rate",
					trial, items[heavy].Weight, p.Tiers[heavy], items[light].Weight, p.Tiers[light])
			}
		}
	}
}

func TestPlanNeverLosesSalesWhenASafeChoiceFits(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	for trial := 0; trial < 200; trial++ {
		items := randomCatalog(r, 1000)
		for i := range items {
			// Many items sell fast enough that COLD would overflow the 100-row window.
			items[i].SalesRate = math.Exp(r.NormFloat64()*1.5) / 10
			items[i].Pinned = ""
		}
		b := limitOf(r.Float64()*40, 1e9, 0)
		p := Solve(items, b)
		unsafe := 0
		for i, it := range items {
			k := indexOf(p.Tiers[i])
			if SalesSafe(it.SalesRate, choiceSeconds[k]) {
				continue
			}
			unsafe++
			s := safeChoice(it)
			if s < 0 {
				continue // not even HOT is safe
			}
			if extra := cost(it, s) - cost(it, k); p.Demand+extra <= b {
				t.Fatalf("trial %d: item %d (%.3g sales/s) left at %s losing sales; %s fits (demand %v + %v ≤ %v)",
					trial, i, it.SalesRate, p.Tiers[i], Choices[s], p.Demand, extra, b)
			}
		}
		if unsafe != p.SalesUnsafe {
			t.Fatalf("trial %d: SalesUnsafe %d, counted %d", trial, p.SalesUnsafe, unsafe)
		}
	}
}

func TestPinsAloneOverBudgetAreReported(t *testing.T) {
	items := []Item{{Weight: 1, ChangeRate: 0.01, Requests: 2, Pinned: tiers.Hot}, {Weight: 5, ChangeRate: 0.01, Requests: 2}}
	p := Solve(items, limitOf(0.02, 1e9, 0))
	if !p.PinsExceed || p.Tiers[0] != tiers.Hot || p.Tiers[1] != tiers.Cold {
		t.Errorf("pins over budget: got %+v", p)
	}
}

func TestFreshness(t *testing.T) {
	if Freshness(0, 600) != 1 {
		t.Error("an item that never changes is always fresh")
	}
	// λI = 1: (1 − 1/e).
	if got := Freshness(1.0/60, 60); math.Abs(got-(1-math.Exp(-1))) > 1e-12 {
		t.Errorf("Freshness(λI=1) = %v", got)
	}
	if !(Freshness(0.01, 60) > Freshness(0.01, 600)) {
		t.Error("collecting more often must be fresher")
	}
}

func indexOf(t tiers.Tier) int {
	for k, c := range Choices {
		if c == t {
			return k
		}
	}
	return -1
}

func BenchmarkSolveMillionItems(b *testing.B) {
	items := randomCatalog(rand.New(rand.NewPCG(9, 10)), 1_000_000)
	budget := limitOf(500, 30000, 0.1)
	b.ResetTimer()
	for b.Loop() {
		Solve(items, budget)
	}
}

func TestPlanCountsPackedCosts(t *testing.T) {
	// 600 alike items; at 2 requests a collection 10 req/s buys 300 HOT, at a packed 0.4 it buys
	// them all.
	items := make([]Item, 600)
	for i := range items {
		items[i] = Item{Weight: 1, ChangeRate: 1.0 / 600, Requests: 2}
	}
	b := limitOf(10, 1e9, 0)
	alone := Solve(items, b)
	for i := range items {
		items[i].Packed, items[i].PackedUpTo = 0.4, math.Inf(1)
	}
	packed := Solve(items, b)
	count := func(p Plan) (hot int) {
		for _, t := range p.Tiers {
			if t == tiers.Hot {
				hot++
			}
		}
		return hot
	}
	if got := count(alone); got > 300 {
		t.Errorf("alone: %d HOT items at 2 requests each exceed 10 req/s", got)
	}
	if got := count(packed); got != 600 {
		t.Errorf("packed: %d of 600 items HOT, want all (600 × 0.4 / 60 s = 4 req/s)", got)
	}
	if packed.Freshness <= alone.Freshness || packed.Demand > b {
		t.Errorf("packed plan: freshness %v (alone %v), demand %v of %v", packed.Freshness, alone.Freshness, packed.Demand, b)
	}
}

func TestPlanTakesAFasterTierThatPacksWhenItIsCheaper(t *testing.T) {
	// Sells 1 a minute: packs up to 5 sales a collection, i.e. at intervals up to 300 s. COLD
	// alone costs 2/600 req/s, WARM packed 0.2/300: WARM is fresher and cheaper.
	it := Item{Weight: 1, ChangeRate: 1.0 / 3600, SalesRate: 1.0 / 60, Requests: 2, Packed: 0.2, PackedUpTo: 300}
	p := Solve([]Item{it}, limitOf(0.004, 1e9, 0))
	if p.Tiers[0].Rank() > tiers.Warm.Rank() || p.Demand > p.Limit {
		t.Errorf("got %s at %v req/s (limit %v); want WARM_5M or faster within the limit", p.Tiers[0], p.Demand, p.Limit)
	}
}
