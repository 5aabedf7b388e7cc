package neoplesim

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"time"
)

// Stats is what the simulator has seen since New or ResetStats.
type Stats struct {
	Requests    int64                `json:"requests"`    // every /df request
	Paths       map[string]int64     `json:"paths"`       // by route, e.g. /df/auction; unknown paths are "other"
	Keys        map[string]KeyStats  `json:"keys"`        // by KeyLabel, never the key
	Items       map[string]ItemStats `json:"items"`       // by requested item id, known or not
	Maintenance int64                `json:"maintenance"` // answered 503 DNF980
	Faults      int64                `json:"faults"`      // faults injected
}

// KeyStats counts the requests that carried one key.
type KeyStats struct {
	Total        int64 `json:"total"`
	MaxPerSecond int64 `json:"max_per_second"` // most requests received in one wall-clock second
	RateLimited  int64 `json:"rate_limited"`   // answered API002 (429 or 400, Options.RateLimitStatus)
}

// ItemStats counts requests naming one item, per endpoint.
type ItemStats struct {
	Auction     int64 `json:"auction"`
	AuctionSold int64 `json:"auction_sold"`
	Item        int64 `json:"item"` // /df/items/{itemId}
}

// KeyLabel is how a key appears in Stats: a short sha256 prefix.
func KeyLabel(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:4])
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.stats
	out.Paths = clone(s.stats.Paths)
	out.Keys = clone(s.stats.Keys)
	out.Items = clone(s.stats.Items)
	return out
}

// KeyStats returns the counters of one key.
func (s *Server) KeyStats(key string) KeyStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.Keys[KeyLabel(key)]
}

// ItemRequests is how many /df/auction requests named itemID.
func (s *Server) ItemRequests(itemID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.stats.Items[itemID].Auction)
}

// ResetStats zeroes every counter. The second in progress keeps its count, so the busiest
// second after a reset counts every request of each second it saw, not only those after it.
func (s *Server) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = Stats{Paths: map[string]int64{}, Keys: map[string]KeyStats{}, Items: map[string]ItemStats{}}
	if s.seconds == nil {
		s.seconds, s.arrivals = map[string]*secondCount{}, map[string][]time.Time{}
	}
	s.scorer.Reset()
}

func clone[M ~map[K]V, K comparable, V any](m M) M {
	out := make(M, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// countKey records a request that arrived at for the per-key totals and the busiest wall-clock
// second, and wakes the waits it satisfies. Callers hold s.mu.
func (s *Server) countKey(key string, at time.Time) {
	sec := at.Unix()
	label := KeyLabel(key)
	c := s.seconds[label]
	if c == nil {
		c = &secondCount{}
		s.seconds[label] = c
	}
	if c.sec != sec {
		c.sec, c.n = sec, 0
	}
	c.n++
	ks := s.stats.Keys[label]
	ks.Total++
	ks.MaxPerSecond = max(ks.MaxPerSecond, c.n)
	s.stats.Keys[label] = ks
	arr := append(s.arrivals[label], at)
	if len(arr) > 2*arrivalsKept {
		arr = append(arr[:0], arr[len(arr)-arrivalsKept:]...)
	}
	s.arrivals[label] = arr
	s.waiters = slices.DeleteFunc(s.waiters, func(w *waiter) bool {
		if w.label != label || at.Before(w.after) || ks.Total < w.total {
			return false
		}
		w.ch <- at
		return true
	})
}

// waiter is a test's wait for the requests carrying one key: it hears the arrival time of the
// first request that both arrives at or after after and brings the key's total since the last
// ResetStats to total.
type waiter struct {
	label string
	after time.Time
	total int64
	ch    chan time.Time
}

// Served delivers the arrival time of the request that brings the requests carrying key since
// the last ResetStats to n (at once, with the current time, if they are there already), so a
// test waits for traffic instead of for time to pass.
func (s *Server) Served(key string, n int64) <-chan time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &waiter{label: KeyLabel(key), total: n, ch: make(chan time.Time, 1)}
	if s.stats.Keys[w.label].Total >= n {
		w.ch <- time.Now()
		return w.ch
	}
	s.waiters = append(s.waiters, w)
	return w.ch
}

// arrivalsKept is how many of a key's latest arrival times NextRequest can look back over.
const arrivalsKept = 4096

// NextRequest delivers the arrival time of the first request carrying key that arrives at or
// after after, even one that arrived before the call (among the key's latest arrivalsKept): a
// test learns when traffic resumed, and whether anything came before, without sleeping
// through the quiet, however late it asks.
func (s *Server) NextRequest(key string, after time.Time) <-chan time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	w := &waiter{label: KeyLabel(key), after: after, ch: make(chan time.Time, 1)}
	if i := slices.IndexFunc(s.arrivals[w.label], func(at time.Time) bool { return !at.Before(after) }); i >= 0 {
		w.ch <- s.arrivals[w.label][i]
		return w.ch
	}
	s.waiters = append(s.waiters, w)
	return w.ch
}

func (s *Server) countItem(id string, f func(*ItemStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats.Items[id]
	f(&st)
	s.stats.Items[id] = st
}
