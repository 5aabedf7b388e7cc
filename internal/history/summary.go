package history

import (
	"sort"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
)

// Summarize reduces /df/auction rows to a snapshot's State; full says the
// answer reached its row cap, so listings past it were cut off. Rows with a non-positive unit price or quantity are
// ignored: the API reports price -1 on some rows and such a row says nothing about the market.
func Summarize(rows []provider.Listing, full bool) State {
	s := State{Truncated: full}
	prices := make([]int64, 0, len(rows))
	var weightedSum float64
	for _, r := range rows {
		if r.UnitPrice <= 0 || r.Count <= 0 {
			continue
		}
		prices = append(prices, r.UnitPrice)
		s.Quantity += r.Count
		weightedSum += float64(r.UnitPrice) * float64(r.Count)
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
	weighted := weightedSum / float64(s.Quantity)
	s.Lowest, s.Median, s.Weighted = &lowest, &median, &weighted
	return s
}

// SequenceSales keys each sale by (second, position within that second). The API has no sale
// id and identical rows are real separate sales, so position is the only identity there is:
// a re-fetch that sees the same sales yields the same keys and the insert ignores them.
//
// Rows come newest first. When the response is full (its limit reached) the oldest second in it
// may be cut off part-way, which would shift positions, so that second is left out; it was fully
// visible in an earlier fetch. A response that is one single second is kept whole.
func SequenceSales(rows []provider.Sale, full bool) []Sale {
	if len(rows) == 0 {
		return nil
	}
	chrono := make([]provider.Sale, len(rows))
	for i, r := range rows {
		chrono[len(rows)-1-i] = r
	}
	sort.SliceStable(chrono, func(i, j int) bool { return chrono[i].SoldAt.Before(chrono[j].SoldAt) })
	start := 0
	if full {
		oldest := chrono[0].SoldAt.Truncate(time.Second)
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

// NewSales keeps the sales not stored yet: those after the newest second already stored, and
// in that second those past the positions stored (known of them). Positions within a second
// are the sales' keys and always stored from 0 up, so this is exactly what the insert would
// find new, known before anything is written.
func NewSales(rows []Sale, lastStored *time.Time, known int32) []Sale {
	if lastStored == nil {
		return rows
	}
	out := rows[:0]
	for _, r := range rows {
		if r.SoldAt.After(*lastStored) || (r.SoldAt.Equal(*lastStored) && r.Seq >= known) {
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
