package tierplan

import (
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/tiers"
)

func TestDecide(t *testing.T) {
	// The defaults of catalog.*: dormant 72h, hold 1h, reactivate ACTIVE_3M, thresholds 30/10/3.
	r := Rules{DormantAfter: 72 * time.Hour, DemotionHold: time.Hour, ReactivateTier: tiers.Active, Thresholds: tiers.Thresholds{Hot: 30, Active: 10, Warm: 3}}
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	old := now.Add(-30 * 24 * time.Hour)
	for _, tc := range []struct {
		name   string
		it     State
		score  float64
		tier   tiers.Tier
		dueNow bool
		held   bool
		reason string
	}{
		{"quiet for dormant_after goes DORMANT", State{Tier: tiers.Warm, CreatedAt: old, LastSale: ago(73 * time.Hour)}, 0,
			tiers.Dormant, false, false, "no sales or interest for 72h0m0s"},
		{"a recent sale keeps it awake", State{Tier: tiers.Warm, CreatedAt: old, LastSale: ago(71 * time.Hour)}, 0,
			tiers.Cold, false, false, "score 0 < warm threshold 3"},
		{"a new item is neither dormant nor demoted yet", State{Tier: tiers.Warm, CreatedAt: now.Add(-30 * time.Minute)}, 0,
			tiers.Warm, false, true, ""},
		{"score promotes", State{Tier: tiers.Cold, CreatedAt: old, LastSale: ago(time.Minute)}, 31,
			tiers.Hot, false, false, "score 31 ≥ hot threshold 30"},
		{"score demotes after the hold", State{Tier: tiers.Hot, CreatedAt: old, TierChangedAt: ago(2 * time.Hour), LastSale: ago(time.Minute)}, 4,
			tiers.Warm, false, false, "score 4 ≥ warm threshold 3"},
		{"demotion held", State{Tier: tiers.Hot, CreatedAt: old, TierChangedAt: ago(30 * time.Minute), LastSale: ago(time.Minute)}, 4,
			tiers.Hot, false, true, ""},
		{"dormancy held too", State{Tier: tiers.Hot, CreatedAt: old, TierChangedAt: ago(30 * time.Minute)}, 0,
			tiers.Hot, false, true, ""},
		{"interest after a dormant tier change reactivates", State{Tier: tiers.Dormant, CreatedAt: old, TierChangedAt: ago(5 * time.Hour), LastInterest: ago(time.Minute), LastKind: "view"}, 1,
			tiers.Active, true, false, "view event at 2026-11-29T11:59:00Z: reactivated from DORMANT"},
		{"cold reactivates to the higher of score and reactivate tier", State{Tier: tiers.Cold, CreatedAt: old, TierChangedAt: ago(5 * time.Hour), LastInterest: ago(time.Minute), LastKind: "watch"}, 50,
			tiers.Hot, true, false, "watch event at 2026-11-29T11:59:00Z: reactivated from COLD_10M"},
		{"interest already acted on does not reactivate again", State{Tier: tiers.Dormant, CreatedAt: old, TierChangedAt: ago(time.Minute), LastInterest: ago(5 * time.Minute), LastKind: "view"}, 1,
			tiers.Cold, false, false, "score 1 < warm threshold 3"},
		{"a pin holds against dormancy and the score", State{Tier: tiers.Warm, Pinned: tiers.Warm, CreatedAt: old, LastSale: ago(100 * time.Hour)}, 50,
			tiers.Warm, false, false, "pinned by an operator"},
		{"warm items are not reactivated", State{Tier: tiers.Warm, CreatedAt: old, TierChangedAt: ago(5 * time.Hour), LastInterest: ago(time.Minute), LastKind: "view"}, 5,
			tiers.Warm, false, false, "score 5 ≥ warm threshold 3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(now, tc.it, tc.score, r)
			if d.Tier != tc.tier || d.DueNow != tc.dueNow || d.Held != tc.held || d.Reason != tc.reason {
				t.Errorf("Decide = %+v; want tier %s dueNow %v held %v reason %q", d, tc.tier, tc.dueNow, tc.held, tc.reason)
			}
		})
	}
}
