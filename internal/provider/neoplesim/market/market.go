// Package market is the simulator's market model and its ground truth: a catalog of items and,
// for every item, its order book and sales as a pure function of (seed, item, time). The
// realistic market also knows each item's true change and sale rates and can count the events
// between two instants, which is what freshness is scored against (package score). The
// collector never reads any of it; neoplesim serves the rows in the API's shape.
package market

import (
	"fmt"
	"time"
)

// Kinds of market the simulator can serve.
const (
	// Default redraws every item's listings every minute and sells in fixed slots.
	Default = "default"
	// Realistic gives each item its own listing-change rate, sale rate and user weight,
	// heavy-tailed (log-normal), with changes and sales at deterministic Poisson event times,
	// so freshness can be measured against ground truth.
	Realistic = "realistic"
)

// Parse accepts "" (the default), "default" or "realistic".
func Parse(s string) (string, error) {
	switch s {
	case "", Default:
		return Default, nil
	case Realistic:
		return Realistic, nil
	}
	return "", fmt.Errorf("unknown market %q (allowed: %s, %s)", s, Default, Realistic)
}

// Market is a catalog of items and how they trade. It is read-only after New and safe for
// concurrent use.
type Market struct {
	kind  string
	items []*Item
	byID  map[string]*Item
}

// New builds the market of kind (Default or Realistic) with n items; the same seed and n give
// the same items, in the same order, trading the same way.
func New(kind string, n int, seed int64) (*Market, error) {
	kind, err := Parse(kind)
	if err != nil {
		return nil, err
	}
	m := &Market{kind: kind, items: buildCatalog(n, seed), byID: make(map[string]*Item, n)}
	for _, e := range m.items {
		m.byID[e.ItemID] = e
		if kind == Realistic {
			e.real = newRealistic(e.h)
		}
	}
	return m, nil
}

// Kind is Default or Realistic.
func (m *Market) Kind() string { return m.kind }

// Items are the catalog, in the same order for the same seed and size.
func (m *Market) Items() []*Item { return m.items }

// Item is the item with the given id, or nil.
func (m *Market) Item(id string) *Item { return m.byID[id] }

// Events counts an item's listing changes and sales in (from, to] in the realistic market; ok
// is false for an unknown item or the default market. Tests and benchmarks use it as ground truth.
func (m *Market) Events(itemID string, from, to time.Time) (changes, sales int64, ok bool) {
	e := m.byID[itemID]
	if e == nil || e.real == nil {
		return 0, 0, false
	}
	f, t := from.UnixMilli(), to.UnixMilli()
	return countEvents(mix(e.h, changeKey), e.real.changeRate, e.real.changeBucket, f, t), e.SalesBetween(f, t), true
}

// Truths returns each item's true rates, weight and order-book size in the realistic market
// (nil otherwise); the oracle and the benchmark use them, the collector never does.
func (m *Market) Truths() map[string]Truth {
	if m.kind != Realistic {
		return nil
	}
	out := make(map[string]Truth, len(m.items))
	for _, e := range m.items {
		tr := e.real.Truth
		tr.Listings = e.listings
		out[e.ItemID] = tr
	}
	return out
}

// Truth is the item's true rates and weight in the realistic market (its Listings left 0),
// nil in the default market.
func (e *Item) Truth() *Truth {
	if e.real == nil {
		return nil
	}
	return &e.real.Truth
}
