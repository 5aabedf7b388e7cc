package budget

import (
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/packing"
)

func newTestLoop(t *testing.T, packSize int) *Loop {
	t.Helper()
	l, err := NewLoop(LoopConfig{PackSize: packSize})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func TestCostLoopRefusesABadPackSize(t *testing.T) {
	if _, err := NewLoop(LoopConfig{}); err == nil {
		t.Fatal("pack size 0 accepted")
	}
	if _, err := NewLoop(LoopConfig{PackSize: 1, ReplanBelow: 1.5}); err == nil {
		t.Fatal("a replan threshold above 1 accepted")
	}
}

// Before anything is measured a collection counts as costing packing.Alone: 40 req/s buys 20
// items a second, 10 a claim.
func TestClaimTakesHalfASecondOfBudget(t *testing.T) {
	l := newTestLoop(t, 1)
	if got := l.ClaimLimit(40); got != 10 {
		t.Fatalf("claim limit %d at 40 req/s, want 10 (half a second at %v requests each)", got, packing.Alone)
	}
	// Collections that turn out to cost 0.5 calls each make a claim of the same half second larger.
	for range 50 {
		l.Learn(PassCost{Collections: 100, Calls: 50})
	}
	if got := l.ClaimLimit(40); got < 39 || got > 40 {
		t.Fatalf("claim limit %d at 40 req/s and 0.5 calls an item, want about 40", got)
	}
}

func TestClaimIsNeverSmallerThanOnePackedCall(t *testing.T) {
	l := newTestLoop(t, 10)
	if got := l.ClaimLimit(2); got != 10 {
		t.Fatalf("claim limit %d at 2 req/s with packs of 10, want 10", got)
	}
}

func TestPassesTooSmallTeachNothing(t *testing.T) {
	l := newTestLoop(t, 1)
	l.Learn(PassCost{Collections: minLearnItems - 1, Calls: 1000, Planned: 100})
	if r := l.CostRatio(); r != 1 {
		t.Fatalf("cost ratio %v after a pass of %d items, want 1", r, minLearnItems-1)
	}
	if got := l.ClaimLimit(40); got != 10 {
		t.Fatalf("claim limit %d after a pass too small to tell, want 10", got)
	}
	// Enough items, but the plan counted too few requests to compare: the per-item cost moves,
	// the ratio does not.
	l.Learn(PassCost{Collections: 20, Calls: 40, Planned: minLearnPlanned - 1})
	if r := l.CostRatio(); r != 1 {
		t.Fatalf("cost ratio %v after a pass whose plan counted %v requests, want 1", r, minLearnPlanned-1)
	}
}

// Collections four times dearer than the plan counted bring the plan share towards a quarter of
// the learned budget, smoothed over passes.
func TestDearCollectionsShrinkThePlanShare(t *testing.T) {
	l := newTestLoop(t, 1)
	r1 := l.Learn(PassCost{Collections: 100, Calls: 200, Planned: 50})
	if r1 <= 1 || r1 >= 4 {
		t.Fatalf("cost ratio %v after one pass 4× dearer, want between 1 and 4 (smoothed)", r1)
	}
	for range 50 {
		l.Learn(PassCost{Collections: 100, Calls: 200, Planned: 50})
	}
	if s := l.PlanShare(0.8); s < 0.19 || s > 0.21 {
		t.Fatalf("plan share %v with a learned 0.8 and collections 4× dearer, want 0.2", s)
	}
}

// A plan may under-use the budget when its costs were counted too high, but never over-commit
// it: cheaper collections than counted leave the ratio at 1; absurd ones are capped at 10.
func TestCostRatioStaysBetweenOneAndTen(t *testing.T) {
	l := newTestLoop(t, 1)
	for range 50 {
		l.Learn(PassCost{Collections: 100, Calls: 10, Planned: 100})
	}
	if r := l.CostRatio(); r != 1 {
		t.Fatalf("cost ratio %v when collections cost less than counted, want 1", r)
	}
	for range 50 {
		l.Learn(PassCost{Collections: 100, Calls: 100000, Planned: 10})
	}
	if r := l.CostRatio(); r > 10 {
		t.Fatalf("cost ratio %v, want at most 10", r)
	}
}

func TestNewItemsAskForAPlanOnce(t *testing.T) {
	l := newTestLoop(t, 1)
	l.SawTracked(10)
	if l.ReplanDue(t0, 1) {
		t.Fatal("the first count asked for a plan: there is nothing to compare it with")
	}
	l.SawTracked(10)
	if l.ReplanDue(t0, 1) {
		t.Fatal("an unchanged count asked for a plan")
	}
	l.SawTracked(15)
	if !l.ReplanDue(t0, 1) {
		t.Fatal("new items did not ask for a plan")
	}
	l.Planned(t0, 1)
	if l.ReplanDue(t0.Add(time.Hour), 1) {
		t.Fatal("new items asked again after they were planned")
	}
	l.SawTracked(12) // removed items leave more budget, not less: the interval will do
	if l.ReplanDue(t0.Add(time.Hour), 1) {
		t.Fatal("fewer items asked for a plan")
	}
}

// A plan that failed (the database away) leaves what asked for it asking, once the gap has
// passed: new items and a fallen budget are planned as soon as a plan can land.
func TestAFailedPlanIsAskedForAgain(t *testing.T) {
	l := newTestLoop(t, 1)
	l.Planned(t0, 1)
	l.SawTracked(10)
	l.SawTracked(15)
	if !l.ReplanDue(t0.Add(time.Hour), 1) {
		t.Fatal("new items did not ask for a plan")
	}
	failed := t0.Add(time.Hour)
	l.PlanFailed(failed)
	if l.ReplanDue(failed.Add(MinReplanGapDefault-time.Millisecond), 1) {
		t.Fatal("a failed plan was tried again before the gap")
	}
	if !l.ReplanDue(failed.Add(MinReplanGapDefault), 1) {
		t.Fatal("new items stopped asking after a plan that failed")
	}
	l.PlanFailed(failed.Add(MinReplanGapDefault))
	if !l.ReplanDue(failed.Add(2*MinReplanGapDefault), 0.5) {
		t.Fatal("a fallen budget did not ask after a plan that failed: the failed plan's share was taken as planned")
	}
}

// A learned budget falling below 80 % of the one the last plan assumed asks for a plan; one
// above it does not.
func TestAFallingBudgetAsksForAPlan(t *testing.T) {
	l := newTestLoop(t, 1)
	l.Planned(t0, 1)
	later := t0.Add(time.Minute)
	if l.ReplanDue(later, 0.81) {
		t.Fatal("a budget at 81 % of the planned one asked for a plan")
	}
	if !l.ReplanDue(later, 0.79) {
		t.Fatal("a budget at 79 % of the planned one did not ask for a plan")
	}
	l.Planned(later, 0.79)
	if l.ReplanDue(later.Add(time.Minute), 0.7) {
		t.Fatal("a budget at 89 % of the last plan's asked for a plan")
	}
}

// Cut after cut, the budget asks again and again: one plan per MinReplanGap.
func TestPlansAreSpacedByTheGap(t *testing.T) {
	l := newTestLoop(t, 1)
	l.Planned(t0, 1)
	if l.ReplanDue(t0.Add(MinReplanGapDefault-time.Millisecond), 0.5) {
		t.Fatal("asked for a plan within the gap")
	}
	if !l.ReplanDue(t0.Add(MinReplanGapDefault), 0.5) {
		t.Fatal("no plan once the gap had passed")
	}
}

// A claim's cost bound, like its item count, is never under a full packed call's worth: at 3
// req/s a quarter second of budget is 0.75 requests, one item, which could share no call.
func TestClaimRequestsAreNeverLessThanOnePackedCall(t *testing.T) {
	l := newTestLoop(t, 10)
	if got := l.ClaimRequests(3, 250*time.Millisecond); got != packing.Alone {
		t.Fatalf("claim of %v requests at 3 req/s with packs of 10, want %v (one packed call)", got, packing.Alone)
	}
	if got := l.ClaimRequests(40, 250*time.Millisecond); got != 10 {
		t.Fatalf("claim of %v requests at 40 req/s, want 10 (a quarter second)", got)
	}
	if got := newTestLoop(t, 1).ClaimRequests(3, 250*time.Millisecond); got != 0.75 {
		t.Fatalf("claim of %v requests at 3 req/s with packing off, want 0.75 (a quarter second)", got)
	}
}
