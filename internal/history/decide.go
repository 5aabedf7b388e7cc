// Package history decides what a collection stores and publishes, and keeps the history
// tables it lands in: change-only snapshots with a heartbeat, time-partitioned
// auction_snapshots and auction_sales whose old days are dropped whole, and price candles
// kept beside them.
//
// A snapshot holds from its collected_at until the next snapshot of the same item: in
// "changes" mode a collection that saw the same market as the last snapshot written writes
// nothing but the item's seen-at time, so the series rebuilt from the stored rows equals the
// series of every collection.
package history

import (
	"fmt"
	"time"

	"github.com/duecollector/duecollector/internal/config"
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
