package history

import (
	"testing"
	"time"
)

func p64(v int64) *int64                { return &v }
func pf(v float64) *float64             { return &v }
func at(min int) time.Time              { return time.Date(2026, 12, 2, 10, min, 0, 0, time.UTC) }
func written(s State, min int) *Written { return &Written{State: s, At: at(min)} }

var base = State{Count: 3, Quantity: 7, Lowest: p64(100), Median: p64(120), Weighted: pf(115.5), APIAverage: p64(110)}

func TestFirstCollectionAlwaysWrites(t *testing.T) {
	for _, every := range []bool{false, true} {
		if got := (Policy{Every: every, Heartbeat: time.Hour}).Decide(nil, base, 0, at(0)); got != First {
			t.Errorf("every=%v: %q, want first", every, got)
		}
	}
}

func TestEveryFieldASnapshotStoresIsAChange(t *testing.T) {
	p := Policy{Heartbeat: time.Hour}
	last := written(base, 0)
	changed := map[string]func(*State){
		"count":       func(s *State) { s.Count++ },
		"quantity":    func(s *State) { s.Quantity++ },
		"lowest":      func(s *State) { s.Lowest = p64(99) },
		"lowest gone": func(s *State) { s.Lowest = nil },
		"median":      func(s *State) { s.Median = p64(121) },
		"weighted":    func(s *State) { s.Weighted = pf(115.25) },
		"api average": func(s *State) { s.APIAverage = nil },
		"truncated":   func(s *State) { s.Truncated = true },
	}
	for name, change := range changed {
		cur := base
		change(&cur)
		if got := p.Decide(last, cur, 0, at(1)); got != Change {
			t.Errorf("%s changed: %q, want change", name, got)
		}
	}
	same := base
	same.Lowest, same.Weighted = p64(100), pf(115.5) // equal values behind other pointers
	if got := p.Decide(last, same, 0, at(1)); got != Skip {
		t.Errorf("same market: %q, want skip", got)
	}
	if got := p.Decide(last, same, 2, at(1)); got != Change {
		t.Errorf("new sales: %q, want change", got)
	}
}

func TestHeartbeatWritesAnUnchangedMarketOnceItIsDue(t *testing.T) {
	p := Policy{Heartbeat: time.Hour}
	last := written(base, 0)
	if got := p.Decide(last, base, 0, at(59)); got != Skip {
		t.Errorf("59 min after: %q, want skip", got)
	}
	if got := p.Decide(last, base, 0, at(60)); got != Heartbeat {
		t.Errorf("60 min after: %q, want heartbeat", got)
	}
}

func TestEveryModeWritesRepeats(t *testing.T) {
	p := Policy{Every: true, Heartbeat: time.Hour}
	if got := p.Decide(written(base, 0), base, 0, at(1)); got != Repeat {
		t.Errorf("%q, want repeat", got)
	}
}
