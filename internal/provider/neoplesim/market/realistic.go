package market

import (
	"math"
	"time"
)

// Truth is an item's true behaviour in the realistic market; the collector never reads it.
type Truth struct {
	ChangesPerHour float64 `json:"changes_per_hour"`
	SalesPerHour   float64 `json:"sales_per_hour"`
	// Weight is how much users look at the item (views per hour in the benchmark).
	Weight float64 `json:"weight"`
	// Listings is the order book's size (each change redraws it within ± 2).
	Listings int `json:"listings"`
}

// Log-normal medians and spreads. The busiest 1 % (z ≈ 2.33) change several times a minute
// and sell hundreds of times an hour; the median item changes a few times an hour and sells a
// few times a day. Rates and weight are correlated: busy items are also looked at more.
const (
	medianChangesPerHour = 3
	sigmaChanges         = 1.9
	medianSalesPerHour   = 3.0 / 24
	sigmaSales           = 3.3
	sigmaWeight          = 1.5
	// maxSalesPerHour keeps the far tail collectable: at most ~50 sales between HOT collections.
	maxSalesPerHour = 3000
)

// realistic is the per-item state of the realistic market: rates and event bucket sizes.
type realistic struct {
	Truth
	changeRate, saleRate float64 // per millisecond
	changeBucket         int64   // ms; a bucket holds ~10 events (bounded to [1 min, 1 day])
	saleBucket           int64
}

// normal turns two hashes into a standard normal draw (Box–Muller).
func normal(a, b uint64) float64 {
	u := 1 - frac(a) // (0, 1]
	return math.Sqrt(-2*math.Log(u)) * math.Cos(2*math.Pi*frac(b))
}

func newRealistic(h uint64) *realistic {
	zc := normal(mix(h, 0xc1), mix(h, 0xc2))
	zs := 0.8*zc + 0.6*normal(mix(h, 0x51), mix(h, 0x52))
	zw := 0.6*zs + 0.8*normal(mix(h, 0x71), mix(h, 0x72))
	r := &realistic{Truth: Truth{
		ChangesPerHour: medianChangesPerHour * math.Exp(sigmaChanges*zc),
		SalesPerHour:   math.Min(medianSalesPerHour*math.Exp(sigmaSales*zs), maxSalesPerHour),
		Weight:         math.Exp(sigmaWeight * zw),
	}}
	r.changeRate = r.ChangesPerHour / 3.6e6
	r.saleRate = r.SalesPerHour / 3.6e6
	r.changeBucket = bucketFor(r.changeRate)
	r.saleBucket = bucketFor(r.saleRate)
	return r
}

func bucketFor(ratePerMs float64) int64 {
	return int64(math.Min(math.Max(10/ratePerMs, 60e3), 86400e3))
}

// events are a Poisson process's event times (ms) inside bucket b, ascending: exponential gaps
// drawn from hashes of (key, b), so any instant's past is the same on every call.
func events(key uint64, ratePerMs float64, size, b int64) []int64 {
	var out []int64
	t := float64(b * size)
	end := float64((b + 1) * size)
	for k := uint64(0); ; k++ {
		t += -math.Log(1-frac(mix(key, uint64(b), k))) / ratePerMs
		if t >= end {
			return out
		}
		out = append(out, int64(t))
	}
}

const (
	changeKey = 0xc4a6e
	saleKey   = 0x5a1e5
	// lookBack bounds how far event searches go: the market's memory, like the sales' 30 days.
	lookBack = 30 * 24 * 3600e3
)

// lastChange is the newest change at or before t (ms): its bucket and index, ok false if none
// within lookBack.
func (e *Item) lastChange(t int64) (b int64, idx int, at int64, ok bool) {
	r := e.real
	for b = floorDivInt(t, r.changeBucket); b*r.changeBucket > t-lookBack; b-- {
		ev := events(mix(e.h, changeKey), r.changeRate, r.changeBucket, b)
		for i := len(ev) - 1; i >= 0; i-- {
			if ev[i] <= t {
				return b, i, ev[i], true
			}
		}
	}
	return 0, 0, 0, false
}

// nextChange is the first change strictly after t (ms); ok false if none within lookBack.
func (e *Item) NextChange(t int64) (int64, bool) {
	r := e.real
	for b := floorDivInt(t, r.changeBucket); b*r.changeBucket <= t+lookBack; b++ {
		for _, x := range events(mix(e.h, changeKey), r.changeRate, r.changeBucket, b) {
			if x > t {
				return x, true
			}
		}
	}
	return 0, false
}

// salesBetween counts the sales in (from, to] (ms).
func (e *Item) SalesBetween(from, to int64) int64 {
	return countEvents(mix(e.h, saleKey), e.real.saleRate, e.real.saleBucket, from, to)
}

func countEvents(key uint64, ratePerMs float64, size, from, to int64) int64 {
	var n int64
	for b := floorDivInt(from, size); b*size <= to; b++ {
		for _, x := range events(key, ratePerMs, size, b) {
			if x > from && x <= to {
				n++
			}
		}
	}
	return n
}

// realListings is the order book as of the item's last change: it stays the same until the next.
func (e *Item) realListings(now time.Time) []Listing {
	b, idx, at, ok := e.lastChange(now.UnixMilli())
	if !ok {
		return e.book(0, now.Unix()-lookBack/1000, e.base)
	}
	return e.book(mix(changeKey, uint64(b), uint64(idx)), at/1000, e.priceAt(at/1000))
}

// realSales are the newest limit sales at or before now within the last 30 days, newest first.
func (e *Item) realSales(now time.Time, limit int) []Sale {
	r := e.real
	t := now.UnixMilli()
	out := []Sale{}
	for b := floorDivInt(t, r.saleBucket); b*r.saleBucket > t-lookBack && len(out) < limit; b-- {
		ev := events(mix(e.h, saleKey), r.saleRate, r.saleBucket, b)
		for i := len(ev) - 1; i >= 0 && len(out) < limit; i-- {
			if ev[i] > t || ev[i] <= t-lookBack {
				continue
			}
			hh := mix(e.h, saleKey, uint64(b), uint64(i))
			sec := ev[i] / 1000
			count := int64(1)
			if e.stack {
				count = 1 + int64(hh>>32%200)
			}
			unit := int64(max(e.priceAt(sec)*(0.97+frac(hh)*0.06), 1))
			out = append(out, Sale{SoldDate: kst(time.Unix(sec, 0)), ItemRow: e.Row(), Count: count, Price: unit * count, UnitPrice: unit})
		}
	}
	return out
}

func floorDivInt(a, b int64) int64 {
	q := a / b
	if a%b != 0 && (a < 0) != (b < 0) {
		q--
	}
	return q
}
