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

// PlanSummary is what the budget policy planned, for `collector plan`, status and metrics.
type PlanSummary struct {
	Items        int     // items planned (not DORMANT)
	Limit        float64 // requests/s the plan may use (budget.PlanLimit)
	DemandBefore float64 // requests/s of the tiers as they were
	DemandAfter  float64 // requests/s of the planned tiers
	// MinDemand is the least any plan could ask: pinned and reactivated items where they are,
	// every other item at its cheapest tier. DemandAfter exceeds Limit only when this does.
	MinDemand float64
	// Pinned items are the ones an operator fixed (collector items pin); PinnedDemand is their
	// requests/s and PinsExceed says they alone ask for more than Limit.
	Pinned       int
	PinnedDemand float64
	PinsExceed   bool
	// Reactivated items were lifted by an interest event and keep that tier in this plan.
	Reactivated       int
	ReactivatedDemand float64
	// Unobserved items have fewer than two collections: they are planned, and moved, with
	// Prior's rates. UnobservedDemand is their planned requests/s.
	Unobserved       int
	UnobservedDemand float64
	Prior            Prior
	FreshnessBefore  float64 // predicted popularity-weighted freshness of the tiers as they were
	FreshnessAfter   float64 // … and of the planned tiers
	SalesUnsafe      int     // planned items whose interval may overflow the 100-sale window (budget too small)
	// Requests is the mean cost of one collection at the planned tiers, and Packed how many
	// planned items share packed calls there (the others cost packing.Alone).
	Requests float64
	Packed   int
}

// ApplyBudget is the budget policy: it replaces the threshold decisions ds of plannable items
// by the optimiser's tiers within limit requests per second (budget.PlanLimit), in place. Pinned, reactivated and DORMANT items keep
// their decision. Items whose change rate is not known yet are planned with the catalog's
// prior (PriorOf) rather than held where they are, so a mass import cannot hold the plan over
// the budget; each plan re-estimates them as their collections are observed. scores are the
// items' popularity scores, the optimiser's weights.
func ApplyBudget(items []State, scores []float64, ds []Decision, limit float64, m packing.Model) *PlanSummary {
	s := &PlanSummary{Prior: PriorOf(items)}
	var in []Item
	var idx []int
	var before []tiers.Tier
	var unobserved []bool
	for i, it := range items {
		d := ds[i]
		if d.Tier == tiers.Dormant {
			continue // DORMANT or going there: no demand
		}
		pi, known := planned(it, scores[i], s.Prior, m)
		switch {
		case it.Pinned != "":
			pi.Pinned = d.Tier
			s.Pinned++
			s.PinnedDemand += pi.RequestsAtTier(d.Tier) / seconds(d.Tier)
		case d.DueNow:
			pi.Pinned = d.Tier
			s.Reactivated++
			s.ReactivatedDemand += pi.RequestsAtTier(d.Tier) / seconds(d.Tier)
		}
		in = append(in, pi)
		idx = append(idx, i)
		before = append(before, it.Tier)
		unobserved = append(unobserved, !known && pi.Pinned == "")
	}
	plan := Solve(in, limit)
	s.Items, s.Limit, s.DemandAfter, s.MinDemand = len(in), plan.Limit, plan.Demand, plan.MinDemand
	s.PinsExceed = s.PinnedDemand > plan.Limit
	s.FreshnessAfter, s.SalesUnsafe = plan.Freshness, plan.SalesUnsafe
	s.DemandBefore, s.FreshnessBefore = Predict(in, before)
	for j, t := range plan.Tiers {
		c := in[j].RequestsAtTier(t)
		s.Requests += c / float64(len(in))
		if c < packing.Alone {
			s.Packed++
		}
		if unobserved[j] {
			s.Unobserved++
			s.UnobservedDemand += c / seconds(t)
		}
	}
	for j, i := range idx {
		if in[j].Pinned != "" {
			continue
		}
		note := ""
		if unobserved[j] {
			note = " (not yet observed: the prior)"
		}
		ds[i] = Decision{Tier: plan.Tiers[j], Reason: fmt.Sprintf("budget plan: %.2f changes/h, %.2f sales/h%s, weight %s",
			in[j].ChangeRate*3600, in[j].SalesRate*3600, note, formatWeight(scores[i]))}
	}
	return s
}

// planned is the item as the optimiser sees it: its cost, its score as weight, and its observed
// rates, or prior's when they are not known yet (known false).
func planned(it State, score float64, prior Prior, m packing.Model) (pi Item, known bool) {
	pi = Cost(it, m)
	pi.Weight = score
	rate, known := it.Observed.ChangeRate()
	if known {
		pi.ChangeRate, pi.SalesRate = rate, observedSalesRate(it)
	} else {
		pi.ChangeRate, pi.SalesRate = prior.ChangeRate, prior.SalesRate
	}
	return pi, known
}

// Forecast is what the decided tiers ds of items predict per scheduled tier (PredictByTier),
// under either policy: the items, weights, rates and costs the budget policy plans with (prior
// is PriorOf(items), or the PlanSummary's when ApplyBudget made ds), so under it the tiers'
// weighted freshness is PlanSummary.FreshnessAfter. DORMANT items (and items going there) are
// left out, as the plan leaves them out.
func Forecast(items []State, scores []float64, ds []Decision, prior Prior, m packing.Model) []TierForecast {
	in := make([]Item, 0, len(items))
	assigned := make([]tiers.Tier, 0, len(items))
	for i, it := range items {
		if ds[i].Tier == tiers.Dormant {
			continue
		}
		pi, _ := planned(it, scores[i], prior, m)
		in = append(in, pi)
		assigned = append(assigned, ds[i].Tier)
	}
	return PredictByTier(in, assigned)
}

// seconds is a scheduled tier's interval in seconds.
func seconds(t tiers.Tier) float64 {
	iv, _ := t.Interval()
	return iv.Seconds()
}

func formatWeight(v float64) string { return fmt.Sprintf("%.3g", v) }
