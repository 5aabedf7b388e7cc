package neoplesim

import (
	"encoding/json"
	"math"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/score"
)

type marketFixture struct {
	sim *Server
	srv *httptest.Server
	now time.Time
}

func newMarket(t *testing.T, items int) *marketFixture {
	t.Helper()
	f := &marketFixture{now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
	f.sim = New(Options{Items: items, Seed: 7, Market: market.Realistic, Now: func() time.Time { return f.now }})
	f.srv = httptest.NewServer(f.sim)
	t.Cleanup(f.srv.Close)
	return f
}

func (f *marketFixture) get(t *testing.T, path string, q url.Values, into any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+path+"?"+q.Encode(), nil)
	req.Header.Set("apikey", DefaultMarketKey)
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
		t.Fatal(err)
	}
}

type rowsBody struct {
	Rows []map[string]any `json:"rows"`
}

func (f *marketFixture) listings(t *testing.T, id string) []map[string]any {
	var b rowsBody
	f.get(t, "/df/auction", url.Values{"itemId": {id}, "limit": {"400"}}, &b)
	return b.Rows
}

func (f *marketFixture) sales(t *testing.T, id string) []map[string]any {
	var b rowsBody
	f.get(t, "/df/auction-sold", url.Values{"itemId": {id}, "limit": {"100"}}, &b)
	return b.Rows
}

func TestRealisticListingsChangeOnlyAtChangeEvents(t *testing.T) {
	f := newMarket(t, 30)
	other := New(Options{Items: 30, Seed: 7, Market: market.Realistic, Now: func() time.Time { return f.now }})
	e := f.sim.market.Items()[0]
	start := f.now.UnixMilli()
	c1, ok := e.NextChange(start)
	if !ok {
		t.Fatal("no change within the look-back")
	}
	before := f.listings(t, e.ItemID)
	f.now = time.UnixMilli(c1 - 1)
	if got := f.listings(t, e.ItemID); !slices.EqualFunc(got, before, equalJSON) {
		t.Fatal("listings changed before the item's next change event")
	}
	x, _ := json.Marshal(other.market.Item(e.ItemID).Listings(f.now))
	y, _ := json.Marshal(e.Listings(f.now))
	if string(x) != string(y) {
		t.Fatal("two simulators with the same seed disagree at the same time")
	}
	f.now = time.UnixMilli(c1)
	if got := f.listings(t, e.ItemID); slices.EqualFunc(got, before, equalJSON) && len(before) > 0 {
		t.Fatal("listings did not change at the change event")
	}
}

func equalJSON(a, b map[string]any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestFreshnessIsTheTimeTheCopyStayedCurrent(t *testing.T) {
	f := newMarket(t, 10)
	e := f.sim.market.Items()[1]
	t0 := f.now.UnixMilli()
	f.listings(t, e.ItemID)
	c1, _ := e.NextChange(t0)
	// Query well after the first missed change: fresh until c1, stale (and ageing) after.
	f.now = time.UnixMilli(c1 + 60_000)
	var rep score.FreshnessReport
	f.get(t, "/_sim/freshness", nil, &rep)
	got := rep.Items[e.ItemID]
	span := float64(c1 + 60_000 - t0)
	if want := float64(c1-t0) / span; math.Abs(got.Freshness-want) > 1e-9 {
		t.Errorf("freshness %v, want %v", got.Freshness, want)
	}
	if want := 60.0 * 60 / 2 / (span / 1000); math.Abs(got.MeanAgeSeconds-want) > 1e-6 {
		t.Errorf("mean age %v s, want %v", got.MeanAgeSeconds, want)
	}
	if never := rep.Items[f.sim.market.Items()[2].ItemID]; never.Freshness != 0 {
		t.Errorf("an item never fetched has freshness %v, want 0", never.Freshness)
	}
	// Fetching again at the query time makes the copy current again; totals keep the past.
	f.listings(t, e.ItemID)
	f.get(t, "/_sim/freshness", nil, &rep)
	if g := rep.Items[e.ItemID]; math.Abs(g.Freshness-got.Freshness) > 1e-9 || g.Fetches != 2 {
		t.Errorf("after a second fetch: %+v", g)
	}
	var w, fw float64
	for _, it := range rep.Items {
		w += it.Weight
		fw += it.Weight * it.Freshness
	}
	if math.Abs(rep.Freshness-fw/w) > 1e-9 {
		t.Errorf("weighted freshness %v, want %v", rep.Freshness, fw/w)
	}
}

func TestLostSalesAreCountedAsGaps(t *testing.T) {
	f := newMarket(t, 2000)
	var e *market.Item
	for _, x := range f.sim.market.Items() {
		if x.Truth().SalesPerHour > 600 {
			e = x
			break
		}
	}
	if e == nil {
		t.Fatal("no busy seller in the catalog")
	}
	f.sales(t, e.ItemID)
	t0 := f.now.UnixMilli()
	// Long enough for well over 100 sales.
	gap := int64(3 * 100 / e.Truth().SalesPerHour * 3.6e6)
	f.now = time.UnixMilli(t0 + gap)
	rows := f.sales(t, e.ItemID)
	happened := e.SalesBetween(t0, t0+gap)
	var rep score.FreshnessReport
	f.get(t, "/_sim/freshness", nil, &rep)
	got := rep.Items[e.ItemID]
	if len(rows) != 100 || got.Gaps != 1 || got.SalesLost != happened-100 || got.SalesSeen != 100 {
		t.Fatalf("%d sales happened, page %d: %+v; want 1 gap, %d lost, 100 seen", happened, len(rows), got, happened-100)
	}
	// A fetch soon after loses nothing.
	f.now = f.now.Add(time.Second)
	f.sales(t, e.ItemID)
	f.get(t, "/_sim/freshness", nil, &rep)
	if g := rep.Items[e.ItemID]; g.Gaps != 1 || g.SalesLost != got.SalesLost {
		t.Fatalf("a fetch one second later: %+v", g)
	}
	if rep.SalesCoverage >= 1 {
		t.Errorf("coverage %v with lost sales", rep.SalesCoverage)
	}
}

func TestStatsResetStartsANewFreshnessWindow(t *testing.T) {
	f := newMarket(t, 5)
	e := f.sim.market.Items()[0]
	f.listings(t, e.ItemID)
	c1, _ := e.NextChange(f.now.UnixMilli())
	f.now = time.UnixMilli(c1 + 1000)
	f.sim.ResetStats()
	f.now = f.now.Add(time.Minute)
	var rep score.FreshnessReport
	f.get(t, "/_sim/freshness", nil, &rep)
	if g := rep.Items[e.ItemID]; g.Freshness != 0 || g.Fetches != 0 {
		t.Errorf("after reset, a copy already stale stays stale and fetches restart: %+v", g)
	}
}

func TestDefaultMarketHasNoGroundTruth(t *testing.T) {
	s := New(Options{Items: 5})
	srv := httptest.NewServer(s)
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL + "/_sim/freshness")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("default market /_sim/freshness: %s", resp.Status)
	}
	var cat struct {
		Rows []map[string]any `json:"rows"`
	}
	r2, err := srv.Client().Get(srv.URL + "/_sim/catalog")
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Body.Close()
	_ = json.NewDecoder(r2.Body).Decode(&cat)
	if _, ok := cat.Rows[0]["weight"]; ok {
		t.Error("default market catalog shows a weight")
	}
	real := New(Options{Items: 5, Market: market.Realistic})
	srv2 := httptest.NewServer(real)
	defer srv2.Close()
	r3, err := srv2.Client().Get(srv2.URL + "/_sim/catalog")
	if err != nil {
		t.Fatal(err)
	}
	defer r3.Body.Close()
	_ = json.NewDecoder(r3.Body).Decode(&cat)
	if _, ok := cat.Rows[0]["changes_per_hour"]; !ok {
		t.Errorf("realistic catalog row lacks the truth: %v", cat.Rows[0])
	}
}
