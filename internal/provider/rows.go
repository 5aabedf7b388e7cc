package provider

import (
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"
	"time"
)

// Reasons a row is dropped at the parsing boundary: the reason label of
// collector_provider_rows_rejected_total.
const (
	RejectFutureDate  = "future_date"
	RejectAncientDate = "ancient_date"
	RejectForeignItem = "foreign_item"
	RejectBadAmount   = "bad_amount"
	// RejectDuplicate: a listing whose auctionNo came earlier in the same answer. One auction
	// is one listing; counted twice it would inflate the snapshot's count and quantity. (Equal
	// sales rows are distinct sales and are all kept.)
	RejectDuplicate = "duplicate_listing"
)

// RejectReasons lists every reason, for metrics that start at zero.
var RejectReasons = [...]string{RejectFutureDate, RejectAncientDate, RejectForeignItem, RejectBadAmount, RejectDuplicate}

// Launch is when the game opened: no sale or listing can be older.
var Launch = time.Date(2005, 1, 1, 0, 0, 0, 0, KST)

// IDSet is the item ids one call asked for.
type IDSet map[string]struct{}

// NewIDSet builds the set of requested ids.
func NewIDSet(ids ...string) IDSet {
	s := make(IDSet, len(ids))
	for _, id := range ids {
		s[id] = struct{}{}
	}
	return s
}

// Has reports whether id was asked for.
func (s IDSet) Has(id string) bool { _, ok := s[id]; return ok }

// rejectedIDs is how many dropped rows' item ids a Rejected keeps.
const rejectedIDs = 10

// Rejected is what one answer's row check dropped.
type Rejected struct {
	Reasons map[string]int // rows dropped, by reason
	ItemIDs []string       // the dropped rows' first rejectedIDs item ids, each once, in answer order
}

// Total is the number of rows dropped.
func (r Rejected) Total() int {
	n := 0
	for _, v := range r.Reasons {
		n += v
	}
	return n
}

func (r Rejected) String() string {
	parts := make([]string, 0, len(r.Reasons))
	for k, v := range r.Reasons {
		parts = append(parts, fmt.Sprintf("%d %s", v, k))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func (r *Rejected) add(reason, itemID string) {
	if r.Reasons == nil {
		r.Reasons = map[string]int{}
	}
	r.Reasons[reason]++
	// Only a few are ever told (the log names ten): a search of every one made an answer of
	// many rows of other items quadratic.
	if len(r.ItemIDs) < rejectedIDs && !slices.Contains(r.ItemIDs, itemID) {
		r.ItemIDs = append(r.ItemIDs, itemID)
	}
}

// RowCheck drops rows that cannot be true for the ids asked for: rows of another item, and
// rows dated before Launch or more than FutureTolerance after Now. One such row must never
// reach the database (a sale dated 2099 would hide every later real sale of its item).
type RowCheck struct {
	Now             time.Time
	FutureTolerance time.Duration
}

// reason is why a row of item id dated at fails the check, "" when it passes. A zero date is
// not checked here: parsing decides whether a date is required.
func (c RowCheck) reason(want IDSet, id string, at time.Time) string {
	switch {
	case !want.Has(id):
		return RejectForeignItem
	case at.IsZero():
		return ""
	case at.Before(Launch):
		return RejectAncientDate
	case at.After(c.Now.Add(c.FutureTolerance)):
		return RejectFutureDate
	}
	return ""
}

// MaxUnits is the most units one listing or sale may hold: far past any stack the game
// allows, and low enough that a day's sums of them cannot pass 64 bits.
const MaxUnits = 1 << 31

// Listings keeps the listings of the requested items registered at a possible date, of at
// most MaxUnits units whose value (units × unit price) fits in 64 bits: past it, the
// snapshot's quantity and weighted price would wrap to nonsense. A non-positive price or
// quantity passes: the API reports -1 on some rows, and the snapshot ignores them.
func (c RowCheck) Listings(rows []Listing, want IDSet) ([]Listing, Rejected) {
	seen := make(map[int64]bool, len(rows))
	return keep(rows, func(l Listing) (string, string) {
		if why := c.reason(want, l.ItemID, l.RegDate); why != "" {
			return why, l.ItemID
		}
		if l.Count > MaxUnits || l.UnitPrice > 0 && l.Count > math.MaxInt64/l.UnitPrice {
			return RejectBadAmount, l.ItemID
		}
		if l.AuctionNo != 0 { // absent: nothing to tell rows apart by
			if seen[l.AuctionNo] {
				return RejectDuplicate, l.ItemID
			}
			seen[l.AuctionNo] = true
		}
		return "", l.ItemID
	})
}

// Sales keeps the sales of the requested items sold at a possible date, of one to MaxUnits
// units at a price that is not negative, nor nothing at all. A sale of no or negative units,
// of gold for nothing, or of a value past int64 would go into the candles' volumes and
// sales_vwap (or overflow their sums and fail the item's every write until the sale aged out
// of the answer).
func (c RowCheck) Sales(rows []Sale, want IDSet) ([]Sale, Rejected) {
	return keep(rows, func(s Sale) (string, string) {
		if why := c.reason(want, s.ItemID, s.SoldAt); why != "" {
			return why, s.ItemID
		}
		if s.Count <= 0 || s.Count > MaxUnits || s.Price < 0 || s.UnitPrice < 0 || s.Price == 0 && s.UnitPrice == 0 ||
			(s.UnitPrice > 0 && s.Count > math.MaxInt64/s.UnitPrice) {
			return RejectBadAmount, s.ItemID
		}
		return "", s.ItemID
	})
}

func keep[T any](rows []T, reject func(T) (reason, itemID string)) ([]T, Rejected) {
	var rej Rejected
	var out []T // allocated at the first rejection: most answers keep every row
	for i, r := range rows {
		why, id := reject(r)
		if why == "" {
			if rej.Reasons != nil {
				out = append(out, r)
			}
			continue
		}
		if rej.Reasons == nil {
			out = append(make([]T, 0, len(rows)-1), rows[:i]...)
		}
		rej.add(why, id)
	}
	if rej.Reasons == nil {
		return rows, rej
	}
	return out, rej
}
