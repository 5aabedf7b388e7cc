package neoplesim

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
)

// Defaults of the Options a zero value leaves unset (Now defaults to time.Now, Market to
// market.Default).
const (
	DefaultItems           = 50
	DefaultItemKey         = "sim-item-key"
	DefaultMarketKey       = "sim-market-key"
	DefaultRateLimitStatus = http.StatusTooManyRequests
	DefaultItemIDsLimit    = LimitPerCall
	DefaultItemIDsOrder    = OrderMerged
)

// Options configures a Server. A zero field takes its Default… value; Rate 0 is unlimited.
type Options struct {
	Items     int
	Seed      int64
	ItemKey   string
	MarketKey string
	Rate      float64       // requests per second per key (burst: one second's worth); 0 = unlimited
	Latency   time.Duration // added to every /df request; the initial Faults.Latency
	// Now drives the market data (prices, listings, sales). Rate limiting and per-second
	// stats always use the wall clock, since that is what a client's limiter works in.
	Now func() time.Time
	// Market is market.Default or market.Realistic.
	Market string
	// RateLimitStatus is the HTTP status of the rate-limit answer: 429 or 400, since the real
	// one is unknown.
	RateLimitStatus int
	// ItemIDsLimit says what limit caps in an itemIds answer: LimitPerCall (the whole answer)
	// or LimitPerItem (each item's rows). The real API does not document it.
	ItemIDsLimit string
	// ItemIDsOrder orders an itemIds answer: OrderMerged (one order over every item's rows) or
	// OrderGrouped (item by item in the order asked, each in the endpoint's order).
	ItemIDsOrder string
	// NotFoundAPI001: an itemName search that finds nothing answers 400 API001
	// NOT_FOUND_SEARCH_VALUE, as some real answers do, instead of {"rows":[]}.
	NotFoundAPI001 bool
	// KoreanMessages: error messages are Korean sentences, as some real answers are.
	KoreanMessages bool
}

// The shapes an itemIds answer can take (Options.ItemIDsLimit, Options.ItemIDsOrder).
const (
	LimitPerCall = "per-call"
	LimitPerItem = "per-item"
	OrderMerged  = "merged"
	OrderGrouped = "grouped"
)

// Validate refuses values the simulator cannot serve, naming the option (and its collector-dev sim
// flag) and what it allows; it changes nothing. New panics on what it refuses.
func (o Options) Validate() error {
	var errs []string
	bad := func(option, flag string, v any, allowed string) {
		errs = append(errs, fmt.Sprintf("%s %v (--%s): %s", option, v, flag, allowed))
	}
	if o.Items < 0 {
		bad("Items", "items", o.Items, fmt.Sprintf("must be 0 or more (0: %d)", DefaultItems))
	}
	if !(o.Rate >= 0) || math.IsInf(o.Rate, 0) {
		bad("Rate", "rate", o.Rate, "requests per second per key, a finite number ≥ 0 (0: unlimited)")
	}
	if o.Latency < 0 {
		bad("Latency", "latency", o.Latency, "must be 0 or more")
	}
	if _, err := market.Parse(o.Market); err != nil {
		bad("Market", "market", fmt.Sprintf("%q", o.Market), fmt.Sprintf("allowed %s, %s", market.Default, market.Realistic))
	}
	switch o.RateLimitStatus {
	case 0, http.StatusTooManyRequests, http.StatusBadRequest:
	default:
		bad("RateLimitStatus", "rate-limit-status", o.RateLimitStatus, "allowed 400, 429")
	}
	switch o.ItemIDsLimit {
	case "", LimitPerCall, LimitPerItem:
	default:
		bad("ItemIDsLimit", "itemids-limit", fmt.Sprintf("%q", o.ItemIDsLimit), fmt.Sprintf("allowed %s, %s", LimitPerCall, LimitPerItem))
	}
	switch o.ItemIDsOrder {
	case "", OrderMerged, OrderGrouped:
	default:
		bad("ItemIDsOrder", "itemids-order", fmt.Sprintf("%q", o.ItemIDsOrder), fmt.Sprintf("allowed %s, %s", OrderMerged, OrderGrouped))
	}
	if len(errs) > 0 {
		return fmt.Errorf("simulator options: %s", strings.Join(errs, "; "))
	}
	return nil
}

// withDefaults fills each zero field with its default.
func (o Options) withDefaults() Options {
	if o.Items == 0 {
		o.Items = DefaultItems
	}
	if o.ItemKey == "" {
		o.ItemKey = DefaultItemKey
	}
	if o.MarketKey == "" {
		o.MarketKey = DefaultMarketKey
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.Market, _ = market.Parse(o.Market)
	if o.RateLimitStatus == 0 {
		o.RateLimitStatus = DefaultRateLimitStatus
	}
	if o.ItemIDsLimit == "" {
		o.ItemIDsLimit = DefaultItemIDsLimit
	}
	if o.ItemIDsOrder == "" {
		o.ItemIDsOrder = DefaultItemIDsOrder
	}
	return o
}
