package partition

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

const day = 24 * time.Hour

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func tp(s string) *time.Time { t := ts(s); return &t }

func show(rs []Range) []string {
	var out []string
	for _, r := range rs {
		lo := "MIN"
		if r.Lower != nil {
			lo = r.Lower.UTC().Format("01-02T15")
		}
		out = append(out, lo+".."+r.Upper.UTC().Format("01-02T15"))
	}
	return out
}

func asParts(rs []Range) []Partition {
	var out []Partition
	for i, r := range rs {
		u := r.Upper
		out = append(out, Partition{Name: fmt.Sprint(i), Lower: r.Lower, Upper: &u})
	}
	return out
}

func TestAnEmptyTableGetsAnArchiveAndDaysAhead(t *testing.T) {
	now := ts("2026-12-02T05:30:00Z")
	got := show(planCreate(nil, now, now.Add(3*day), day))
	want := []string{"MIN..12-02T00", "12-02T00..12-03T00", "12-03T00..12-04T00", "12-04T00..12-05T00", "12-05T00..12-06T00"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestACoveredTableNeedsNothingAndOnlyTheNewDayLater(t *testing.T) {
	now := ts("2026-12-02T05:30:00Z")
	parts := asParts(planCreate(nil, now, now.Add(3*day), day))
	if got := planCreate(parts, now, now.Add(3*day), day); len(got) != 0 {
		t.Fatalf("second pass creates %v", show(got))
	}
	later := now.Add(day)
	got := show(planCreate(parts, later, later.Add(3*day), day))
	if fmt.Sprint(got) != "[12-06T00..12-07T00]" {
		t.Fatalf("a day later: %v", got)
	}
}

func TestGapsAreFilledAndAnArchiveIsRecreatedBelowTheOldest(t *testing.T) {
	now := ts("2026-12-10T12:00:00Z")
	// Retention dropped the archive and everything before 12-08; maintenance stopped on 12-09.
	parts := []Partition{
		{Name: "a", Lower: tp("2026-12-08T00:00:00Z"), Upper: tp("2026-12-09T00:00:00Z")},
		{Name: "b", Lower: tp("2026-12-09T00:00:00Z"), Upper: tp("2026-12-10T00:00:00Z")},
	}
	got := show(planCreate(parts, now, now.Add(day), day))
	want := []string{"MIN..12-08T00", "12-10T00..12-11T00", "12-11T00..12-12T00"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestAChangedIntervalFillsAroundExistingPartitions(t *testing.T) {
	now := ts("2026-12-02T05:00:00Z")
	parts := []Partition{
		{Name: "arch", Upper: tp("2026-12-02T00:00:00Z")},
		{Name: "d", Lower: tp("2026-12-02T00:00:00Z"), Upper: tp("2026-12-03T00:00:00Z")},
	}
	got := show(planCreate(parts, now, ts("2026-12-03T12:00:00Z"), 6*time.Hour))
	want := []string{"12-03T00..12-03T06", "12-03T06..12-03T12"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got %v\nwant %v", got, want)
	}
}

func TestOnlyPartitionsWhollyPastRetentionAreDropped(t *testing.T) {
	parts := asParts(planCreate(nil, ts("2026-12-01T05:00:00Z"), ts("2026-12-04T05:00:00Z"), day))
	got := planDrop(parts, ts("2026-12-02T23:59:59Z"))
	var names []string
	for _, p := range got {
		names = append(names, p.Name)
	}
	// The archive (below 12-01) and 12-01; 12-02 still holds rows newer than the cutoff.
	if fmt.Sprint(names) != "[0 1]" {
		t.Fatalf("dropped %v", names)
	}
}

func TestCoverageAheadStopsAtTheFirstGap(t *testing.T) {
	now := ts("2026-12-02T06:00:00Z")
	parts := []Partition{
		{Lower: tp("2026-12-02T00:00:00Z"), Upper: tp("2026-12-03T00:00:00Z")},
		{Lower: tp("2026-12-03T00:00:00Z"), Upper: tp("2026-12-04T00:00:00Z")},
		{Lower: tp("2026-12-05T00:00:00Z"), Upper: tp("2026-12-06T00:00:00Z")},
	}
	if got := coveredUntil(parts, now).Sub(now); got != 42*time.Hour {
		t.Fatalf("ahead %v, want 42h", got)
	}
	if got := coveredUntil(parts[2:], now); !got.Equal(now) {
		t.Fatalf("now uncovered: %v", got)
	}
	// A partition whose detach was interrupted takes no more rows: it covers nothing.
	detaching := slices.Clone(parts)
	detaching[0].DetachPending = true
	if got := coveredUntil(detaching, now); !got.Equal(now) {
		t.Fatalf("now in a partition left detaching: covered until %v, want now", got)
	}
}

// A partition whose detach was interrupted (retention's, at the old end, with the archive
// already gone) still holds its range: nothing is planned over it, so the table's creation
// pass does not fail on an overlap while FINALIZE waits.
func TestAPartitionLeftDetachingIsNotPlannedOver(t *testing.T) {
	now := ts("2026-12-02T05:30:00Z")
	parts := asParts(planCreate(nil, now.Add(-3*day), now.Add(3*day), day))[1:] // the archive dropped
	parts[0].DetachPending = true                                               // 11-29, half detached
	for _, r := range planCreate(parts, now, now.Add(3*day), day) {
		for _, p := range parts {
			if (r.Lower == nil || r.Lower.Before(*p.Upper)) && (p.Lower == nil || r.Upper.After(*p.Lower)) {
				t.Fatalf("planned %v over the partition %v..%v", show([]Range{r}), p.Lower, p.Upper)
			}
		}
	}
	if got := coveredUntil(parts, now); !got.Equal(*parts[len(parts)-1].Upper) {
		t.Fatalf("covered until %v", got)
	}
}
