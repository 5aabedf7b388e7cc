package tiers

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// Thresholds map a popularity score to a tier: a score at or above Hot is HOT_1M, at or
// above Active is ACTIVE_3M, at or above Warm is WARM_5M, and anything lower is COLD_10M.
// DORMANT is never a matter of score: it means "no signals at all for a while", which the
// caller decides from timestamps.
type Thresholds struct {
	Hot    float64
	Active float64
	Warm   float64
}

// Validate requires Hot > Active > Warm >= 0, so every score lands in exactly one tier.
func (th Thresholds) Validate() error {
	var errs []error
	for _, v := range []float64{th.Hot, th.Active, th.Warm} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			errs = append(errs, fmt.Errorf("thresholds must be finite numbers, got %v", v))
		}
	}
	if th.Warm < 0 {
		errs = append(errs, fmt.Errorf("warm threshold %v must be >= 0", th.Warm))
	}
	if !(th.Hot > th.Active && th.Active > th.Warm) {
		errs = append(errs, fmt.Errorf("thresholds must satisfy hot > active > warm, got hot=%v active=%v warm=%v", th.Hot, th.Active, th.Warm))
	}
	return errors.Join(errs...)
}

// ForScore returns the tier a score earns and a short human reason naming the threshold
// that decided it, for tracked_items.tier_reason.
func ForScore(score float64, th Thresholds) (Tier, string) {
	s := formatScore(score)
	switch {
	case score >= th.Hot:
		return Hot, fmt.Sprintf("score %s ≥ hot threshold %s", s, formatScore(th.Hot))
	case score >= th.Active:
		return Active, fmt.Sprintf("score %s ≥ active threshold %s", s, formatScore(th.Active))
	case score >= th.Warm:
		return Warm, fmt.Sprintf("score %s ≥ warm threshold %s", s, formatScore(th.Warm))
	default:
		// Also the answer for NaN: an unusable score must not make an item look popular.
		return Cold, fmt.Sprintf("score %s < warm threshold %s", s, formatScore(th.Warm))
	}
}

// IsPromotion reports whether moving from one tier to another collects more often.
func IsPromotion(from, to Tier) bool { return to.Rank() < from.Rank() }

// MoreUrgent returns whichever of two tiers is collected more often.
func MoreUrgent(a, b Tier) Tier {
	if b.Rank() < a.Rank() {
		return b
	}
	return a
}

// formatScore keeps reasons short. It truncates rather than rounds, so a score just under a
// threshold never reads as if it had reached it.
func formatScore(v float64) string { return strconv.FormatFloat(math.Trunc(v*100)/100, 'f', -1, 64) }
