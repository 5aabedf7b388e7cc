// Package packing decides, purely, when an item's part of a packed (itemIds) answer can be
// trusted. The API does not say whether limit counts per call or per item, nor how rows of
// several items are ordered, so every rule here holds whatever the real semantics are: a part
// that may have been cut is never called complete, and the caller fetches that item alone.
//
// No database, no clock, no HTTP.
package packing

import "time"

// Split groups rows by item id, each item's rows in answer order. Rows of ids not asked for
// are dropped and counted: a packed answer must never put one item's rows under another.
func Split[R any](rows []R, itemID func(R) string, asked []string) (parts map[string][]R, foreign int) {
	parts = make(map[string][]R, len(asked))
	for _, id := range asked {
		parts[id] = nil
	}
	for _, r := range rows {
		id := itemID(r)
		if _, ok := parts[id]; !ok {
			foreign++
			continue
		}
		parts[id] = append(parts[id], r)
	}
	return parts, foreign
}

// ListingsComplete reports whether every item's listings are whole in a packed /df/auction
// answer of answerRows rows: only when the whole answer has fewer rows than the limit. Under
// either meaning of limit nothing was cut then; at the limit any item may have lost rows.
func ListingsComplete(answerRows, limit int) bool { return answerRows < limit }

// SalesVerdict is what may be taken from one item's part of a packed /df/auction-sold answer.
type SalesVerdict struct {
	// Complete: every sale of the item newer than its newest stored one is in the part.
	Complete bool
	// DropOldestSecond: the part's oldest second may have been cut part-way (positions
	// within a second are sales' keys), so its rows must not be stored from this answer.
	DropOldestSecond bool
}

// Sales judges one item's part of a packed /df/auction-sold answer of answerRows rows; part
// holds the soldDate of each of the item's rows in answer order, newestStored the item's newest
// stored sale (nil when it has none).
//
// The part is complete when the whole answer has fewer rows than the limit, or when the part
// reaches back to the newest stored sale and is newest first: a cut then only dropped rows
// older than the oldest one kept, so every newer sale is inside. An empty part of a full
// answer, an item with nothing stored, or a part in any other order proves nothing.
func Sales(answerRows, limit int, part []time.Time, newestStored *time.Time) SalesVerdict {
	if answerRows < limit {
		return SalesVerdict{Complete: true}
	}
	if len(part) == 0 || newestStored == nil {
		return SalesVerdict{}
	}
	for i := 1; i < len(part); i++ {
		if part[i].After(part[i-1]) {
			return SalesVerdict{}
		}
	}
	if part[len(part)-1].After(*newestStored) {
		return SalesVerdict{}
	}
	return SalesVerdict{Complete: true, DropOldestSecond: true}
}

// Small reports whether an item's recent answers were small enough to share a call: at most
// maxListings listings last time and at most maxSales new sales per collection on average.
func Small(listings int, salesPerCollection float64, maxListings int, maxSales float64) bool {
	return listings <= maxListings && salesPerCollection <= maxSales
}

// Groups cuts ids into calls of at most size ids, in order.
func Groups(ids []string, size int) [][]string {
	size = max(size, 1)
	var out [][]string
	for len(ids) > 0 {
		n := min(size, len(ids))
		out = append(out, ids[:n:n])
		ids = ids[n:]
	}
	return out
}
