// Package packing decides, purely, when an item's part of a packed (itemIds) answer can be
// trusted. The API does not say whether limit counts per call or per item, nor how rows of
// several items are ordered, so every rule here holds whatever the real semantics are: a part
// that may have been cut is never called complete, and the caller fetches that item alone.
//
// No database, no clock, no HTTP.
package packing

import (
	"math"
	"time"
)

// What makes an item small enough to pack, and how many packed items are checked alone: fixed
// by the API's limits and the shadow check's cost, not by a deployment (no configuration key).
const (
	// MaxListingsDefault: at most this many listings in the item's last answer.
	MaxListingsDefault = 100
	// MaxSalesDefault: at most this many new sales per collection.
	MaxSalesDefault = 5.0
	// ShadowFractionDefault of packed items are fetched alone as well and compared.
	ShadowFractionDefault = 0.01
)

// Split groups rows by item id, each item's rows in answer order, with a part (maybe empty)
// for each id asked for and none for any other: a packed answer can never put one item's rows
// under another. The client's row check has already dropped, counted and logged rows of ids
// not asked for (provider.RejectForeignItem); one that reached here would be dropped.
func Split[R any](rows []R, itemID func(R) string, asked []string) map[string][]R {
	parts := make(map[string][]R, len(asked))
	for _, id := range asked {
		parts[id] = nil
	}
	for _, r := range rows {
		id := itemID(r)
		if part, ok := parts[id]; ok {
			parts[id] = append(part, r)
		}
	}
	return parts
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
// answer, an item with nothing stored, or a part in any other order proves nothing. The second
// rule trusts the order single answers have (newest first, the spec says): a packed answer
// sorted otherwise, whose part only happens to be newest first, is for the shadow check to
// catch.
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

// Model is how the dispatcher shares calls, for predicting what one collection costs: the
// budget planner and the demand figures count requests with it, not a flat two per item.
type Model struct {
	PackSize     int     // ids per call (collect.pack_size); 1 = packing off
	AuctionLimit int     // rows a /df/auction answer holds (provider.auction_limit)
	MaxListings  int     // MaxListingsDefault
	MaxSales     float64 // MaxSalesDefault: new sales per collection
	Shadow       float64 // ShadowFractionDefault: packed items also fetched alone
	// Listings and Sales are the endpoints' cluster-wide switches (packing_state).
	Listings, Sales bool
}

// Alone is what one collection costs when the item has its own calls: /df/auction and
// /df/auction-sold.
const Alone = 2.0

// GroupListings is how many listings (as last seen) one packed call's items may add up to: 3/4
// of the answer's limit, room for the market to grow before the answer is cut.
func GroupListings(auctionLimit int) int { return 3 * auctionLimit / 4 }

// Packed is the expected requests one collection of an item with listings listings last time
// costs when it shares calls, and false when it cannot share them (packing off, or too many
// listings). The item takes its share of each packed call: 1/PackSize of it, or its part of
// the call's listings room when that is larger; the shadow check adds its own calls.
// Whether its sales are few enough at a given interval is the caller's (PackedUpTo).
func (m Model) Packed(listings int) (float64, bool) {
	if m.PackSize <= 1 || !(m.Listings || m.Sales) || listings < 0 || listings > m.MaxListings {
		return Alone, false
	}
	share := 1 / float64(m.PackSize)
	if room := GroupListings(m.AuctionLimit); room > 0 {
		share = max(share, float64(listings)/float64(room))
	}
	c := 2 * share
	if !m.Listings {
		c = 1 + share
	}
	if !m.Sales {
		c = 1 + share
	}
	return min(c+m.Shadow*Alone, Alone), true
}

// PackedUpTo is the longest collection interval, in seconds, at which an item selling
// salesPerSecond still shares calls (at most MaxSales new sales per collection); +Inf when it
// sells nothing.
func (m Model) PackedUpTo(salesPerSecond float64) float64 {
	if !(salesPerSecond > 0) {
		return math.Inf(1)
	}
	return m.MaxSales / salesPerSecond
}
