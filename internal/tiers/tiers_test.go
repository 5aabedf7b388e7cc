package tiers

import (
	"fmt"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Tier
		err  bool
	}{
		{"HOT_1M", Hot, false},
		{"hot_1m", Hot, false},
		{" DORMANT ", Dormant, false},
		{"COLD_10M", Cold, false},
		{"LUKEWARM", "", true},
		{"", "", true},
	} {
		got, err := Parse(tc.in)
		if (err != nil) != tc.err || got != tc.want {
			t.Errorf("Parse(%q) = %q, %v; want %q, err=%v", tc.in, got, err, tc.want, tc.err)
		}
	}
}

func TestIntervals(t *testing.T) {
	want := map[Tier]time.Duration{Hot: time.Minute, Active: 3 * time.Minute, Warm: 5 * time.Minute, Cold: 10 * time.Minute}
	for tier, d := range want {
		got, ok := tier.Interval()
		if !ok || got != d {
			t.Errorf("%s interval = %v, %v; want %v", tier, got, ok, d)
		}
	}
	if _, ok := Dormant.Interval(); ok {
		t.Error("DORMANT must have no interval")
	}
	if _, ok := NextDue("x", Dormant, time.Now()); ok {
		t.Error("DORMANT must never be due")
	}
}

func TestNextSlotIsOnPhaseAndAtLeastHalfAnInterval(t *testing.T) {
	base := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, tier := range []Tier{Hot, Active, Warm, Cold} {
		iv, _ := tier.Interval()
		for i := 0; i < 500; i++ {
			id := fmt.Sprintf("item-%d", i)
			after := base.Add(time.Duration(i) * 7919 * time.Millisecond)
			next, ok := NextDue(id, tier, after)
			if !ok {
				t.Fatal("not ok")
			}
			gap := next.Sub(after)
			if gap < iv/2 || gap >= iv/2+iv {
				t.Fatalf("%s %s: gap %v outside [%v, %v)", tier, id, gap, iv/2, iv/2+iv)
			}
			if got := time.Duration(next.UnixNano() % int64(iv)); got != Phase(id, iv) {
				t.Fatalf("%s %s: slot offset %v, want phase %v", tier, id, got, Phase(id, iv))
			}
		}
	}
}

func TestScheduleDoesNotDrift(t *testing.T) {
	// Collected a little late every time, the item still stays on its slots.
	id := "785e56a0ed4e3efd573da1f56a45217d"
	iv, _ := Hot.Interval()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	first, _ := NextDue(id, Hot, at)
	due := first
	for i := 1; i <= 100; i++ {
		collected := due.Add(1500 * time.Millisecond) // lag
		next, _ := NextDue(id, Hot, collected)
		if want := first.Add(time.Duration(i) * iv); !next.Equal(want) {
			t.Fatalf("collection %d: next %v, want %v (drift)", i, next, want)
		}
		due = next
	}
}

func TestLateItemSkipsMissedSlotsInsteadOfBursting(t *testing.T) {
	id := "abc"
	iv, _ := Hot.Interval()
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	due, _ := NextDue(id, Hot, at)
	collected := due.Add(10 * iv) // an outage: 10 slots missed
	next, _ := NextDue(id, Hot, collected)
	if gap := next.Sub(collected); gap < iv/2 {
		t.Fatalf("after an outage the next collection is %v later; want >= %v", gap, iv/2)
	}
}

// 10,000 HOT items added together: no second of the interval holds more than 1.5x the mean.
func TestPhaseSpreadsItemsAddedTogether(t *testing.T) {
	iv, _ := Hot.Interval()
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	const n = 10000
	perSecond := map[int64]int{}
	for i := 0; i < n; i++ {
		next, _ := NextDue(fmt.Sprintf("%032x", i*7919), Hot, now)
		perSecond[next.Unix()]++
	}
	mean := float64(n) / iv.Seconds()
	max := 0
	for _, c := range perSecond {
		if c > max {
			max = c
		}
	}
	if float64(max) > 1.5*mean {
		t.Fatalf("busiest second holds %d items, mean %.1f (> 1.5x)", max, mean)
	}
}

func TestFloorDiv(t *testing.T) {
	for _, tc := range [][3]int64{{7, 2, 3}, {-7, 2, -4}, {-8, 2, -4}, {0, 5, 0}} {
		if got := floorDiv(tc[0], tc[1]); got != tc[2] {
			t.Errorf("floorDiv(%d,%d) = %d, want %d", tc[0], tc[1], got, tc[2])
		}
	}
}
