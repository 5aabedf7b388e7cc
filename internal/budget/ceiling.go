package budget

import (
	"math"

	"github.com/duecollector/duecollector/internal/config"
)

// Ceiling is a key's budget in requests per second after headroom: the tighter of its
// per-second and per-minute limits (per_minute 0: none), less the fraction
// daemon.budget.headroom. The cluster never sends more; the tier plan takes its share of it.
// It is the one place the budget's ceiling is computed.
func Ceiling(l config.WorkloadLimits, headroom float64) float64 {
	r := l.Rate
	if l.PerMinute > 0 {
		r = math.Min(r, float64(l.PerMinute)/60)
	}
	return r * (1 - headroom)
}

// KeyRate is what the provider allows a key, in requests per second, before headroom: the
// tighter of its limits (per_minute 0: none), times the share of them the adaptive budget
// learned it really allows (1 with nothing learned). Status, the console and the budget gauge
// show it.
func KeyRate(l config.WorkloadLimits, learned float64) float64 {
	return Ceiling(l, 0) * learned
}

// PlanReserve is the fraction of its share of the ceiling the tier plan leaves unplanned: the
// room retries, imports and `collector collect ITEM_ID` take without delaying scheduled
// collections.
const PlanReserve = 0.07

// PlanLimit is the one number the tier plan receives, in requests per second: share of the
// ceiling (Loop.PlanShare, 1 with nothing learned or measured), less PlanReserve.
func PlanLimit(l config.WorkloadLimits, headroom, share float64) float64 {
	return Ceiling(l, headroom) * share * (1 - PlanReserve)
}

// ConfiguredPlanLimit is PlanLimit for the configured market key with nothing learned: what
// the one-shots and the benchmarks plan within.
func ConfiguredPlanLimit(c *config.Config) float64 {
	return PlanLimit(c.Provider.Market, c.Daemon.Budget.Headroom, 1)
}
