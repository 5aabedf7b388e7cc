package tiers

import (
	"math"
	"strings"
	"testing"
)

func TestForScore(t *testing.T) {
	th := Thresholds{Hot: 30, Active: 10, Warm: 3}
	for _, tc := range []struct {
		score  float64
		want   Tier
		reason string
	}{
		{1000, Hot, "score 1000 ≥ hot threshold 30"},
		{30, Hot, "score 30 ≥ hot threshold 30"},
		{29.999, Active, "score 29.99 ≥ active threshold 10"}, // truncated, never shown as 30
		{12.345, Active, "score 12.34 ≥ active threshold 10"},
		{10, Active, "score 10 ≥ active threshold 10"},
		{9.99, Warm, "score 9.99 ≥ warm threshold 3"},
		{3, Warm, "score 3 ≥ warm threshold 3"},
		{2.5, Cold, "score 2.5 < warm threshold 3"},
		{0, Cold, "score 0 < warm threshold 3"},
		{-1, Cold, "score -1 < warm threshold 3"},
		{math.NaN(), Cold, "score NaN < warm threshold 3"},
	} {
		got, reason := ForScore(tc.score, th)
		if got != tc.want || reason != tc.reason {
			t.Errorf("ForScore(%v) = %s, %q; want %s, %q", tc.score, got, reason, tc.want, tc.reason)
		}
	}
}

func TestForScoreZeroWarmThreshold(t *testing.T) {
	// With warm = 0 every non-negative score is at least WARM: COLD is only for negative scores.
	th := Thresholds{Hot: 2, Active: 1, Warm: 0}
	if got, _ := ForScore(0, th); got != Warm {
		t.Errorf("ForScore(0) = %s, want WARM_5M", got)
	}
}

func TestThresholdsValidate(t *testing.T) {
	for _, tc := range []struct {
		th   Thresholds
		ok   bool
		want string
	}{
		{Thresholds{Hot: 30, Active: 10, Warm: 3}, true, ""},
		{Thresholds{Hot: 3, Active: 2, Warm: 0}, true, ""},
		{Thresholds{Hot: 3, Active: 3, Warm: 1}, false, "hot > active > warm"},
		{Thresholds{Hot: 3, Active: 4, Warm: 1}, false, "hot > active > warm"},
		{Thresholds{Hot: 3, Active: 2, Warm: -1}, false, "warm threshold -1 must be >= 0"},
		{Thresholds{Hot: math.Inf(1), Active: 2, Warm: 1}, false, "finite"},
	} {
		err := tc.th.Validate()
		if (err == nil) != tc.ok || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v.Validate() = %v; want ok=%v containing %q", tc.th, err, tc.ok, tc.want)
		}
	}
}

func TestPromotionAndMoreUrgent(t *testing.T) {
	for _, tc := range []struct {
		from, to Tier
		promo    bool
	}{
		{Dormant, Cold, true},
		{Cold, Active, true},
		{Active, Hot, true},
		{Hot, Hot, false},
		{Hot, Warm, false},
		{Cold, Dormant, false},
	} {
		if got := IsPromotion(tc.from, tc.to); got != tc.promo {
			t.Errorf("IsPromotion(%s, %s) = %v, want %v", tc.from, tc.to, got, tc.promo)
		}
	}
	if got := MoreUrgent(Cold, Active); got != Active {
		t.Errorf("MoreUrgent(COLD, ACTIVE) = %s", got)
	}
	if got := MoreUrgent(Hot, Dormant); got != Hot {
		t.Errorf("MoreUrgent(HOT, DORMANT) = %s", got)
	}
}
