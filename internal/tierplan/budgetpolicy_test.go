package tierplan

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/tiers"
)

// newImports are n items imported at HOT_1M and never collected, held there by the threshold
// policy's demotion hold, as a mass import leaves them.
func newImports(n int) ([]State, []float64, []Decision) {
	created := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	items := make([]State, n)
	scores := make([]float64, n)
	ds := make([]Decision, n)
	for i := range items {
		items[i] = State{Tier: tiers.Hot, CreatedAt: created}
		scores[i] = float64(i % 7)
		ds[i] = Decision{Tier: tiers.Hot, Held: true}
	}
	return items, scores, ds
}

// observedState has been collected every five minutes and seen a change in half the intervals
// and the given sales.
func observedState(tier tiers.Tier, sales float64) State {
	return State{Tier: tier, Observed: Observations{Accesses: 100, Changes: 50, ChangedSeconds: 15000, UnchangedSeconds: 15000},
		ObservedSales: sales}
}

func TestApplyBudgetMovesUnobservedItemsIntoTheBudget(t *testing.T) {
	// 2,000 HOT items alone cost 66.7 requests/s; at COLD 6.7, within the 18 to plan with.
	items, scores, ds := newImports(2000)
	b := limitOf(20, 1200, 0.1)
	s := ApplyBudget(items, scores, ds, b, packing.Model{})
	if math.Abs(s.DemandBefore-2000*packing.Alone/60) > 1e-9 {
		t.Errorf("demand before %v, want the 66.7 of 2,000 HOT items", s.DemandBefore)
	}
	if s.DemandAfter > s.Limit+1e-9 {
		t.Errorf("demand after %v over the limit %v", s.DemandAfter, s.Limit)
	}
	if s.Pinned != 0 || s.PinnedDemand != 0 || s.PinsExceed || s.Reactivated != 0 {
		t.Errorf("no item is pinned or reactivated: %+v", s)
	}
	if s.Unobserved != 2000 || math.Abs(s.UnobservedDemand-s.DemandAfter) > 1e-9 {
		t.Errorf("%d unobserved items asking %v, want all 2,000 asking all of %v", s.Unobserved, s.UnobservedDemand, s.DemandAfter)
	}
	if s.Prior != (Prior{ChangeRate: DefaultPriorChangeRate, SalesRate: DefaultPriorSalesRate}) {
		t.Errorf("with nothing observed the prior is the defaults, got %+v", s.Prior)
	}
	var demand float64
	moved := 0
	for i, d := range ds {
		if d.Held || !strings.Contains(d.Reason, "not yet observed") {
			t.Fatalf("item %d: decision %+v, want a planned one naming the prior", i, d)
		}
		if d.Tier != items[i].Tier {
			moved++
		}
		demand += TierDemand(d.Tier, packing.Alone)
	}
	if moved == 0 || math.Abs(demand-s.DemandAfter) > 1e-9 {
		t.Errorf("%d items moved, their tiers ask %v, the summary %v", moved, demand, s.DemandAfter)
	}
}

func TestApplyBudgetPlansUnobservedItemsWithTheObservedMedian(t *testing.T) {
	// Sales observed over 30,000 s: 600, 6,000 and 60,000. The median, 720 sales/h, would overflow
	// the sales window at COLD_10M (120 a collection) but not at WARM_5M (60, and four deviations
	// make 91), so the unobserved item, weightless, is planned at WARM_5M for its sales alone.
	items := []State{observedState(tiers.Warm, 600), observedState(tiers.Warm, 6000), observedState(tiers.Warm, 60000),
		{Tier: tiers.Hot}, {Tier: tiers.Hot, Pinned: tiers.Hot}}
	scores := []float64{1, 1, 1, 0, 1}
	ds := []Decision{{Tier: tiers.Warm}, {Tier: tiers.Warm}, {Tier: tiers.Warm}, {Tier: tiers.Hot, Held: true},
		{Tier: tiers.Hot, Reason: "pinned by an operator"}}
	p := PriorOf(items)
	wantChange, _ := items[0].Observed.ChangeRate()
	if p.Observed != 3 || math.Abs(p.ChangeRate-wantChange) > 1e-15 || math.Abs(p.SalesRate-0.2) > 1e-12 {
		t.Fatalf("prior %+v, want 3 observed items' median: %v changes/s, 0.2 sales/s", p, wantChange)
	}
	s := ApplyBudget(items, scores, ds, limitOf(1, 60, 0), packing.Model{})
	if s.Prior != p || s.Unobserved != 1 || s.Pinned != 1 || s.PinsExceed {
		t.Fatalf("summary %+v", s)
	}
	if ds[3].Tier != tiers.Warm || !strings.Contains(ds[3].Reason, "720.00 sales/h (not yet observed") {
		t.Errorf("the unobserved item is planned at %s (%q); the prior's sales need WARM_5M", ds[3].Tier, ds[3].Reason)
	}
	if ds[4].Tier != tiers.Hot || ds[4].Reason != "pinned by an operator" {
		t.Errorf("the pinned item's decision changed: %+v", ds[4])
	}
	if want := packing.Alone / 60; math.Abs(s.PinnedDemand-want) > 1e-12 {
		t.Errorf("pinned demand %v, want %v", s.PinnedDemand, want)
	}
}
