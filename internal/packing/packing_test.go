package packing

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

type row struct {
	item string
	at   time.Time
	n    int // position in the item's own history, to tell identical sales apart
}

// answer builds a packed answer the way the API might: limit per call or per item, rows of
// all items in one order (newest first) or item by item.
func answer(hist map[string][]row, asked []string, limit int, perItem, grouped bool) []row {
	var rows []row
	for _, id := range asked {
		g := hist[id] // newest first
		if perItem {
			g = g[:min(len(g), limit)]
		}
		rows = append(rows, g...)
	}
	if !grouped {
		slices.SortStableFunc(rows, func(a, b row) int { return b.at.Compare(a.at) })
	}
	if !perItem {
		rows = rows[:min(len(rows), limit)]
	}
	return rows
}

// TestCompletePartsHoldEveryNewSaleUnderEveryShape: whatever the answer's shape, an item
// judged complete has every sale newer than its newest stored one, and nothing else wrong.
func TestCompletePartsHoldEveryNewSaleUnderEveryShape(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	trusted, distrusted := 0, 0
	for round := range 3000 {
		limit := 1 + rng.IntN(30)
		perItem, grouped := round%2 == 0, round/2%2 == 0
		hist := map[string][]row{}
		stored := map[string]*time.Time{}
		var asked []string
		for i := range 1 + rng.IntN(10) {
			id := fmt.Sprintf("item%d", i)
			asked = append(asked, id)
			var h []row
			at := base
			for k := range rng.IntN(2 * limit) {
				if rng.IntN(3) > 0 { // often several sales in one second
					at = at.Add(time.Duration(rng.IntN(40)) * time.Second)
				}
				h = append(h, row{id, at, k})
			}
			slices.Reverse(h)
			hist[id] = h
			if len(h) > 0 && rng.IntN(4) > 0 {
				s := h[rng.IntN(len(h))].at
				stored[id] = &s
			}
		}
		rows := answer(hist, asked, limit, perItem, grouped)
		parts := Split(rows, func(r row) string { return r.item }, asked)
		for _, id := range asked {
			part := parts[id]
			times := make([]time.Time, len(part))
			for i, r := range part {
				times[i] = r.at
			}
			v := Sales(len(rows), limit, times, stored[id])
			if !v.Complete {
				distrusted++
				continue
			}
			trusted++
			kept := part
			if v.DropOldestSecond && len(kept) > 0 {
				oldest := kept[len(kept)-1].at
				for len(kept) > 0 && kept[len(kept)-1].at.Equal(oldest) {
					kept = kept[:len(kept)-1]
				}
			}
			for _, want := range hist[id] {
				if stored[id] != nil && !want.at.After(*stored[id]) {
					break
				}
				if !slices.Contains(kept, want) {
					t.Fatalf("round %d (per-item %v, grouped %v, limit %d, %d rows): %s judged complete but lacks sale %d at %s",
						round, perItem, grouped, limit, len(rows), id, want.n, want.at)
				}
			}
		}
	}
	if trusted == 0 || distrusted == 0 {
		t.Fatalf("trusted %d, distrusted %d: the cases do not cover both", trusted, distrusted)
	}
}

func TestAnswerExactlyAtTheLimitIsNeverTrustedBlindly(t *testing.T) {
	if ListingsComplete(400, 400) || !ListingsComplete(399, 400) {
		t.Fatal("listings: an answer at the limit may be cut; under it, never")
	}
	at := time.Date(2026, 5, 1, 0, 0, 10, 0, time.UTC)
	stored := at.Add(-time.Minute)
	if v := Sales(100, 100, []time.Time{at}, &stored); v.Complete {
		t.Fatal("sales: a full answer whose part stops after the stored sale may have lost rows between")
	}
	if v := Sales(100, 100, nil, &stored); v.Complete {
		t.Fatal("sales: an empty part of a full answer proves nothing")
	}
	if v := Sales(100, 100, []time.Time{at}, nil); v.Complete {
		t.Fatal("sales: an item with nothing stored needs its whole history")
	}
	if v := Sales(99, 100, nil, nil); !v.Complete || v.DropOldestSecond {
		t.Fatalf("sales under the limit: %+v, want complete as is", v)
	}
	if v := Sales(100, 100, []time.Time{at, stored}, &stored); !v.Complete || !v.DropOldestSecond {
		t.Fatalf("sales reaching back to the stored one: %+v, want complete without its oldest second", v)
	}
	if v := Sales(100, 100, []time.Time{stored, at}, &stored); v.Complete {
		t.Fatal("sales: a part that is not newest first proves nothing")
	}
}

func TestSplitKeepsOnlyTheIdsAskedFor(t *testing.T) {
	rows := []row{{item: "a"}, {item: "x"}, {item: "b"}, {item: "a"}}
	parts := Split(rows, func(r row) string { return r.item }, []string{"a", "b", "c"})
	if len(parts["a"]) != 2 || len(parts["b"]) != 1 || len(parts["c"]) != 0 || len(parts) != 3 {
		t.Fatalf("parts %v", parts)
	}
}

func TestSmall(t *testing.T) {
	if !Small(5, 1, 20, 5) || Small(21, 1, 20, 5) || Small(5, 5.5, 20, 5) || !Small(20, 5, 20, 5) {
		t.Fatal("small")
	}
}

func TestModelPackedCost(t *testing.T) {
	m := Model{PackSize: 10, AuctionLimit: 400, MaxListings: 100, MaxSales: 5, Listings: true, Sales: true}
	for _, tc := range []struct {
		name     string
		m        Model
		listings int
		want     float64
		packs    bool
	}{
		{"a tenth of each call", m, 5, 0.2, true},
		{"its part of the listings room when that is larger", m, 60, 2 * 60.0 / 300, true},
		{"too many listings to share", m, 101, Alone, false},
		{"packing off", Model{PackSize: 1, AuctionLimit: 400, MaxListings: 100, Listings: true, Sales: true}, 5, Alone, false},
		{"both endpoints switched off", Model{PackSize: 10, AuctionLimit: 400, MaxListings: 100}, 5, Alone, false},
		{"sales switched off: sales alone", Model{PackSize: 10, AuctionLimit: 400, MaxListings: 100, Listings: true}, 5, 1.1, true},
		{"listings switched off: listings alone", Model{PackSize: 10, AuctionLimit: 400, MaxListings: 100, Sales: true}, 5, 1.1, true},
		{"the shadow check's calls", Model{PackSize: 10, AuctionLimit: 400, MaxListings: 100, Listings: true, Sales: true, Shadow: 0.01}, 5, 0.22, true},
	} {
		got, packs := tc.m.Packed(tc.listings)
		if math.Abs(got-tc.want) > 1e-9 || packs != tc.packs {
			t.Errorf("%s: Packed(%d) = %v, %v; want %v, %v", tc.name, tc.listings, got, packs, tc.want, tc.packs)
		}
	}
	if got := m.PackedUpTo(1.0 / 60); math.Abs(got-300) > 1e-9 {
		t.Errorf("PackedUpTo(1 sale/min) = %v s, want 300 (5 sales a collection)", got)
	}
	if got := m.PackedUpTo(0); !math.IsInf(got, 1) {
		t.Errorf("PackedUpTo(0) = %v, want +Inf", got)
	}
}
