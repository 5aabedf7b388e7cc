package score

import (
	"math"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
)

func TestACopyIsFreshUntilTheFirstChangeItMissed(t *testing.T) {
	m, err := market.New(market.Realistic, 5, 7)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := New(m, func() time.Time { return now })
	e := m.Items()[0]
	t0 := now.UnixMilli()
	s.ServedListings([]*market.Item{e}, now)
	c1, ok := e.NextChange(t0)
	if !ok {
		t.Fatal("no change within the look-back")
	}
	now = time.UnixMilli(c1 + 60_000)
	rep := s.Report()
	want := float64(c1-t0) / float64(c1+60_000-t0)
	if got := rep.Items[e.ItemID]; math.Abs(got.Freshness-want) > 1e-9 || got.Fetches != 1 {
		t.Errorf("item %+v, want freshness %v after one fetch", got, want)
	}
	if never := rep.Items[m.Items()[1].ItemID]; never.Freshness != 0 {
		t.Errorf("an item never served has freshness %v, want 0", never.Freshness)
	}
	s.Reset()
	if got := s.Report().Items[e.ItemID]; got.Fetches != 0 {
		t.Errorf("after Reset: %+v, want the totals zeroed", got)
	}
}

func TestTheDefaultMarketIsNotScored(t *testing.T) {
	m, err := market.New(market.Default, 3, 1)
	if err != nil {
		t.Fatal(err)
	}
	s := New(m, time.Now)
	s.ServedListings(m.Items(), time.Now())
	if s.Observe(m.Items()[0].ItemID) {
		t.Error("Observe scored an item of the default market")
	}
	if rep := s.Report(); len(rep.Items) != 0 {
		t.Errorf("report %+v, want no items", rep)
	}
}
