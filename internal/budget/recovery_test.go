package budget

import (
	"math"
	"testing"
	"time"
)

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
