package market

import (
	"sort"
	"testing"
)

func TestRealisticMarketIsHeavyTailed(t *testing.T) {
	m, err := New(Realistic, 20000, 3)
	if err != nil {
		t.Fatal(err)
	}
	var ch, sa []float64
	for _, tr := range m.Truths() {
		ch = append(ch, tr.ChangesPerHour)
		sa = append(sa, tr.SalesPerHour)
	}
	sort.Float64s(ch)
	sort.Float64s(sa)
	q := func(v []float64, p float64) float64 { return v[int(p*float64(len(v)-1))] }
	if m := q(ch, 0.5); m < 1 || m > 10 {
		t.Errorf("median item changes %.2f times an hour, want a few", m)
	}
	if p := q(ch, 0.99); p < 120 {
		t.Errorf("busiest 1%% change %.0f times an hour, want several a minute", p)
	}
	if m := q(sa, 0.5) * 24; m < 1 || m > 10 {
		t.Errorf("median item sells %.2f times a day, want a few", m)
	}
	if p := q(sa, 0.99); p < 100 {
		t.Errorf("busiest 1%% sell %.0f times an hour, want hundreds", p)
	}
}

func TestUnknownMarketIsRefused(t *testing.T) {
	if _, err := New("busy", 5, 1); err == nil {
		t.Fatal(`market "busy" accepted`)
	}
	m, err := New("", 5, 1)
	if err != nil || m.Kind() != Default || m.Truths() != nil || m.Items()[0].Truth() != nil {
		t.Fatalf(`"" must be the default market, without ground truth: %v`, err)
	}
}
