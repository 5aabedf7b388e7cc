package tierplan

import (
	"fmt"
	"time"

	"github.com/duecollector/duecollector/internal/tiers"
)

// Rules are the threshold policy's settings (catalog.*).
type Rules struct {
	// DormantAfter: an item with no sale and no interest for this long goes DORMANT.
	DormantAfter time.Duration
	// DemotionHold: a demotion waits until the item has held its tier this long.
	DemotionHold time.Duration
	// ReactivateTier is the least a DORMANT or COLD item is promoted to by an interest event.
	ReactivateTier tiers.Tier
	// Thresholds map a popularity score to a tier.
	Thresholds tiers.Thresholds
}

// State is one tracked item as the policy sees it.
type State struct {
	Tier          tiers.Tier
	Pinned        tiers.Tier // an operator's pin; "" = none
	CreatedAt     time.Time
	TierChangedAt *time.Time
	LastSale      *time.Time
	LastInterest  *time.Time
	LastKind      string // the kind of the LastInterest event
	Observed      Observations
	ObservedSales float64 // decayed new sales over Observed's seconds
	SeenListings  *int    // listings at the last collection; nil before the first
}

// Decision is what to do with one item.
type Decision struct {
	Tier   tiers.Tier
	Reason string
	DueNow bool // reactivation: collect at once
	Held   bool // a demotion postponed by the demotion hold
}

// Decide is the threshold policy for one item with the given popularity score, as of now (the
// database clock).
func Decide(now time.Time, it State, score float64, r Rules) Decision {
	if it.Pinned != "" {
		return Decision{Tier: it.Pinned, Reason: "pinned by an operator"}
	}
	heldSince := it.CreatedAt
	if it.TierChangedAt != nil {
		heldSince = *it.TierChangedAt
	}
	quietSince := it.CreatedAt
	for _, t := range []*time.Time{it.LastSale, it.LastInterest} {
		if t != nil && t.After(quietSince) {
			quietSince = *t
		}
	}

	var d Decision
	switch {
	case now.Sub(quietSince) >= r.DormantAfter:
		d = Decision{Tier: tiers.Dormant, Reason: fmt.Sprintf("no sales or interest for %s", r.DormantAfter)}
	case (it.Tier == tiers.Dormant || it.Tier == tiers.Cold) && it.LastInterest != nil && it.LastInterest.After(heldSince):
		// An interest event that nobody acted on yet (written straight into item_interest by
		// another service): reactivate, exactly as catalog.RecordInterest would have.
		scoreTier, _ := tiers.ForScore(score, r.Thresholds)
		d = Decision{
			Tier:   tiers.MoreUrgent(r.ReactivateTier, scoreTier),
			Reason: fmt.Sprintf("%s event at %s: reactivated from %s", it.LastKind, it.LastInterest.UTC().Format(time.RFC3339), it.Tier),
			DueNow: true,
		}
	default:
		d.Tier, d.Reason = tiers.ForScore(score, r.Thresholds)
	}
	if d.Tier != it.Tier && !tiers.IsPromotion(it.Tier, d.Tier) && now.Sub(heldSince) < r.DemotionHold {
		return Decision{Tier: it.Tier, Held: true}
	}
	return d
}
