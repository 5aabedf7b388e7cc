package budget

import (
	"fmt"
	"sync"
	"time"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/packing"
)

// Loop is the budget feedback loop, in one place: what a collection really costs, what
// share of the configured budget the tier plan may assume, how many items a claim takes, and
// when the plan must be made again, and the one number the plan receives (PlanLimit). It has
// no database and no clock: the daemon's services feed it what they measured and the time, and
// ask it what to do.
//
// The loop closes like this: the collection service reports each pass's provider calls
// (Learn); the gauge refresh reports how many items are tracked (SawTracked); the plan service
// asks whether to plan now (ReplanDue), plans within PlanLimit of PlanShare of the budget and
// says so (Planned); the dispatcher sizes its claims by ClaimLimit (items) and ClaimRequests (their
// planned cost).
type Loop struct {
	cfg LoopConfig

	mu sync.Mutex
	// perItem is what a collection has cost lately in calls: packed collections share calls,
	// so a second of budget buys more than rate/2 items.
	perItem float64
	// costRatio is calls made ÷ what the plan counted them as: packed calls share less well in
	// practice (partial groups, answers cut) than the plan's model says.
	costRatio float64
	planned   float64   // the share of the budget the last plan assumed
	lastPlan  time.Time // when the last plan was made (zero: none yet)
	tracked   int64     // items the last gauge refresh saw; -1 before the first
	grew      bool      // items were added since the last plan
}

// LoopConfig configures the feedback loop.
type LoopConfig struct {
	// PackSize is how many items one packed call carries (collect.pack_size): a claim is never
	// smaller, or it could not fill one.
	PackSize int
	// ReplanBelow: a plan share under this fraction of the one the last plan assumed asks for
	// a new plan. Default ReplanBelowDefault.
	ReplanBelow float64
	// MinReplanGap spaces the plans that new items or a falling budget ask for: a budget that
	// keeps falling (cut after cut) would otherwise ask again and again. Default
	// MinReplanGapDefault.
	MinReplanGap time.Duration
	// Market is the market key's configured limits (provider.market.*) and Headroom
	// daemon.budget.headroom: the ceiling the plan takes its share of.
	Market   config.WorkloadLimits
	Headroom float64
}

const (
	ReplanBelowDefault  = 0.8
	MinReplanGapDefault = 15 * time.Second
	// minLearnItems: a pass with fewer collections than this tells nothing about their cost.
	minLearnItems = 10
	// minLearnPlanned: nor does one whose plan counted fewer requests than this.
	minLearnPlanned = 5
)

// NewLoop builds the loop; a value out of range is refused naming its key.
func NewLoop(cfg LoopConfig) (*Loop, error) {
	if cfg.ReplanBelow == 0 {
		cfg.ReplanBelow = ReplanBelowDefault
	}
	if cfg.MinReplanGap == 0 {
		cfg.MinReplanGap = MinReplanGapDefault
	}
	switch {
	case cfg.PackSize < 1:
		return nil, fmt.Errorf("cost loop: collect.pack_size %d must be >= 1", cfg.PackSize)
	case !(cfg.ReplanBelow > 0 && cfg.ReplanBelow <= 1):
		return nil, fmt.Errorf("cost loop: replan threshold %v must be in (0, 1]", cfg.ReplanBelow)
	case cfg.MinReplanGap < 0:
		return nil, fmt.Errorf("cost loop: replan gap %s must be >= 0", cfg.MinReplanGap)
	}
	// The tiers as found were planned (if at all) for the whole configured budget.
	return &Loop{cfg: cfg, perItem: packing.Alone, costRatio: 1, planned: 1, tracked: -1}, nil
}

// PassCost is what one collection pass measured.
type PassCost struct {
	Collections int     // items collected or failed
	Calls       int64   // provider calls made, retries and shadow checks included
	Planned     float64 // the requests the plan counted the claimed collections as costing
}

// Learn follows what collections cost, smoothed over passes, and returns the cost ratio.
// Passes too small to tell are skipped. The ratio never goes below 1: a plan may under-use the
// budget when its costs were too high, but must not over-commit it.
func (l *Loop) Learn(p PassCost) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	if p.Collections < minLearnItems {
		return l.costRatio
	}
	l.perItem = ewma(l.perItem, min(max(float64(p.Calls)/float64(p.Collections), 0.1), 2*packing.Alone))
	if p.Planned >= minLearnPlanned {
		l.costRatio = ewma(l.costRatio, min(max(float64(p.Calls)/p.Planned, 1), 10))
	}
	return l.costRatio
}

// ewma moves a smoothed value 30 % of the way towards x.
func ewma(v, x float64) float64 { return 0.7*v + 0.3*x }

// CostRatio is calls made ÷ calls the plan counted, smoothed (1 until measured).
func (l *Loop) CostRatio() float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.costRatio
}

// ClaimLimit caps a claim at half a second of budget, perSec being this process's requests per
// second: when more is due than the budget allows, a HOT item that falls due just after a
// claim waits for the next one, which comes when this batch has drained. At least a full
// packed call's worth: a smaller claim could never fill one.
func (l *Loop) ClaimLimit(perSec float64) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(int(perSec/2/l.perItem), l.cfg.PackSize)
}

// ClaimRequests is how many requests, as the plan counts them, one claim may take: horizon of
// this process's budget (perSec requests a second), divided by how much dearer collections have
// really been than the plan counted. The dispatcher also claims again only once the work still
// pending is this small, so when more is due than the budget serves, an item falling due (HOT
// first) is claimed within about a horizon of its due time however its batch is packed.
// At least a full packed call's worth (its two calls), as ClaimLimit: on a budget of a few
// requests a second a horizon holds less than one call, every claim would take one item, no
// call could be shared, and the dearer collections would shrink the claims further.
func (l *Loop) ClaimRequests(perSec float64, horizon time.Duration) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := perSec * horizon.Seconds() / l.costRatio
	if l.cfg.PackSize > 1 {
		r = max(r, packing.Alone)
	}
	return r
}

// PlanShare is the share of the configured budget the plan may count on: learned, the share
// the adaptive budget found the provider allows (1 without one), divided by how much more
// collections have really cost than the plan counted. A provider whose real limit is lower,
// or collections dearer than the plan's cost model, then get a plan the budget can serve (HOT
// first) instead of a standing backlog.
func (l *Loop) PlanShare(learned float64) float64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return learned / l.costRatio
}

// PlanLimit is the requests per second a plan made with share (PlanShare) of the budget
// may use: the one number the tier plan receives.
func (l *Loop) PlanLimit(share float64) float64 {
	return PlanLimit(l.cfg.Market, l.cfg.Headroom, share)
}

// SawTracked records how many items are tracked; more than last time asks for a plan.
func (l *Loop) SawTracked(n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tracked >= 0 && n > l.tracked {
		l.grew = true
	}
	l.tracked = n
}

// ReplanDue reports whether the plan service should plan at now, learned being the adaptive
// budget's share: new items add demand, and a budget well below the one planned for leaves
// demand unserved, so either plans now rather than at the next catalog.recalc_interval — but
// not sooner than MinReplanGap after the last plan.
func (l *Loop) ReplanDue(now time.Time, learned float64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	asked := l.grew || learned/l.costRatio < l.cfg.ReplanBelow*l.planned
	return asked && (l.lastPlan.IsZero() || now.Sub(l.lastPlan) >= l.cfg.MinReplanGap)
}

// Planned records that a plan was made at now assuming share of the budget.
func (l *Loop) Planned(now time.Time, share float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastPlan, l.planned, l.grew = now, share, false
}

// PlanFailed records a plan that was tried at now and did not land (the database was away):
// what asked for it still asks, one try per MinReplanGap, instead of waiting for the next
// catalog.recalc_interval.
func (l *Loop) PlanFailed(now time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lastPlan = now
}
