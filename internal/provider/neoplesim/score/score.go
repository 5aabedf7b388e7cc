// Package score measures what a client collected against the market's ground truth: for each
// item, the fraction of time its copy (the last /df/auction answer served) was current, its
// mean age, and the sales that fell out of the 100-row window before any /df/auction-sold
// answer showed them. Only the realistic market has a ground truth to score against.
package score

import (
	"math"
	"sync"
	"time"

	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
)

// track is what is known of one item's copy at the collector: when the last /df/auction and
// /df/auction-sold answers were served, and totals since the last reset.
type track struct {
	copyAt, soldAt   int64 // ms, sim time
	hasCopy, hasSold bool

	freshMs, staleMs, ageMs2 float64 // time the copy was current / not; ∫ age dt (ms²)
	fetches, soldFetches     int64
	salesSeen, salesLost     int64
	gaps                     int64 // answers after which sales had fallen out of the window unseen
}

// ItemFreshness is one item's ground truth since the last reset.
type ItemFreshness struct {
	Weight         float64 `json:"weight"`
	Freshness      float64 `json:"freshness"`        // fraction of the time the copy was current
	MeanAgeSeconds float64 `json:"mean_age_seconds"` // mean time since the first change the copy missed
	Fetches        int64   `json:"fetches"`          // /df/auction answers served
	SoldFetches    int64   `json:"sold_fetches"`     // /df/auction-sold answers served
	SalesSeen      int64   `json:"sales_seen"`       // sales that appeared in a served answer
	SalesLost      int64   `json:"sales_lost"`       // sales that left the 100-row window before any fetch
	SalesPending   int64   `json:"sales_pending"`    // sales since the last fetch (neither yet)
	Gaps           int64   `json:"gaps"`             // fetches that came after lost sales
}

// FreshnessReport is GET /_sim/freshness: per item and weighted over the catalog.
type FreshnessReport struct {
	Market        string                   `json:"market"`
	Since         time.Time                `json:"since"`
	Now           time.Time                `json:"now"`
	Freshness     float64                  `json:"freshness"`        // weighted by the items' weights
	MeanAge       float64                  `json:"mean_age_seconds"` // weighted
	SalesCoverage float64                  `json:"sales_coverage"`   // seen ÷ (seen + lost); 1 when none
	SalesSeen     int64                    `json:"sales_seen"`
	SalesLost     int64                    `json:"sales_lost"`
	SalesPending  int64                    `json:"sales_pending"`
	Gaps          int64                    `json:"gaps"`
	Items         map[string]ItemFreshness `json:"items"`
}

// Scorer keeps each item's copy and its totals since the last reset; it is safe for concurrent use.
type Scorer struct {
	m   *market.Market
	now func() time.Time // the market's clock

	mu      sync.Mutex
	tracks  map[string]*track
	resetAt int64 // market time of the last reset, ms
}

// New starts scoring m from now().
func New(m *market.Market, now func() time.Time) *Scorer {
	return &Scorer{m: m, now: now, tracks: map[string]*track{}, resetAt: now().UnixMilli()}
}

// Reset zeroes the totals but keeps what each copy is.
func (s *Scorer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetAt = s.now().UnixMilli()
	for _, tr := range s.tracks {
		*tr = track{copyAt: tr.copyAt, soldAt: tr.soldAt, hasCopy: tr.hasCopy, hasSold: tr.hasSold}
	}
}

func (s *Scorer) trackOf(id string) *track {
	tr := s.tracks[id]
	if tr == nil {
		tr = &track{}
		s.tracks[id] = tr
	}
	return tr
}

// copySpan is how the copy fared from the later of its serving and the reset up to `to`.
// Callers hold s.mu.
func (s *Scorer) copySpan(e *market.Item, tr *track, to int64) (fresh, stale, age2 float64) {
	start := s.resetAt
	if tr.hasCopy {
		start = max(start, tr.copyAt)
	}
	if to <= start {
		return 0, 0, 0
	}
	missed := float64(start) // no copy at all: stale, aged from the start of the window
	if tr.hasCopy {
		missed = math.Inf(1)
		if c, ok := e.NextChange(tr.copyAt); ok {
			missed = float64(c)
		}
	}
	fresh = math.Max(math.Min(missed, float64(to))-float64(start), 0)
	if a := math.Max(missed, float64(start)); a < float64(to) {
		stale = float64(to) - a
		age2 = (math.Pow(float64(to)-missed, 2) - math.Pow(a-missed, 2)) / 2
	}
	return fresh, stale, age2
}

// ServedListings records /df/auction answers served at now.
func (s *Scorer) ServedListings(found []*market.Item, now time.Time) {
	if s.m.Kind() != market.Realistic {
		return
	}
	t := now.UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range found {
		tr := s.trackOf(e.ItemID)
		if tr.hasCopy && t <= tr.copyAt {
			continue // an answer overtaken by a newer one
		}
		f, st, a := s.copySpan(e, tr, t)
		tr.freshMs, tr.staleMs, tr.ageMs2 = tr.freshMs+f, tr.staleMs+st, tr.ageMs2+a
		tr.copyAt, tr.hasCopy = t, true
		tr.fetches++
	}
}

// ServedSales records /df/auction-sold answers served at now: rows is the page sent.
func (s *Scorer) ServedSales(found []*market.Item, rows []market.Sale, now time.Time) {
	if s.m.Kind() != market.Realistic {
		return
	}
	shown := map[string]int64{}
	for _, r := range rows {
		shown[r.ItemID]++
	}
	s.servedShown(found, shown, now)
}

// Observe records a collection of itemID at the market's now, as if /df/auction and a full
// /df/auction-sold page (limit 100) had been served, so a time-compressed replay is measured by
// the same ground truth as real requests. It reports false for an unknown item or market.
func (s *Scorer) Observe(itemID string) bool {
	e := s.m.Item(itemID)
	if e == nil || e.Truth() == nil {
		return false
	}
	now := s.now()
	s.ServedListings([]*market.Item{e}, now)
	// The newest 100 sales: the page holds every new sale unless more than 100 happened.
	s.servedShown([]*market.Item{e}, map[string]int64{itemID: 100}, now)
	return true
}

func (s *Scorer) servedShown(found []*market.Item, shown map[string]int64, now time.Time) {
	t := now.UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range found {
		tr := s.trackOf(e.ItemID)
		if tr.hasSold && t <= tr.soldAt {
			continue
		}
		from, before := s.resetAt, int64(0)
		if tr.hasSold && tr.soldAt < from {
			from = tr.soldAt
			before = e.SalesBetween(tr.soldAt, s.resetAt) // new to the collector, but before the window
		} else if tr.hasSold {
			from = tr.soldAt
		}
		k := e.SalesBetween(from, t)
		lost := max(0, k-shown[e.ItemID]) // the oldest of the new sales are the ones past the window
		lostIn := max(0, lost-before)
		tr.salesLost += lostIn
		tr.salesSeen += k - before - lostIn
		if lostIn > 0 {
			tr.gaps++
		}
		tr.soldAt, tr.hasSold = t, true
		tr.soldFetches++
	}
}

// Report is the realistic market's ground truth since the last reset.
func (s *Scorer) Report() FreshnessReport {
	now := s.now()
	t := now.UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	items := s.m.Items()
	rep := FreshnessReport{Market: s.m.Kind(), Since: time.UnixMilli(s.resetAt).UTC(), Now: now.UTC(),
		Items: make(map[string]ItemFreshness, len(items))}
	var wSum, fSum, aSum float64
	for _, e := range items {
		truth := e.Truth()
		if truth == nil {
			continue
		}
		tr := s.trackOf(e.ItemID)
		f, st, a := s.copySpan(e, tr, t)
		fresh, stale, age2 := tr.freshMs+f, tr.staleMs+st, tr.ageMs2+a
		it := ItemFreshness{Weight: truth.Weight, Freshness: 1, Fetches: tr.fetches, SoldFetches: tr.soldFetches,
			SalesSeen: tr.salesSeen, SalesLost: tr.salesLost, Gaps: tr.gaps}
		if span := fresh + stale; span > 0 {
			it.Freshness = fresh / span
			it.MeanAgeSeconds = age2 / span / 1000
		}
		from := s.resetAt
		if tr.hasSold {
			from = max(from, tr.soldAt)
		}
		it.SalesPending = e.SalesBetween(from, t)
		rep.Items[e.ItemID] = it
		wSum += it.Weight
		fSum += it.Weight * it.Freshness
		aSum += it.Weight * it.MeanAgeSeconds
		rep.SalesSeen += it.SalesSeen
		rep.SalesLost += it.SalesLost
		rep.SalesPending += it.SalesPending
		rep.Gaps += it.Gaps
	}
	if wSum > 0 {
		rep.Freshness, rep.MeanAge = fSum/wSum, aSum/wSum
	}
	rep.SalesCoverage = 1
	if n := rep.SalesSeen + rep.SalesLost; n > 0 {
		rep.SalesCoverage = float64(rep.SalesSeen) / float64(n)
	}
	return rep
}
