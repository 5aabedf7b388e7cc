// Package history decides what a collection stores and publishes, and keeps the history
// tables it lands in: change-only snapshots with a heartbeat, time-partitioned
// auction_snapshots and auction_sales whose old days are dropped whole, and price candles
// kept beside them.
//
// A snapshot holds from its collected_at until the next snapshot of the same item: in
// "changes" mode a collection that saw the same market as the last snapshot written writes
// nothing but the item's seen-at time, so the series rebuilt from the stored rows equals the
// series of every collection.
//
// A write-back comes here whole: Summarize, SequenceSales and NewSales turn the provider's rows
// into a State and the sales to store, Rows decides what each claimed item's row records (its
// schedule, outcome, market and change counts, which catalog.WriteBack writes in one fenced
// statement) and WriteItems stores what the collections still ours bring.
package history

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/provider"
)

// State is what a snapshot says about an item's listings. Two collections with equal States
// and no new sales saw the same market.
type State struct {
	Count      int
	Quantity   int64
	Lowest     *int64
	Median     *int64
	Weighted   *float64
	APIAverage *int64
	// Truncated: the answer reached the API's row cap, so the figures describe only the
	// cheapest rows it returned.
	Truncated bool
}

// Equal compares every field a snapshot stores.
func (s State) Equal(o State) bool {
	return s.Count == o.Count && s.Quantity == o.Quantity && s.Truncated == o.Truncated &&
		eqPtr(s.Lowest, o.Lowest) && eqPtr(s.Median, o.Median) && eqPtr(s.Weighted, o.Weighted) &&
		eqPtr(s.APIAverage, o.APIAverage)
}

func eqPtr[T comparable](a, b *T) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// Written is the last snapshot stored for an item: its state and when it was collected.
type Written struct {
	State State
	At    time.Time
}

// Reason says why a snapshot was written; Skip means none is.
type Reason string

// Reasons, as events and the reason column carry them.
const (
	Skip      Reason = ""
	First     Reason = "first"     // no snapshot was written for the item before
	Change    Reason = "change"    // the listings differ from the last snapshot, or new sales arrived
	Heartbeat Reason = "heartbeat" // unchanged, but the last snapshot is history.heartbeat old
	Repeat    Reason = "repeat"    // unchanged, written because history.mode is every
)

// Policy is history.mode, history.heartbeat and outbox.enabled.
type Policy struct {
	// Every writes a snapshot for every collection (history.mode every).
	Every     bool
	Heartbeat time.Duration
	// NoOutbox writes snapshots without their events (outbox.enabled false). Negative so that
	// a Policy nobody set this on publishes: only the operator's explicit word turns events off.
	NoOutbox bool
}

// FromConfig is history.mode, history.heartbeat and outbox.enabled.
func FromConfig(c *config.Config) Policy {
	return Policy{Every: c.History.Mode == config.HistoryEvery, Heartbeat: c.History.Heartbeat, NoOutbox: !c.Outbox.Enabled}
}

// Validate refuses a policy that would never write a heartbeat.
func (p Policy) Validate() error {
	if p.Heartbeat <= 0 {
		return fmt.Errorf("history heartbeat %v: must be > 0", p.Heartbeat)
	}
	return nil
}

// Decide says whether a collection at `at` that saw cur and newSales new sales writes a
// snapshot, given the last one written (nil: none yet).
func (p Policy) Decide(last *Written, cur State, newSales int, at time.Time) Reason {
	switch {
	case last == nil:
		return First
	case newSales > 0 || !cur.Equal(last.State):
		return Change
	case at.Sub(last.At) >= p.Heartbeat:
		return Heartbeat
	case p.Every:
		return Repeat
	}
	return Skip
}

// Summarize reduces /df/auction rows to a snapshot's State; full says the
// answer reached its row cap, so listings past it were cut off. Rows with a non-positive unit price or quantity are
// ignored: the API reports price -1 on some rows and such a row says nothing about the market.
func Summarize(rows []provider.Listing, full bool) State {
	s := State{Truncated: full}
	prices := make([]int64, 0, len(rows))
	var weightedSum, units float64 // in floats: the weighted price divides the true total
	for _, r := range rows {
		if r.UnitPrice <= 0 || r.Count <= 0 {
			continue
		}
		prices = append(prices, r.UnitPrice)
		// Saturating: each row fits (provider.RowCheck), their sum need not.
		if s.Quantity > math.MaxInt64-r.Count {
			s.Quantity = math.MaxInt64
		} else {
			s.Quantity += r.Count
		}
		weightedSum += float64(r.UnitPrice) * float64(r.Count)
		units += float64(r.Count)
		if s.APIAverage == nil && r.AveragePrice > 0 {
			v := r.AveragePrice
			s.APIAverage = &v
		}
	}
	s.Count = len(prices)
	if s.Count == 0 {
		return s
	}
	sort.Slice(prices, func(i, j int) bool { return prices[i] < prices[j] })
	lowest, median := prices[0], prices[(len(prices)-1)/2]
	weighted := weightedSum / units
	s.Lowest, s.Median, s.Weighted = &lowest, &median, &weighted
	return s
}

// SequenceSales keys each sale by (second, position within that second). The API has no sale
// id and identical rows are real separate sales, so position is the only identity there is:
// a re-fetch that sees the same sales yields the same keys and the insert ignores them.
//
// Rows come newest first. When the response is full (its limit reached) the oldest second in it
// may be cut off part-way, which would shift positions. If that second is at or before the
// newest one stored (stored), it is left out: its positions there are already taken, and an
// earlier fetch saw it whole. If it is newer, what the page shows of it is kept: no later page
// can show it again (newer sales push it further out), so leaving it out would lose those
// sales for good, and their shifted keys can never meet the true ones. A response that is one
// single second is kept whole.
func SequenceSales(rows []provider.Sale, full bool, stored *time.Time) []Sale {
	if len(rows) == 0 {
		return nil
	}
	chrono := make([]provider.Sale, len(rows))
	for i, r := range rows {
		chrono[len(rows)-1-i] = r
	}
	sort.SliceStable(chrono, func(i, j int) bool { return chrono[i].SoldAt.Before(chrono[j].SoldAt) })
	start := 0
	if oldest := chrono[0].SoldAt.Truncate(time.Second); full && stored != nil && !oldest.After(*stored) {
		for start < len(chrono) && chrono[start].SoldAt.Truncate(time.Second).Equal(oldest) {
			start++
		}
		if start == len(chrono) {
			start = 0
		}
	}
	out := make([]Sale, 0, len(chrono)-start)
	var cur time.Time
	var seq int32
	for _, r := range chrono[start:] {
		sec := r.SoldAt.Truncate(time.Second)
		if !sec.Equal(cur) {
			cur, seq = sec, 0
		}
		qty := r.Count
		unit := r.UnitPrice
		if unit <= 0 && qty > 0 {
			unit = r.Price / qty
		}
		out = append(out, Sale{SoldAt: sec, Seq: seq, Quantity: qty, UnitPrice: unit, Total: r.Price})
		seq++
	}
	return out
}

// SalesGap reports whether sales were lost between two fetches: a full /df/auction-sold page
// (as sent: rows the row check dropped still filled it) whose oldest kept sale is newer than
// the newest sale already stored. With no sale stored, the
// item's last collection bounds what was seen (its page was empty); before the first
// collection there is nothing to compare with. skew is how far the provider's clock is ahead
// of the database's (the answer's Date less the caller's time: provider.Answer.AnsweredAt), which
// puts the last collection, on the database's clock, on the sales' own.
func SalesGap(rows []provider.Sale, full bool, lastStored, lastCollected *time.Time, skew time.Duration) bool {
	if lastStored == nil && lastCollected != nil {
		// That collection saw its page whole but left its newest seconds for later
		// (history.Settled): those were not seen for good.
		settled := Settled(lastCollected.Add(skew))
		lastStored = &settled
	}
	if lastStored == nil || !full || len(rows) == 0 {
		return false
	}
	oldest := rows[0].SoldAt
	for _, r := range rows[1:] {
		if r.SoldAt.Before(oldest) {
			oldest = r.SoldAt
		}
	}
	return oldest.Truncate(time.Second).After(*lastStored)
}

// SalesSettle is how recent a sale's second may be for it to be stored: the provider orders a
// second's sales by unit price, not time, so a second still under way when its page was read
// can gain a sale in the middle of it, shifting the positions that key its sales; stored
// then, the second would keep a wrong price for good. It is counted on the provider's clock,
// which dates the sales (provider.Answer.AnsweredAt), and covers the answer's own time; a
// held-back sale is stored by the item's next collection (a sale dated later still, even in
// the future, waits until it is not: it cannot move last_sale_at ahead of the real sales and
// hide them).
const SalesSettle = 5 * time.Second

// Settled is the second from which a sales page answered at `at` holds its sales back
// (SalesSettle).
func Settled(at time.Time) time.Time { return at.Add(-SalesSettle).Truncate(time.Second) }

// NewSales keeps the sales not stored yet: those after the newest second already stored, and
// in that second those past the positions stored (known of them); of those, only the ones
// before openFrom (Settled: newer seconds may still change). Positions within a second are
// the sales' keys and always stored from 0 up, so this is exactly what the insert would find
// new, known before anything is written.
func NewSales(rows []Sale, lastStored *time.Time, known int32, openFrom time.Time) []Sale {
	out := rows[:0]
	for _, r := range rows {
		if !r.SoldAt.Before(openFrom) {
			continue
		}
		if lastStored == nil || r.SoldAt.After(*lastStored) || (r.SoldAt.Equal(*lastStored) && r.Seq >= known) {
			out = append(out, r)
		}
	}
	return out
}

// lastSecondOf is the newest second among sales and how many of its positions they fill (the
// item's new last_sale_at and last_second_sales when they are stored); nil without sales.
func lastSecondOf(sales []Sale) (*time.Time, int32) {
	var last *time.Time
	var n int32
	for i := range sales {
		switch s := &sales[i]; {
		case last == nil || s.SoldAt.After(*last):
			last, n = &s.SoldAt, s.Seq+1
		case s.SoldAt.Equal(*last):
			n = max(n, s.Seq+1)
		}
	}
	return last, n
}
