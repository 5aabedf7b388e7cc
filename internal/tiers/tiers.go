// Package tiers knows the collection tiers, their intervals and when an item is next due.
// It is pure: no clock, no database. Callers pass "now", which comes from the database.
package tiers

import (
	"fmt"
	"hash/fnv"
	"strings"
	"time"
)

// Tier is a collection tier as stored in tracked_items.collection_tier.
type Tier string

const (
	Hot     Tier = "HOT_1M"
	Active  Tier = "ACTIVE_3M"
	Warm    Tier = "WARM_5M"
	Cold    Tier = "COLD_10M"
	Dormant Tier = "DORMANT"
)

// All lists the tiers from the most to the least frequently collected.
func All() []Tier { return []Tier{Hot, Active, Warm, Cold, Dormant} }

// Scheduled lists the tiers that have an interval (every one but DORMANT), most frequent first:
// what can be pinned, planned or reactivated to.
func Scheduled() []Tier { return All()[:len(All())-1] }

// Names is the list of valid tier names, for error messages.
func Names() string { return join(All()) }

// ScheduledNames is Scheduled's names, for error messages.
func ScheduledNames() string { return join(Scheduled()) }

func join(ts []Tier) string {
	var b strings.Builder
	for i, t := range ts {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(string(t))
	}
	return b.String()
}

// Parse accepts a tier name (case-insensitive).
func Parse(s string) (Tier, error) {
	t := Tier(strings.ToUpper(strings.TrimSpace(s)))
	if _, ok := intervals[t]; ok || t == Dormant {
		return t, nil
	}
	return "", fmt.Errorf("unknown tier %q (allowed: %s)", s, Names())
}

var intervals = map[Tier]time.Duration{
	Hot:    60 * time.Second,
	Active: 180 * time.Second,
	Warm:   300 * time.Second,
	Cold:   600 * time.Second,
}

// Interval is the tier's collection interval; ok is false for DORMANT (never scheduled).
func (t Tier) Interval() (d time.Duration, ok bool) {
	d, ok = intervals[t]
	return d, ok
}

// Rank orders tiers by urgency: 0 for HOT_1M up to 4 for DORMANT.
func (t Tier) Rank() int {
	for i, x := range All() {
		if x == t {
			return i
		}
	}
	return len(All())
}

// Phase is the item's stable offset within an interval. Hashing the id (as Prometheus does
// for scrape targets) spreads items that were added together evenly over the interval, and
// keeps each item on the same slot forever, so schedules neither drift nor bunch up.
//
// Phases are whole milliseconds so that slots survive a round trip through PostgreSQL's
// microsecond timestamps unchanged.
func Phase(itemID string, interval time.Duration) time.Duration {
	ms := uint64(interval / time.Millisecond)
	if ms == 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(itemID))
	return time.Duration(h.Sum64()%ms) * time.Millisecond
}

// NextSlot is the first time on the item's phase grid that is at least interval/2 after
// `after`. Requiring half an interval means two collections of one item are never closer
// than that, even when a late collection lands just before the next slot; an item that
// fell behind skips missed slots instead of bursting to catch up.
func NextSlot(itemID string, interval time.Duration, after time.Time) time.Time {
	phase := Phase(itemID, interval)
	// Round up to the millisecond grid the slots live on.
	earliest := after.Add(interval / 2).Add(time.Millisecond - 1).Truncate(time.Millisecond).UnixNano()
	i := int64(interval)
	p := int64(phase)
	k := floorDiv(earliest-p, i)
	slot := k*i + p
	if slot < earliest {
		slot += i
	}
	return time.Unix(0, slot).UTC()
}

// NextDue is when an item of tier t, last collected (or attempted) at `after`, is due next;
// ok is false for DORMANT, whose next_collect_at is NULL.
func NextDue(itemID string, t Tier, after time.Time) (next time.Time, ok bool) {
	iv, ok := t.Interval()
	if !ok {
		return time.Time{}, false
	}
	return NextSlot(itemID, iv, after), true
}

func floorDiv(a, b int64) int64 {
	q := a / b
	if (a%b != 0) && ((a < 0) != (b < 0)) {
		q--
	}
	return q
}
