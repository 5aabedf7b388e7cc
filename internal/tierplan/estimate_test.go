package tierplan

import (
	"math"
	"math/rand/v2"
	"testing"
)

// poissonChanged reports whether a Poisson process at rate λ had at least one event in t seconds.
func poissonChanged(r *rand.Rand, lambda, t float64) bool {
	return r.Float64() < -math.Expm1(-lambda*t)
}

func TestChangeRateConvergesOnPoissonDataAtRegularIntervals(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, lambda := range []float64{1.0 / 3600, 1.0 / 600, 1.0 / 120, 1.0 / 30} {
		var o Observations
		for i := 0; i < 200000; i++ {
			o = o.Observe(60, poissonChanged(r, lambda, 60))
		}
		got, ok := o.ChangeRate()
		if !ok || math.Abs(got-lambda)/lambda > 0.05 {
			t.Errorf("λ=%.5g: estimate %.5g (ok=%v)", lambda, got, ok)
		}
	}
}

func TestChangeRateConvergesOnPoissonDataAtIrregularIntervals(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 14))
	intervals := []float64{60, 180, 300, 600}
	for _, lambda := range []float64{1.0 / 3600, 1.0 / 600, 1.0 / 200} {
		var o Observations
		for i := 0; i < 40000; i++ {
			iv := intervals[i/10000]
			o = o.Observe(iv, poissonChanged(r, lambda, iv))
		}
		got, ok := o.ChangeRate()
		if !ok || math.Abs(got-lambda)/lambda > 0.1 {
			t.Errorf("λ=%.5g: estimate %.5g (ok=%v)", lambda, got, ok)
		}
	}
}

func TestChangeRateIsFiniteWhenEveryVisitSawAChange(t *testing.T) {
	var o Observations
	for i := 0; i < 10; i++ {
		o = o.Observe(600, true)
	}
	got, ok := o.ChangeRate()
	if !ok || math.IsInf(got, 0) || math.IsNaN(got) || got <= 0 {
		t.Errorf("all changed: %v %v", got, ok)
	}
	if _, ok := (Observations{}).ChangeRate(); ok {
		t.Error("no observations must give no estimate")
	}
}

func TestDecayWeighsOldObservationsLess(t *testing.T) {
	o := Observations{Accesses: 10, Changes: 5, ChangedSeconds: 300, UnchangedSeconds: 300}.Decay(3600, 3600)
	if math.Abs(o.Accesses-10/math.E) > 1e-9 {
		t.Errorf("one window old: %v accesses, want %v", o.Accesses, 10/math.E)
	}
}
