package tierplan

import (
	"fmt"

	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/tiers"
)

// Cost is the item's collection cost for the optimiser: alone (its first collection, or too
// many listings to share a call), or packed at intervals short enough that few sales pile up.
func Cost(it State, m packing.Model) Item {
	pi := Item{Requests: packing.Alone}
	if it.SeenListings == nil {
		return pi
	}
	if c, ok := m.Packed(*it.SeenListings); ok {
		pi.Packed, pi.PackedUpTo = c, m.PackedUpTo(observedSalesRate(it))
	}
	return pi
}

// RequestsAtTier is what one collection costs at tier t (Requests for DORMANT, which is never
// collected on schedule: a reactivation's first collection may be alone).
func (it Item) RequestsAtTier(t tiers.Tier) float64 {
	iv, ok := t.Interval()
	if !ok {
		return it.Requests
	}
	return it.RequestsAt(iv.Seconds())
}

// observedSalesRate is the item's decayed sales per second (0 before an interval was observed).
func observedSalesRate(it State) float64 {
	if secs := it.Observed.ChangedSeconds + it.Observed.UnchangedSeconds; secs > 0 {
		return it.ObservedSales / secs
	}
	return 0
}

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
	// Requests is the mean cost of one collection at the planned tiers, and Packed how many
	// planned items share packed calls there (the others cost packing.Alone).
	Requests float64
	Packed   int
}

// ApplyBudget is the budget policy: it replaces the threshold decisions ds of plannable items
// by the optimiser's tiers within budget b, in place. Pinned, reactivated and DORMANT items keep
// their decision; so do items whose change rate is not known yet (they take the threshold
// decision until two collections have been observed), but their demand counts against the
// budget. scores are the items' popularity scores, the optimiser's weights.
func ApplyBudget(items []State, scores []float64, ds []Decision, b Budget, m packing.Model) *PlanSummary {
	var in []Item
	var idx []int
	var before []tiers.Tier
	for i, it := range items {
		d := ds[i]
		if d.Tier == tiers.Dormant && it.Tier == tiers.Dormant {
			continue
		}
		pi := Cost(it, m)
		pi.Weight, pi.ChangeRate = scores[i], priorChangeRate
		rate, known := it.Observed.ChangeRate()
		if known {
			pi.ChangeRate, pi.SalesRate = rate, observedSalesRate(it)
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
	plan := Solve(in, b)
	s := &PlanSummary{Items: len(in), Limit: plan.Limit, DemandAfter: plan.Demand, PinnedDemand: plan.PinnedDemand,
		PinsExceed: plan.PinsExceed, FreshnessAfter: plan.Freshness, SalesUnsafe: plan.SalesUnsafe}
	s.DemandBefore, s.FreshnessBefore = Predict(in, before)
	for j, t := range plan.Tiers {
		c := in[j].RequestsAtTier(t)
		s.Requests += c / float64(len(in))
		if c < packing.Alone {
			s.Packed++
		}
	}
	for j, i := range idx {
		if in[j].Pinned != "" {
			continue
		}
		ds[i] = Decision{Tier: plan.Tiers[j], Reason: fmt.Sprintf("budget plan: %.2f changes/h, %.2f sales/h, weight %s",
			in[j].ChangeRate*3600, in[j].SalesRate*3600, formatWeight(scores[i]))}
	}
	return s
}

func formatWeight(v float64) string { return fmt.Sprintf("%.3g", v) }
