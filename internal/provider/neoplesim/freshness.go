package neoplesim

import (
	"math"
	"net/http"
	"time"
)

// catalogRow is a GET /_sim/catalog row: the item, and its truth in the realistic market.
type catalogRow struct {
	itemRow
	*Truth `json:",omitempty"`
}

// track is what the simulator knows of one item's copy at the collector: when the last
// /df/auction and /df/auction-sold answers were served, and totals since the last stats reset.
type track struct {
	copyAt, soldAt   int64 // ms, sim time
	hasCopy, hasSold bool

	freshMs, staleMs, ageMs2 float64 // time the copy was current / not; ∫ age dt (ms²)
	fetches, soldFetches     int64
	salesSeen, salesLost     int64
	gaps                     int64 // answers after which sales had fallen out of the window unseen
}

// ItemFreshness is one item's ground truth since the last stats reset.
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

// resetTracks zeroes the totals but keeps what each copy is. Callers hold s.mu.
func (s *Server) resetTracks() {
	s.resetAt = s.opts.Now().UnixMilli()
	for _, tr := range s.tracks {
		*tr = track{copyAt: tr.copyAt, soldAt: tr.soldAt, hasCopy: tr.hasCopy, hasSold: tr.hasSold}
	}
}

func (s *Server) trackOf(id string) *track {
	tr := s.tracks[id]
	if tr == nil {
		tr = &track{}
		s.tracks[id] = tr
	}
	return tr
}

// copySpan is how the copy fared from the later of its serving and the reset up to `to`.
// Callers hold s.mu.
func (s *Server) copySpan(e *entry, tr *track, to int64) (fresh, stale, age2 float64) {
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
		if c, ok := e.nextChange(tr.copyAt); ok {
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

// observeListings records /df/auction answers served at now.
func (s *Server) observeListings(found []*entry, now time.Time) {
	if s.opts.Market != MarketRealistic {
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

// observeSales records /df/auction-sold answers served at now: rows is the page sent.
func (s *Server) observeSales(found []*entry, rows []saleRow, now time.Time) {
	if s.opts.Market != MarketRealistic {
		return
	}
	shown := map[string]int64{}
	for _, r := range rows {
		shown[r.ItemID]++
	}
	s.observeShown(found, shown, now)
}

// Observe records a collection of itemID at the simulator's now, as if /df/auction and a full
// /df/auction-sold page (limit 100) had been served, so a time-compressed replay is measured by
// the same ground truth as real requests. It reports false for an unknown item or market.
func (s *Server) Observe(itemID string) bool {
	e := s.byID[itemID]
	if e == nil || e.real == nil {
		return false
	}
	now := s.opts.Now()
	s.observeListings([]*entry{e}, now)
	// The newest 100 sales: the page holds every new sale unless more than 100 happened.
	s.observeShown([]*entry{e}, map[string]int64{itemID: 100}, now)
	return true
}

func (s *Server) observeShown(found []*entry, shown map[string]int64, now time.Time) {
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
			before = e.salesBetween(tr.soldAt, s.resetAt) // new to the collector, but before the window
		} else if tr.hasSold {
			from = tr.soldAt
		}
		k := e.salesBetween(from, t)
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

// Freshness reports the realistic market's ground truth since the last stats reset.
func (s *Server) Freshness() FreshnessReport {
	now := s.opts.Now()
	t := now.UnixMilli()
	s.mu.Lock()
	defer s.mu.Unlock()
	rep := FreshnessReport{Market: s.opts.Market, Since: time.UnixMilli(s.resetAt).UTC(), Now: now.UTC(),
		Items: make(map[string]ItemFreshness, len(s.catalog))}
	var wSum, fSum, aSum float64
	for _, e := range s.catalog {
		if e.real == nil {
			continue
		}
		tr := s.trackOf(e.ItemID)
		f, st, a := s.copySpan(e, tr, t)
		fresh, stale, age2 := tr.freshMs+f, tr.staleMs+st, tr.ageMs2+a
		it := ItemFreshness{Weight: e.real.Weight, Freshness: 1, Fetches: tr.fetches, SoldFetches: tr.soldFetches,
			SalesSeen: tr.salesSeen, SalesLost: tr.salesLost, Gaps: tr.gaps}
		if span := fresh + stale; span > 0 {
			it.Freshness = fresh / span
			it.MeanAgeSeconds = age2 / span / 1000
		}
		from := s.resetAt
		if tr.hasSold {
			from = max(from, tr.soldAt)
		}
		it.SalesPending = e.salesBetween(from, t)
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

// Truths returns each item's true rates and weight in the realistic market (nil otherwise),
// in catalog order; the oracle and the benchmark use them, the collector never does.
func (s *Server) Truths() map[string]Truth {
	if s.opts.Market != MarketRealistic {
		return nil
	}
	out := make(map[string]Truth, len(s.catalog))
	for _, e := range s.catalog {
		tr := e.real.Truth
		tr.Listings = e.listings
		out[e.ItemID] = tr
	}
	return out
}

func (s *Server) adminFreshness(w http.ResponseWriter, _ *http.Request) {
	if s.opts.Market != MarketRealistic {
		http.Error(w, "freshness needs the realistic market (Options.Market realistic)", http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, s.Freshness())
}
