package tierplan

import "slices"

// The defaults an item not observed yet is planned with while no item in the catalog has been
// observed either: a few listing changes and a couple of sales an hour, a typical traded item.
// Both are slow enough that the sales stay far inside the 100-row window even at COLD_10M.
const (
	DefaultPriorChangeRate = 3.0 / 3600 // changes per second
	DefaultPriorSalesRate  = 2.0 / 3600 // sales per second
)

// Prior is what the plan assumes of an item it has not observed yet (fewer than two
// collections, so no interval to estimate from): it is planned, and moved, like any other
// item with these rates, and settles on its own as its collections are observed.
type Prior struct {
	ChangeRate float64 // changes per second
	SalesRate  float64 // sales per second
	// Observed is how many observed items the rates are the median of; 0 means the defaults.
	Observed int
}

// PriorOf is the median change and sales rates of the observed items, the catalog's typical
// item; the defaults when none has been observed. The median, not the mean, so a few very busy
// items do not make every new item look busy.
func PriorOf(items []State) Prior {
	var changes, sales []float64
	for _, it := range items {
		if rate, known := it.Observed.ChangeRate(); known {
			changes = append(changes, rate)
			sales = append(sales, observedSalesRate(it))
		}
	}
	if len(changes) == 0 {
		return Prior{ChangeRate: DefaultPriorChangeRate, SalesRate: DefaultPriorSalesRate}
	}
	return Prior{ChangeRate: median(changes), SalesRate: median(sales), Observed: len(changes)}
}

// median sorts v in place.
func median(v []float64) float64 {
	slices.Sort(v)
	n := len(v)
	if n%2 == 1 {
		return v[n/2]
	}
	return (v[n/2-1] + v[n/2]) / 2
}
