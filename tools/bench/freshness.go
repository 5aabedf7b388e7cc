package main

import (
	"container/heap"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"time"

	budgetpkg "github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/score"
	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

// freshSize is the freshness section: the realistic market's catalog size and the simulated
// horizon of the time-compressed replay (its first half is warm-up: learning, not measured).
type freshSize struct {
	items int
	hours int
	// The real daemon run: items and how long it runs (0 = skip).
	runItems int
	runFor   time.Duration
}

// Contenders of the freshness section.
const (
	cSeed       = "seed"
	cThresholds = "thresholds"
	cBudget     = "budget"
	cOracle     = "oracle"
	// cBudgetAlone is the budget policy counting 2 requests a collection although collections
	// share packed calls: what it did before its plan knew packing.
	cBudgetAlone = "budget, planned at 2 req/collection"
)

// replanEvery is how often the replay's policies recalculate (the daemon's catalog.recalc_interval).
const replanEvery = 3 * 60

// freshResult is one contender's replay, measured over the second half.
type freshResult struct {
	rep               score.FreshnessReport
	requests          float64
	collections       int64
	overBudgetSeconds int
	hotLagP99         float64 // seconds
	coldLagP99        float64
	collectorGaps     int64
	exactPages        int64   // collector gaps that were pages of exactly 100 new sales: nothing lost, which a page cannot show
	coverable         float64 // sales coverage over the items whose sales HOT can keep in the window
	truthDemand       float64 // requests/s of its tiers at the end
}

// benchFreshness replays each contender over the same simulated market, same budget (about half
// what the thresholds policy asks for) and same horizon, through simulated time: the collector
// side is the same estimator (tierplan.Observations) and optimizer (tierplan.Solve) the
// daemon uses, driven by the simulator's model (Events) and measured by its own ground truth
// (Observe, Freshness).
func benchFreshness(ctx context.Context, _ *env, sz sizes, rep *report) error {
	fs := sz.fresh
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	truthSim := neoplesim.New(neoplesim.Options{Items: fs.items, Seed: 16, Market: market.Realistic})
	cat := truthSim.Catalog()
	truths := truthSim.Market().Truths()
	ids := make([]string, len(cat))
	for i, it := range cat {
		ids[i] = it.ItemID
	}
	cfg := config.Default()
	pack := defaultPacking(cfg)
	policy := catalog.PolicyFromConfig(cfg.Catalog, budgetpkg.ConfiguredPlanLimit(cfg), pack)

	// The budget: half the thresholds policy's demand on the true signals, each collection
	// costing what packing makes it cost.
	var thrDemand float64
	for _, id := range ids {
		tr := truths[id]
		t, _ := tiers.ForScore(replayScore(tr.SalesPerHour, tr.Weight, policy), policy.Thresholds)
		iv, _ := t.Interval()
		c := planCost(tierplan.Item{SalesRate: tr.SalesPerHour / 3600}, tr.Listings, replayRun{pack: pack})
		thrDemand += tierplan.TierDemand(t, c.RequestsAt(iv.Seconds()))
	}
	budget := math.Round(thrDemand/2*10) / 10
	rep.note("freshness: %d items, thresholds demand %.1f req/s, budget %.1f req/s (headroom %.0f%%), %d h simulated (%d h warm-up); collections share packed calls as collect.pack_* defaults make them",
		len(ids), thrDemand, budget, cfg.Daemon.Budget.Headroom*100, fs.hours, fs.hours/2)

	res := map[string]freshResult{}
	for _, c := range []string{cOracle, cSeed, cThresholds, cBudget, cBudgetAlone} {
		if err := ctx.Err(); err != nil {
			return err
		}
		t0 := time.Now()
		contender, planAlone := c, false
		if c == cBudgetAlone {
			contender, planAlone = cBudget, true
		}
		r := replay(contender, ids, truths, policy, replayRun{seed: 16, start: start, seconds: int64(fs.hours) * 3600, warmup: int64(fs.hours) * 1800,
			window: cfg.Catalog.EstimateWindow, budget: budget, headroom: cfg.Daemon.Budget.Headroom, replanSeconds: replanEvery,
			pack: pack, planAlone: planAlone})
		res[c] = r
		fmt.Fprintf(os.Stderr, "  replay %-10s freshness %.3f, %.0f requests (%s)\n", c, r.rep.Freshness, r.requests, time.Since(t0).Round(time.Second))
	}
	o := res[cOracle]
	ratio := func(a, b float64) string {
		if b == 0 {
			return "n/a"
		}
		return fmt.Sprintf("%.2f×", a/b)
	}
	how := fmt.Sprintf("time-compressed replay over the realistic market (seed 16, %d items), budget %.1f req/s ≈ half the thresholds policy's demand, %d h simulated, measured over the last %d h by the simulator's ground truth (GET /_sim/freshness semantics); collections limited to the budget each second, HOT claimed first; each second is one pass (daemon.pack_wait 1s) in which small items share packed calls of up to 10 ids as the dispatcher groups them, the others cost 2; the planners divide the budget by how much dearer the last interval's collections were than planned, as the daemon does",
		len(ids), budget, fs.hours, fs.hours/2)
	for _, c := range []string{cSeed, cThresholds, cBudget, cBudgetAlone, cOracle} {
		r := res[c]
		rep.add("Weighted freshness, "+c, fmt.Sprintf("%.3f (%s oracle)", r.rep.Freshness, ratio(r.rep.Freshness, o.rep.Freshness)), how)
		rep.add("Weighted mean age, "+c, fmt.Sprintf("%.0f s (%s oracle)", r.rep.MeanAge, ratio(r.rep.MeanAge, o.rep.MeanAge)), "same replay; time since the first change the copy missed")
		rep.add("Sales coverage (all / coverable items), "+c, fmt.Sprintf("%.2f%% / %.2f%%", 100*r.rep.SalesCoverage, 100*r.coverable),
			"sales seen ÷ (seen + lost); coverable = items whose sale rate HOT can keep inside the 100-row window")
		rep.add("Lost-sale gaps: simulator / collector (pages of exactly 100 new), "+c, fmt.Sprintf("%d / %d (%d)", r.rep.Gaps, r.collectorGaps, r.exactPages),
			"fetches after which sales had left the window unseen, vs the collector's rule (a full page, all newer than the last stored sale or, with none stored, than the last collection); a page of exactly 100 new sales lost nothing but cannot be told from one that did, so the collector's count is the simulator's plus those")
		rep.add("Requests used, seconds over budget, "+c, fmt.Sprintf("%.0f (%s oracle, %.0f%% of the budget), %d s", r.requests, ratio(r.requests, o.requests),
			100*r.requests/(budget*float64(fs.hours)*1800), r.overBudgetSeconds), "requests in the measured half")
		rep.add("HOT / COLD lag p99, "+c, fmt.Sprintf("%.0f / %.0f s", r.hotLagP99, r.coldLagP99), "due → collection, simulated seconds; items still waiting at the end count with their wait so far")
	}
	// The ceiling of any tier plan in this market: every item at the fastest tier, no budget.
	hot, _ := tiers.Hot.Interval()
	var fresh, weight float64
	for _, id := range ids {
		tr := truths[id]
		fresh += tr.Weight * tierplan.Freshness(tr.ChangesPerHour/3600, hot.Seconds())
		weight += tr.Weight
	}
	ceiling := fresh / weight
	rep.add("Weighted freshness, every item HOT_1M (no budget)", fmt.Sprintf("%.3f (%s oracle, %s thresholds)", ceiling, ratio(ceiling, o.rep.Freshness), ratio(ceiling, res[cThresholds].rep.Freshness)),
		"the same market's true rates and weights through the freshness formula (1 − e^(−λI)) / (λI) at I = 60 s: the most any plan over the design card's tiers can reach at any budget")
	solve, err := goBench(ctx, "./internal/tierplan/", "^BenchmarkSolveMillionItems$", "3x")
	if err != nil {
		return err
	}
	rep.add("Tier plan for 1M items (tierplan.Solve)", fmt.Sprintf("%.0f ms", solve["BenchmarkSolveMillionItems"]["ns/op"]/1e6),
		"BenchmarkSolveMillionItems: the optimizer alone (bisection on the Lagrange multiplier, then the fill) over 1M random items with packed costs and sales limits, 500 req/s; mean of 3 runs")
	if fs.runFor > 0 {
		if err := freshnessRealRun(ctx, fs, policy, cfg, rep); err != nil {
			return err
		}
	}
	b, th := res[cBudget], res[cThresholds]
	missed := int64(0)
	for _, r := range res {
		missed += r.rep.Gaps - (r.collectorGaps - r.exactPages)
	}
	rep.note("freshness targets: budget/oracle %.2f (target ≥ 0.9), budget/thresholds %.2f (target ≥ 1.3; every item HOT_1M with no budget would reach %.2f), budget coverage on coverable items %.2f%% (target ≥ 99.5%%), gaps sim/collector %d/%d (target equal); over every contender, simulator gaps minus the collector's (less its exactly-100 pages): %d",
		b.rep.Freshness/o.rep.Freshness, b.rep.Freshness/th.rep.Freshness, ceiling/th.rep.Freshness, 100*b.coverable, b.rep.Gaps, b.collectorGaps, missed)
	return nil
}

// replayScore is the popularity score the catalog would compute in steady state: sales per hour,
// and views at weight per hour decayed with the interest half-life (Σ ≈ rate × half-life / ln 2).
// Gold volume and churn are left out.
func replayScore(salesPerHour, weight float64, p catalog.Policy) float64 {
	interest := weight * p.Weights.View * p.InterestHalfLife.Hours() / math.Ln2
	return catalog.Score(catalog.Signals{Sales: int64(math.Round(salesPerHour * p.Window.Hours())), Interest: interest}, p.Weights, p.Window)
}

type replayItem struct {
	id        string
	tier      tiers.Tier
	due, last int64 // unix seconds; last 0 = never collected
	obsAt     int64
	obs       tierplan.Observations
	listings  int     // seen at the last collection; -1 before the first
	planned   float64 // what the last plan counted one collection as costing (0: not planned)
	sales     float64 // decayed new sales over obs's seconds
	idx       int     // heap index
}

// dueHeap orders one tier's items by due time.
type dueHeap []*replayItem

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].due < h[j].due }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i]; h[i].idx = i; h[j].idx = j }
func (h *dueHeap) Push(x any)        { it := x.(*replayItem); it.idx = len(*h); *h = append(*h, it) }
func (h *dueHeap) Pop() any          { old := *h; it := old[len(old)-1]; *h = old[:len(old)-1]; return it }
func (h dueHeap) peek() *replayItem  { return h[0] }
func tierIndex(t tiers.Tier) int     { return t.Rank() }
func intervalOf(t tiers.Tier) int64  { iv, _ := t.Interval(); return int64(iv / time.Second) }
func slot(id string, t tiers.Tier, after int64) int64 {
	return tiers.NextSlot(id, time.Duration(intervalOf(t))*time.Second, time.Unix(after, 0)).Unix()
}

// replayRun is one replay's setting.
type replayRun struct {
	seed          int64
	start         time.Time
	seconds       int64        // simulated length
	warmup        int64        // seconds before measuring starts
	fixed         []tiers.Tier // contender cFixed: these tiers throughout, every item due at start
	window        time.Duration
	budget        float64
	headroom      float64
	replanSeconds int64
	// pack is how collections share calls (zero: never, 2 requests each); planAlone makes
	// the planner count 2 requests a collection anyway, as it did before it knew packing.
	pack      packing.Model
	planAlone bool
}

// planLimit is what a plan receives from a budget of perSecond (and 60 × that a minute) less
// headroom (daemon.budget.headroom), as the daemon computes it.
func planLimit(perSecond, headroom float64) float64 {
	return budgetpkg.PlanLimit(config.WorkloadLimits{Rate: perSecond, PerMinute: int(math.Round(perSecond * 60))}, headroom, 1)
}

// cFixed keeps given tiers (the setting of the real daemon run it predicts).
const cFixed = "fixed"

func replay(contender string, ids []string, truths map[string]market.Truth, p catalog.Policy, run replayRun) freshResult {
	start, budget, window := run.start, run.budget, run.window
	now := start.Unix()
	sim := neoplesim.New(neoplesim.Options{Items: len(ids), Seed: run.seed, Market: market.Realistic,
		Now: func() time.Time { return time.Unix(now, 0) }})
	limit := planLimit(budget, run.headroom)
	items := make([]*replayItem, len(ids))
	heaps := make([]dueHeap, len(tiers.Scheduled())) // one a scheduled tier, in rank order
	for i, id := range ids {
		it := &replayItem{id: id, tier: tiers.Warm, listings: -1}
		it.due = start.Unix() + int64(tiers.Phase(id, 300*time.Second)/time.Second)
		if run.fixed != nil {
			// As the real run starts: every item due, its size known from an earlier collection.
			it.tier, it.due, it.listings = run.fixed[i], start.Unix(), truths[id].Listings
		}
		items[i] = it
		heap.Push(&heaps[tierIndex(it.tier)], it)
	}
	costRatio, spent, planned := 1.0, 0.0, 0.0
	move := func(it *replayItem, to tiers.Tier) {
		if to == it.tier {
			return
		}
		heap.Remove(&heaps[tierIndex(it.tier)], it.idx)
		next := slot(it.id, to, now)
		if tiers.IsPromotion(it.tier, to) {
			next = min(next, it.due)
		}
		it.tier, it.due = to, next
		heap.Push(&heaps[tierIndex(to)], it)
	}
	plan := func() {
		switch contender {
		case cSeed, cFixed:
			return
		case cThresholds:
			for _, it := range items {
				t, _ := tiers.ForScore(replayScore(observedSales(it), truths[it.id].Weight, p), p.Thresholds)
				move(it, t)
			}
			return
		}
		in := make([]tierplan.Item, len(items))
		for i, it := range items {
			tr := truths[it.id]
			if contender == cOracle {
				// True rates and weights; an item's size is known, as to any collector, from its
				// first collection on (the first is alone).
				in[i] = planCost(tierplan.Item{Weight: tr.Weight, ChangeRate: tr.ChangesPerHour / 3600, SalesRate: tr.SalesPerHour / 3600},
					it.listings, run)
				continue
			}
			rate, ok := it.obs.ChangeRate()
			if !ok {
				in[i] = planCost(tierplan.Item{Pinned: it.tier}, it.listings, run)
				continue
			}
			in[i] = planCost(tierplan.Item{Weight: replayScore(observedSales(it), tr.Weight, p), ChangeRate: rate,
				SalesRate: observedSales(it) / 3600}, it.listings, run)
		}
		// As the daemon does: plan within the budget divided by how much more the last
		// interval's collections cost than the plan counted (packed calls fill less than its
		// model says).
		if planned > 0 {
			costRatio = 0.7*costRatio + 0.3*min(max(spent/planned, 1), 10)
		}
		spent, planned = 0, 0
		pl := tierplan.Solve(in, limit/costRatio)
		for i, it := range items {
			move(it, pl.Tiers[i])
			iv, _ := pl.Tiers[i].Interval()
			it.planned = in[i].RequestsAt(iv.Seconds())
		}
	}

	end := start.Unix() + run.seconds
	measureFrom := start.Unix() + run.warmup
	// The oracle knows the true sales rates, so its dispatcher judges packing by them too, as
	// its plan did; the others judge by what they observed.
	var oracleSales func(*replayItem) float64
	if contender == cOracle {
		oracleSales = func(it *replayItem) float64 { return truths[it.id].SalesPerHour }
	}
	var capacity float64
	var res freshResult
	var hotLags, coldLags []float64
	measuring := false
	plan()
	for ; now < end; now++ {
		if !measuring && now >= measureFrom {
			measuring = true
			if run.warmup > 0 {
				sim.ResetStats()
			}
		}
		if (now-start.Unix())%run.replanSeconds == 0 && now > start.Unix() {
			plan()
		}
		// A second's budget, less what the last one overdrew: a group's calls are paid when it
		// opens, so a pass may overdraw by one call pair, and the next second makes up for it.
		capacity = min(capacity+budget, budget)
		sent := 0.0
		// Each second is one pass: small items share calls as the dispatcher groups them (up to
		// pack_size ids, their listings within the call's room), a group's two calls paid when
		// it opens; a pass cannot fill a group with items that are not due yet.
		var g group
		stop := false
		for ti := range heaps {
			h := &heaps[ti]
			for !stop && h.Len() > 0 && h.peek().due <= now {
				cost, how := g.cost(h.peek(), run.pack, oracleSales)
				if capacity <= 0 || (how == alone && capacity < cost && capacity < budget) {
					stop = true // HOT first: what is left waits for the next second
					break
				}
				it := heap.Pop(h).(*replayItem)
				g.add(it, how)
				lag := float64(now - it.due)
				prev := it.last
				gap, k := collect(sim, it, now, window)
				it.listings = truths[it.id].Listings
				if gap && prev < measureFrom {
					// Attribute it as the ground truth does: only sales lost after the window opened count.
					_, before, _ := sim.Market().Events(it.id, time.Unix(prev, 0), time.Unix(measureFrom, 0))
					gap = k-tierplan.SalesWindow > before
				}
				capacity -= cost
				sent += cost
				if it.planned > 0 {
					spent, planned = spent+cost, planned+it.planned
				}
				if measuring {
					res.requests += cost
					res.collections++
					if gap {
						res.collectorGaps++
						if k == tierplan.SalesWindow {
							res.exactPages++
						}
					}
					switch it.tier {
					case tiers.Hot:
						hotLags = append(hotLags, lag)
					case tiers.Cold:
						coldLags = append(coldLags, lag)
					}
				}
				it.due = slot(it.id, it.tier, now)
				heap.Push(h, it)
			}
		}
		if measuring && sent > budget+packing.Alone*(1+run.pack.Shadow)+1e-9 {
			res.overBudgetSeconds++
		}
	}
	res.rep = sim.Scorer().Report()
	// Items still waiting at the end count with their wait so far: a tier the budget starves
	// would otherwise show no lag at all.
	for _, it := range items {
		if it.due < end {
			switch it.tier {
			case tiers.Hot:
				hotLags = append(hotLags, float64(end-it.due))
			case tiers.Cold:
				coldLags = append(coldLags, float64(end-it.due))
			}
		}
	}
	res.hotLagP99, res.coldLagP99 = p99(hotLags), p99(coldLags)
	var seen, lost int64
	for _, it := range items {
		if tierplan.SalesSafe(truths[it.id].SalesPerHour/3600, 60) {
			f := res.rep.Items[it.id]
			seen, lost = seen+f.SalesSeen, lost+f.SalesLost
		}
		res.truthDemand += tierplan.TierDemand(it.tier, collectCost(it, run.pack, oracleSales))
	}
	res.coverable = 1
	if seen+lost > 0 {
		res.coverable = float64(seen) / float64(seen+lost)
	}
	return res
}

// collect is one collection at now: the ground truth records it, and the collector side
// updates its counts as the write-back does. It reports the collector's sales-gap rule: a full
// page of new sales since the last collection (the stored sales, or the last collection when
// none were stored, bound what was seen).
func collect(sim *neoplesim.Server, it *replayItem, now int64, window time.Duration) (gap bool, k int64) {
	sim.Scorer().Observe(it.id)
	if it.last == 0 {
		it.last, it.obsAt = now, now
		return false, 0
	}
	c, k, _ := sim.Market().Events(it.id, time.Unix(it.last, 0), time.Unix(now, 0))
	gap = k >= tierplan.SalesWindow
	age := float64(now - it.obsAt)
	decay := math.Exp(-age / window.Seconds())
	it.obs = it.obs.Decay(age, window.Seconds()).Observe(float64(now-it.last), c > 0 || k > 0)
	it.sales = it.sales*decay + float64(k)
	it.last, it.obsAt = now, now
	return gap, k
}

// defaultPacking is the packing the product ships with (collect.pack_*), both endpoints on.
func defaultPacking(cfg *config.Config) packing.Model {
	return packing.Model{PackSize: cfg.Collect.PackSize, AuctionLimit: cfg.Provider.AuctionLimit, MaxListings: packing.MaxListingsDefault,
		MaxSales: packing.MaxSalesDefault, Shadow: packing.ShadowFractionDefault, Listings: true, Sales: true}
}

// group is a pass's open packed call.
type group struct{ items, rows int }

// How an item is collected in a pass.
const (
	alone = iota
	opens // a new packed call
	joins // the open one
)

// cost is what collecting it adds to the pass: 2 alone; in a group, the group's two calls when
// it opens one, nothing when it joins the open one, plus the shadow check's share.
func (g *group) cost(it *replayItem, m packing.Model, salesPerHour func(*replayItem) float64) (float64, int) {
	if collectCost(it, m, salesPerHour) >= packing.Alone {
		return packing.Alone, alone
	}
	if g.items > 0 && g.items < m.PackSize && g.rows+it.listings <= packing.GroupListings(m.AuctionLimit) {
		return m.Shadow * packing.Alone, joins
	}
	return packing.Alone + m.Shadow*packing.Alone, opens
}

func (g *group) add(it *replayItem, how int) {
	switch how {
	case joins:
		g.items, g.rows = g.items+1, g.rows+it.listings
	case opens:
		g.items, g.rows = 1, it.listings
	}
}

// collectCost is what collecting the item costs now, as the dispatcher would group it: alone
// before its first collection or when its last answers were large (packing.Small), else its
// share of packed calls (a fluid approximation of the groups of up to pack_size).
func collectCost(it *replayItem, m packing.Model, salesPerHour func(*replayItem) float64) float64 {
	if it.listings < 0 {
		return packing.Alone
	}
	if salesPerHour == nil {
		salesPerHour = observedSales
	}
	perCollection := salesPerHour(it) / 3600 * float64(intervalOf(it.tier))
	if !packing.Small(it.listings, perCollection, m.MaxListings, m.MaxSales) {
		return packing.Alone
	}
	c, _ := m.Packed(it.listings)
	return c
}

// planCost sets what the planner counts a collection of an item with listings listings as.
func planCost(in tierplan.Item, listings int, run replayRun) tierplan.Item {
	in.Requests = packing.Alone
	if run.planAlone || listings < 0 {
		return in
	}
	if c, ok := run.pack.Packed(listings); ok {
		in.Packed, in.PackedUpTo = c, run.pack.PackedUpTo(in.SalesRate)
	}
	return in
}

// observedSales is the item's observed sales per hour (0 before any interval).
func observedSales(it *replayItem) float64 {
	secs := it.obs.ChangedSeconds + it.obs.UnchangedSeconds
	if secs <= 0 {
		return 0
	}
	return it.sales / secs * 3600
}

func p99(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	sort.Float64s(xs)
	return xs[int(0.99*float64(len(xs)-1))]
}

var freshStartRE = regexp.MustCompile(`fresh-start-ms (\d+)`)

// planned is one item's line in the file BenchmarkFreshnessRun reads (DUECOLLECTOR_FRESH_TIERS).
type planned struct {
	Tier     string  `json:"tier"`
	Requests float64 `json:"requests"`
}

// freshnessRealRun runs the real daemon (internal/daemon BenchmarkFreshnessRun) over the
// realistic market with the oracle's tiers at half the thresholds demand, then replays the same
// setting from the same start time and compares the two.
func freshnessRealRun(ctx context.Context, fs freshSize, p catalog.Policy, cfg *config.Config, rep *report) error {
	sim := neoplesim.New(neoplesim.Options{Items: fs.runItems, Seed: 7, Market: market.Realistic})
	truths := sim.Market().Truths()
	var ids []string
	var in []tierplan.Item
	var thrDemand float64
	pack := defaultPacking(cfg)
	for _, it := range sim.Catalog() {
		tr := truths[it.ItemID]
		ids = append(ids, it.ItemID)
		pi := planCost(tierplan.Item{Weight: tr.Weight, ChangeRate: tr.ChangesPerHour / 3600, SalesRate: tr.SalesPerHour / 3600},
			tr.Listings, replayRun{pack: pack})
		in = append(in, pi)
		t, _ := tiers.ForScore(replayScore(tr.SalesPerHour, tr.Weight, p), p.Thresholds)
		iv, _ := t.Interval()
		thrDemand += tierplan.TierDemand(t, pi.RequestsAt(iv.Seconds()))
	}
	budget := math.Round(thrDemand / 2)
	plan := tierplan.Solve(in, planLimit(budget, cfg.Daemon.Budget.Headroom))
	// Each item's tier and what the plan counts its collection at there, as the daemon's plan
	// service stores them (requests_per_collection): claims are sized by that cost.
	assigned := map[string]planned{}
	for i, id := range ids {
		assigned[id] = planned{Tier: string(plan.Tiers[i]), Requests: in[i].RequestsAtTier(plan.Tiers[i])}
	}
	f, err := os.CreateTemp("", "fresh-tiers-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := json.NewEncoder(f).Encode(assigned); err != nil {
		return err
	}
	f.Close()
	res, out, err := goBenchOutput(ctx, "./internal/daemon/", "^BenchmarkFreshnessRun$", "1x",
		"DUECOLLECTOR_FRESH_TIERS="+f.Name(), fmt.Sprintf("DUECOLLECTOR_FRESH_BUDGET=%g", budget),
		"DUECOLLECTOR_FRESH_DURATION="+fs.runFor.String())
	if err != nil {
		return err
	}
	m := res["BenchmarkFreshnessRun"]
	sm := freshStartRE.FindStringSubmatch(out)
	if m == nil || sm == nil {
		return fmt.Errorf("BenchmarkFreshnessRun reported nothing:\n%s", out)
	}
	startMs, _ := strconv.ParseInt(sm[1], 10, 64)
	start := time.UnixMilli(startMs).Truncate(time.Second)
	pred := replay(cFixed, ids, truths, p, replayRun{seed: 7, start: start, seconds: int64(math.Round(m["seconds"])),
		fixed: plan.Tiers, window: cfg.Catalog.EstimateWindow, budget: budget, headroom: cfg.Daemon.Budget.Headroom, replanSeconds: replanEvery,
		pack: pack})
	diff := (m["freshness"] - pred.rep.Freshness) / pred.rep.Freshness
	how := fmt.Sprintf("one `collector run` daemon (in process, internal/daemon BenchmarkFreshnessRun, packing on as by default, daemon.pack_wait 1s) for %s against the realistic market over HTTP (seed 7, %d items, the oracle's tiers at %.0f req/s, every item due at the start, its size, newest sale and planned cost (requests_per_collection) known as if collected and planned before), measured by GET /_sim/freshness; the replay runs the same setting from the same start time, one pass a second grouping small items into packed calls",
		fs.runFor, fs.runItems, budget)
	rep.add("Real daemon vs replay: weighted freshness", fmt.Sprintf("%.3f vs %.3f (%+.1f%%)", m["freshness"], pred.rep.Freshness, 100*diff), how)
	rep.add("Real daemon vs replay: weighted mean age", fmt.Sprintf("%.1f vs %.1f s", m["mean-age-s"], pred.rep.MeanAge), "same runs")
	rep.add("Real daemon: requests/s, busiest second, budget", fmt.Sprintf("%.1f, %.0f, %.0f req/s", m["req/s"], m["max-req/s"], budget), "the simulator's per-key counts")
	rep.add("Real daemon vs replay: requests per collection", fmt.Sprintf("%.2f vs %.2f", m["req/collection"], pred.requests/math.Max(float64(pred.collections), 1)),
		"requests the simulator served ÷ collections written back (collector_collections_total, outcome collected), first collections (alone) included; the replay's fluid share of packed calls")
	rep.add("Real daemon: HOT / COLD lag p99", fmt.Sprintf("%.2f / %.2f s", m["hot-lag-p99-s"], m["cold-lag-p99-s"]), "each item's latest claim: last_claimed_at − last_due_at")
	return nil
}
