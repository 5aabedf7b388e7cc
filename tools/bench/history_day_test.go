package main

import "testing"

// The rebuilt-series check: a sale at the settle boundary counted one collection apart in the
// two runs is no difference; sales owed past the next collection, or lost, or a listing state
// that differs, are.
func TestRebuildDiffs(t *testing.T) {
	st := func(pass int, figures string, sales int32) dayState {
		return dayState{pass: pass, figures: figures, sales: sales}
	}
	for _, c := range []struct {
		name          string
		every, change []dayState
		diffs, moved  int
	}{
		{"equal, unchanged collections left out", []dayState{st(1, "a", 2), st(2, "a", 0), st(3, "b", 1)}, []dayState{st(1, "a", 2), st(3, "b", 1)}, 0, 0},
		{"a sale one collection early, both stored", []dayState{st(91, "a", 9), st(92, "a", 9)}, []dayState{st(91, "a", 10), st(92, "a", 8)}, 0, 2},
		{"a sale one collection early, the next unchanged", []dayState{st(91, "a", 1), st(92, "a", 1)}, []dayState{st(91, "a", 2)}, 0, 2},
		{"a sale owed past the next collection", []dayState{st(1, "a", 1), st(2, "a", 0), st(3, "a", 1)}, []dayState{st(1, "a", 2), st(3, "a", 0)}, 1, 2},
		{"a sale lost", []dayState{st(1, "a", 1), st(2, "a", 1)}, []dayState{st(1, "a", 1), st(2, "a", 0)}, 1, 1},
		{"another listing state", []dayState{st(1, "a", 0), st(2, "b", 0)}, []dayState{st(1, "a", 0)}, 1, 0},
	} {
		_, diffs, moved := rebuildDiffs(map[string][]dayState{"x": c.every}, map[string][]dayState{"x": c.change})
		if diffs != c.diffs || moved != c.moved {
			t.Errorf("%s: %d differences, %d moved; want %d, %d", c.name, diffs, moved, c.diffs, c.moved)
		}
	}
}
