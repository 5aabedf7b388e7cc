package budget

import (
	"math"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/config"
)

func TestCeilingIsTheTighterBudgetLessHeadroom(t *testing.T) {
	for _, tc := range []struct {
		l        config.WorkloadLimits
		headroom float64
		want     float64
	}{
		{config.WorkloadLimits{Rate: 500, PerMinute: 30000}, 0.03, 485},
		{config.WorkloadLimits{Rate: 500, PerMinute: 6000}, 0, 100}, // the minute budget binds
		{config.WorkloadLimits{Rate: 20}, 0.1, 18},                  // per_minute 0: none
	} {
		if got := Ceiling(tc.l, tc.headroom); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("%+v less %v: ceiling %v, want %v", tc.l, tc.headroom, got, tc.want)
		}
	}
}

// What a key allows, as status, the console and the gauge show it, is the ceiling's own
// arithmetic without headroom, times what was learned.
func TestKeyRateIsTheCeilingWithoutHeadroom(t *testing.T) {
	l := config.WorkloadLimits{Rate: 500, PerMinute: 6000}
	if got := KeyRate(l, 1); got != 100 {
		t.Errorf("key rate %v, want the minute budget's 100/s", got)
	}
	if got := KeyRate(l, 0.25); got != 25 {
		t.Errorf("a quarter learned: %v, want 25/s", got)
	}
}

// The plan receives its share of the very ceiling the share enforces, less its reserve.
func TestPlanLimitIsItsShareOfTheShareCeiling(t *testing.T) {
	l := config.WorkloadLimits{Rate: 500, PerMinute: 30000}
	s, err := New(nil, Config{KeyLabel: "k", Instance: "i", Rate: l.Rate, PerMinute: l.PerMinute, Headroom: 0.03,
		Heartbeat: 1e9, Cooldown: 1e9}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := PlanLimit(l, 0.03, 1), s.Stats().Ceiling*(1-PlanReserve); math.Abs(got-want) > 1e-9 {
		t.Errorf("plan limit %v, want the share's ceiling less the reserve %v", got, want)
	}
	if got, want := PlanLimit(l, 0.03, 0.5), PlanLimit(l, 0.03, 1)/2; math.Abs(got-want) > 1e-9 {
		t.Errorf("half the share: %v, want %v", got, want)
	}
}

func TestRecoveryRampsLinearlyFromTheFloorToTheWholeBudget(t *testing.T) {
	for _, tc := range []struct {
		elapsed time.Duration
		want    float64
	}{{0, 0.1}, {30 * time.Second, 0.55}, {time.Minute, 1}, {time.Hour, 1}, {-time.Second, 0.1}} {
		if got := RecoveryFactor(0.1, time.Minute, tc.elapsed); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("after %s: factor %v, want %v", tc.elapsed, got, tc.want)
		}
	}
}
