package tierplan

import "math"

// Observations are an item's (decayed) collection counts: each collection ends an interval
// since the previous one, in which a change was or was not detected.
type Observations struct {
	// Accesses is n, the intervals observed.
	Accesses float64
	// Changes is X, the intervals in which a change was detected.
	Changes float64
	// ChangedSeconds is the summed length of the intervals with a change.
	ChangedSeconds float64
	// UnchangedSeconds is the summed length of the intervals without one.
	UnchangedSeconds float64
}

// Observe adds one interval of the given length to the counts.
func (o Observations) Observe(seconds float64, changed bool) Observations {
	o.Accesses++
	if changed {
		o.Changes++
		o.ChangedSeconds += seconds
	} else {
		o.UnchangedSeconds += seconds
	}
	return o
}

// Decay scales the counts by e^(−age/window), so observations a window old count 1/e.
func (o Observations) Decay(ageSeconds, windowSeconds float64) Observations {
	f := DecayFactor(ageSeconds, windowSeconds)
	return Observations{o.Accesses * f, o.Changes * f, o.ChangedSeconds * f, o.UnchangedSeconds * f}
}

// DecayFactor is what a decayed count is multiplied by after ageSeconds: e^(−age/window), 1
// for no age or no window. Every decayed count an item keeps (the change counts above, its
// sales) decays by it.
func DecayFactor(ageSeconds, windowSeconds float64) float64 {
	if !(ageSeconds > 0) || !(windowSeconds > 0) {
		return 1
	}
	return math.Exp(-ageSeconds / windowSeconds)
}

// ChangeRate estimates λ (changes per second) from the counts with Cho & Garcia-Molina's
// estimators ("Estimating frequency of change", ACM TOIT 2003). ok is false before any
// observation. With regular intervals it is the bias-reduced r = −ln((n − X + 0.5)/(n + 0.5)) / I;
// when changed and unchanged intervals differ in length (tier moves, late collections) it is
// their maximum-likelihood estimate for irregular accesses, solving
// Σ_changed t/(e^(λt) − 1) = Σ_unchanged t with the changed intervals at their mean length.
func (o Observations) ChangeRate() (rate float64, ok bool) {
	n, x := o.Accesses, o.Changes
	total := o.ChangedSeconds + o.UnchangedSeconds
	if !(n > 0) || !(total > 0) {
		return 0, false
	}
	if x <= 0 {
		return 0, true
	}
	mean := total / n
	tc := o.ChangedSeconds / x
	regular := x >= n || math.Abs(tc-mean) <= 0.05*mean
	if regular {
		return -math.Log((n-math.Min(x, n)+0.5)/(n+0.5)) / mean, true
	}
	// g(λ) = X·tc/(e^(λ·tc) − 1) − U falls from +∞ to −U: bisect on a log scale.
	u := o.UnchangedSeconds
	g := func(l float64) float64 { return x*tc/math.Expm1(l*tc) - u }
	lo, hi := 1e-12, 1.0
	for g(hi) > 0 && hi < 1e6 {
		hi *= 10
	}
	for i := 0; i < 100 && hi/lo > 1+1e-9; i++ {
		mid := math.Sqrt(lo * hi)
		if g(mid) > 0 {
			lo = mid
		} else {
			hi = mid
		}
	}
	return math.Sqrt(lo * hi), true
}
