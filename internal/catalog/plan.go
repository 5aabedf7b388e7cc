package catalog

import (
	"fmt"

	"github.com/duecollector/duecollector/internal/budgetplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

// RequestsPerCollection is what collecting one item costs: /df/auction and /df/auction-sold.
const RequestsPerCollection = 2

// priorChangeRate stands in for an item not observed yet when predicting freshness: a few
// changes an hour, the typical item.
const priorChangeRate = 3.0 / 3600

// PlanSummary is what the budget policy planned, for `collector plan`, status and metrics.
type PlanSummary struct {
	Items           int     // items planned (not DORMANT)
	Limit           float64 // requests/s the plan may use (budget less headroom)
	DemandBefore    float64 // requests/s of the tiers as they were
	DemandAfter     float64 // requests/s of the planned tiers
	PinnedDemand    float64 // requests/s of pinned items (and items kept as decided: reactivated, not yet observed)
	PinsExceed      bool    // pinned items alone ask for more than Limit
	FreshnessBefore float64 // predicted popularity-weighted freshness of the tiers as they were
	FreshnessAfter  float64 // … and of the planned tiers
	SalesUnsafe     int     // planned items whose interval may overflow the 100-sale window (budget too small)
}

// planBudget replaces the threshold decisions of plannable items by the budget planner's.
// Pinned, reactivated and DORMANT items keep their decision; so do items whose change rate is
// not known yet (they take the threshold decision until two collections have been observed),
// but their demand counts against the budget.
func planBudget(items []itemState, scores []float64, ds []decision, b budgetplan.Budget) *PlanSummary {
	var in []budgetplan.Item
	var idx []int
	var before []tiers.Tier
	for i, it := range items {
		d := ds[i]
		if d.Tier == tiers.Dormant && it.Tier == tiers.Dormant {
			continue
		}
		pi := budgetplan.Item{Weight: scores[i], Requests: RequestsPerCollection, ChangeRate: priorChangeRate}
		rate, known := it.Observed.ChangeRate()
		if known {
			pi.ChangeRate = rate
			if secs := it.Observed.ChangedSeconds + it.Observed.UnchangedSeconds; secs > 0 {
				pi.SalesRate = it.ObservedSales / secs
			}
		}
		switch {
		case d.Tier == tiers.Dormant:
			continue // going DORMANT: no demand
		case it.Pinned != "", d.DueNow, !known:
			pi.Pinned = d.Tier
		}
		in = append(in, pi)
		idx = append(idx, i)
		before = append(before, it.Tier)
	}
	plan := budgetplan.Solve(in, b)
	s := &PlanSummary{Items: len(in), Limit: plan.Limit, DemandAfter: plan.Demand, PinnedDemand: plan.PinnedDemand,
		PinsExceed: plan.PinsExceed, FreshnessAfter: plan.Freshness, SalesUnsafe: plan.SalesUnsafe}
	s.DemandBefore, s.FreshnessBefore = budgetplan.Predict(in, before)
	for j, i := range idx {
		if in[j].Pinned != "" {
			continue
		}
		ds[i] = decision{Tier: plan.Tiers[j], Reason: fmt.Sprintf("budget plan: %.2f changes/h, %.2f sales/h, weight %s",
			in[j].ChangeRate*3600, in[j].SalesRate*3600, formatWeight(scores[i]))}
	}
	return s
}

func formatWeight(v float64) string { return fmt.Sprintf("%.3g", v) }
