// Package tierplan decides each tracked item's collection tier. It holds the tier policy (a
// score's threshold tier, dormancy, reactivation, the demotion hold, and the budget policy that
// replaces threshold tiers by the optimiser's), the optimiser itself (Solve: the tiers whose
// weighted freshness is highest while their request demand stays within the provider budget)
// and the change-rate estimator it plans with. It is pure, like internal/tiers: no clock, no
// database, no HTTP, so it can be property-tested and replayed over simulated days in seconds.
// internal/catalog reads its inputs from tracked_items and writes its decisions back.
package tierplan

import (
	"math"
	"slices"
	"sort"

	"github.com/duecollector/duecollector/internal/tiers"
)

// SalesWindow is how many sales /df/auction-sold returns; more between two collections are lost.
const SalesWindow = 100

// Choices are the tiers the planner picks from, fastest first. DORMANT is never planned.
var Choices = [...]tiers.Tier{tiers.Hot, tiers.Active, tiers.Warm, tiers.Cold}

var choiceSeconds, perSecond = func() (s, f [len(Choices)]float64) {
	for i, t := range Choices {
		iv, _ := t.Interval()
		s[i] = iv.Seconds()
		f[i] = 1 / s[i]
	}
	return s, f
}()

// Item is one plannable (not DORMANT) item.
type Item struct {
	// Weight is how much users care about the item (the popularity score); ≤ 0 counts as 0.
	Weight float64
	// ChangeRate is the estimated listing changes per second (λ).
	ChangeRate float64
	// SalesRate is the observed sales per second.
	SalesRate float64
	// Requests is the provider calls one collection costs when the item has its own calls
	// (2: listings and sales).
	Requests float64
	// Packed, when above 0, is what one collection costs when the item shares packed calls
	// (packing.Model), which it does at intervals up to PackedUpTo seconds; at longer ones
	// too many sales pile up between collections and it costs Requests.
	Packed     float64
	PackedUpTo float64
	// Pinned, when set, is the tier an operator fixed; the plan keeps it and counts its demand.
	Pinned tiers.Tier
}

// RequestsAt is what one collection costs at an interval of the given seconds.
func (it Item) RequestsAt(interval float64) float64 {
	if it.Packed > 0 && interval <= it.PackedUpTo {
		return it.Packed
	}
	return it.Requests
}

// TierDemand is the steady request rate of tier t when collecting each of its items once costs
// requests in all (0 for DORMANT).
func TierDemand(t tiers.Tier, requests float64) float64 {
	iv, ok := t.Interval()
	if !ok {
		return 0
	}
	return requests / iv.Seconds()
}

// Freshness is the expected fraction of time a copy refreshed every interval seconds is current
// when the source changes as a Poisson process at rate λ per second: (1 − e^(−λI)) / (λI)
// (Cho & Garcia-Molina, "Effective page refresh policies", TODS 2003).
func Freshness(lambda, interval float64) float64 {
	x := lambda * interval
	if !(x > 1e-12) {
		return 1
	}
	return -math.Expm1(-x) / x
}

// SalesSafe reports whether collecting every interval seconds keeps the sales between two
// collections inside the 100-row window with a margin (four standard deviations of a Poisson
// count), so no sale is lost in practice.
func SalesSafe(salesRate, interval float64) bool {
	m := salesRate * interval
	return m+4*math.Sqrt(m) <= SalesWindow
}

// Plan is the planner's answer.
type Plan struct {
	// Tiers holds one tier per input item, in input order.
	Tiers []tiers.Tier
	// Demand is the plan's steady request rate (requests per second), pins included.
	Demand float64
	// PinnedDemand is the pinned items' share of Demand.
	PinnedDemand float64
	// Limit is what the plan may use, in requests per second.
	Limit float64
	// PinsExceed is true when pinned items alone ask for more than Limit.
	PinsExceed bool
	// MinDemand is the least demand any plan could have: pinned items at their tiers, every
	// other item at its cheapest. Demand exceeds Limit only when this does.
	MinDemand float64
	// Freshness is the predicted weighted freshness (Σ w·F / Σ w; 1 when no item has weight).
	Freshness float64
	// SalesUnsafe counts items whose planned interval may overflow the sales window because
	// the budget could not afford a safe one.
	SalesUnsafe int
}

// Predict is the demand and weighted freshness of a given tier assignment (DORMANT costs nothing
// and counts as fresh).
func Predict(items []Item, assigned []tiers.Tier) (demand, freshness float64) {
	var wSum, fSum float64
	for i, it := range items {
		iv, ok := assigned[i].Interval()
		w := math.Max(it.Weight, 0)
		wSum += w
		if !ok {
			fSum += w
			continue
		}
		demand += it.RequestsAt(iv.Seconds()) / iv.Seconds()
		fSum += w * Freshness(it.ChangeRate, iv.Seconds())
	}
	if wSum == 0 {
		return demand, 1
	}
	return demand, fSum / wSum
}

// TierForecast is one tier's part of a prediction (PredictByTier).
type TierForecast struct {
	Tier   tiers.Tier
	Items  int
	Demand float64 // requests per second
	// Weight is the tier's items' summed weight (≤ 0 counts as 0), what its Freshness weighs in
	// the whole prediction.
	Weight float64
	// Freshness is the tier's popularity-weighted freshness, Σ w·F / Σ w; the plain mean when
	// none of its items has weight (a tier of new imports), which a weighted total ignores.
	Freshness float64
}

// PredictByTier is Predict split by tier, in tier order, tiers without items left out: the
// demands add up to Predict's, and the freshnesses weighted by Weight to its freshness (for
// every assignment to tiers.All()).
func PredictByTier(items []Item, assigned []tiers.Tier) []TierForecast {
	all := tiers.All()
	sums := make([]struct {
		TierForecast
		plain float64 // Σ F, for the plain mean
	}, len(all))
	for i, it := range items {
		r := slices.Index(all, assigned[i])
		if r < 0 {
			continue // not a tier: Predict counts it fresh and free, like DORMANT
		}
		s := &sums[r]
		s.Items++
		f := 1.0
		if iv, ok := assigned[i].Interval(); ok {
			s.Demand += it.RequestsAt(iv.Seconds()) / iv.Seconds()
			f = Freshness(it.ChangeRate, iv.Seconds())
		}
		w := math.Max(it.Weight, 0)
		s.Weight += w
		s.Freshness += w * f
		s.plain += f
	}
	var out []TierForecast
	for r, s := range sums {
		if s.Items == 0 {
			continue
		}
		tf := s.TierForecast
		tf.Tier = all[r]
		if tf.Weight > 0 {
			tf.Freshness /= tf.Weight
		} else {
			tf.Freshness = s.plain / float64(s.Items)
		}
		out = append(out, tf)
	}
	return out
}

// Overall is what the tiers fs predict together: their demand, and their freshness weighted by
// Weight (Predict's, from PredictByTier's tiers), or by items when no tier has weight.
func Overall(fs []TierForecast) (demand, freshness float64) {
	var w, wf, n, nf float64
	for _, f := range fs {
		demand += f.Demand
		w, wf = w+f.Weight, wf+f.Weight*f.Freshness
		n, nf = n+float64(f.Items), nf+float64(f.Items)*f.Freshness
	}
	switch {
	case w > 0:
		return demand, wf / w
	case n > 0:
		return demand, nf / n
	}
	return demand, 1
}

// Solve assigns tiers. Pinned items keep their tier. Every other item starts at its cheapest
// tier, and gets as its floor the slowest tier that keeps its sales inside the window, heaviest
// items first while the budget allows; the rest of the budget goes where it buys the most weighted freshness, by a Lagrange
// multiplier found by bisection over each item's four choices, and the slack that bisection
// leaves is filled greedily by the best gain per request.
//
// limit is the steady demand the plan may use, in requests per second (budget.PlanLimit).
// Phase-pinned slots spread each tier evenly over its interval, so a steady demand within it
// also stays within each second's and each minute's budget.
func Solve(items []Item, limit float64) Plan {
	p := Plan{Tiers: make([]tiers.Tier, len(items)), Limit: limit}
	n := len(items)
	// floor[i] is the slowest choice index the item may take; -1 marks pinned items.
	floor := make([]int8, n)
	var free []int32
	var used float64
	for i, it := range items {
		if it.Pinned != "" {
			floor[i] = -1
			p.Tiers[i] = it.Pinned
			if iv, ok := it.Pinned.Interval(); ok {
				p.PinnedDemand += it.RequestsAt(iv.Seconds()) / iv.Seconds()
			}
			continue
		}
		floor[i] = int8(cheapest(it))
		used += cost(it, int(floor[i]))
		free = append(free, int32(i))
	}
	used += p.PinnedDemand
	p.PinsExceed = p.PinnedDemand > limit
	p.MinDemand = used

	// Sales floors, heaviest items first (then busiest sellers), first fit.
	var needFloor []int32
	for _, i := range free {
		if safeChoice(items[i]) < int(floor[i]) {
			needFloor = append(needFloor, i)
		}
	}
	sort.Slice(needFloor, func(a, c int) bool {
		x, y := items[needFloor[a]], items[needFloor[c]]
		if x.Weight != y.Weight {
			return x.Weight > y.Weight
		}
		return x.SalesRate > y.SalesRate
	})
	for _, i := range needFloor {
		it := items[i]
		s := safeChoice(it)
		if s < 0 {
			s = 0 // even HOT overflows: collect as often as allowed
		}
		extra := cost(it, s) - cost(it, int(floor[i]))
		if used+extra <= limit {
			used += extra
			floor[i] = int8(s)
		}
	}

	// Lagrangian: each item takes argmax_k w·F_k − μ·c_k over choices no slower than its floor.
	// Gains and costs are computed once; each bisection step is then multiply-adds only. A
	// faster tier may cost less (packed, where the slower one is not), so nothing here assumes
	// costs grow with the rate.
	gains := make([][len(Choices)]float64, len(free))
	costs := make([][len(Choices)]float64, len(free))
	for j, i := range free {
		for k := range Choices {
			gains[j][k], costs[j][k] = gainAt(items[i], k), cost(items[i], k)
		}
	}
	remaining := limit - used
	choice := make([]int8, n)
	pick := func(mu float64, out []int8) (extra float64) {
		for j, i := range free {
			f := int(floor[i])
			best, bestV := f, gains[j][f]-mu*costs[j][f]
			for k := f - 1; k >= 0; k-- {
				if v := gains[j][k] - mu*costs[j][k]; v > bestV {
					best, bestV = k, v
				}
			}
			out[i] = int8(best)
			extra += costs[j][best] - costs[j][f]
		}
		return extra
	}
	if remaining <= 0 {
		for _, i := range free {
			choice[i] = floor[i]
		}
	} else {
		trial := make([]int8, n)
		if pick(0, choice) > remaining {
			lo, hi := 0.0, 1.0
			for pick(hi, trial) > remaining && hi < 1e30 {
				lo, hi = hi, hi*4
			}
			copy(choice, trial)
			for iter := 0; iter < 50 && hi-lo > 1e-9*hi; iter++ {
				mid := (lo + hi) / 2
				if pick(mid, trial) <= remaining {
					hi = mid
					copy(choice, trial)
				} else {
					lo = mid
				}
			}
		}
		fillSlack(items, free, gains, floor, choice, remaining)
	}

	for _, i := range free {
		p.Tiers[i] = Choices[choice[i]]
		if !SalesSafe(items[i].SalesRate, choiceSeconds[choice[i]]) {
			p.SalesUnsafe++
		}
	}
	p.Demand, p.Freshness = Predict(items, p.Tiers)
	return p
}

// fillSlack spends what bisection left on single-step upgrades with the best gain per request.
func fillSlack(items []Item, free []int32, gains [][len(Choices)]float64, floor, choice []int8, remaining float64) {
	left := remaining
	type up struct {
		i     int32
		ratio float64
		extra float64
	}
	var ups []up
	for j, i := range free {
		it := items[i]
		k := int(choice[i])
		left -= cost(it, k) - cost(it, int(floor[i]))
		if k == 0 {
			continue
		}
		extra := cost(it, k-1) - cost(it, k)
		gain := gains[j][k-1] - gains[j][k]
		switch {
		case gain > 0 && extra <= 0: // fresher and no dearer (packed at the faster tier)
			choice[i]--
			left -= extra
		case gain > 0:
			ups = append(ups, up{i, gain / extra, extra})
		}
	}
	sort.Slice(ups, func(a, b int) bool { return ups[a].ratio > ups[b].ratio })
	for _, u := range ups {
		if u.extra <= left {
			choice[u.i]--
			left -= u.extra
		}
	}
}

// cost is the item's steady requests per second at choice k.
func cost(it Item, k int) float64 { return it.RequestsAt(choiceSeconds[k]) * perSecond[k] }

func gainAt(it Item, k int) float64 {
	return math.Max(it.Weight, 0) * Freshness(it.ChangeRate, choiceSeconds[k])
}

// cheapest is the choice index with the fewest requests per second, the slowest among equals:
// COLD, unless the item shares packed calls only at a faster tier.
func cheapest(it Item) int {
	best := len(Choices) - 1
	for k := best - 1; k >= 0; k-- {
		if cost(it, k) < cost(it, best) {
			best = k
		}
	}
	return best
}

// safeChoice is the slowest choice index whose interval keeps the item's sales in the window,
// or -1 when none does.
func safeChoice(it Item) int {
	for k := len(Choices) - 1; k >= 0; k-- {
		if SalesSafe(it.SalesRate, choiceSeconds[k]) {
			return k
		}
	}
	return -1
}
