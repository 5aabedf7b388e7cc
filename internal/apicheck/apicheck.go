// Package apicheck finds out, with a handful of gently paced requests, how the live market API
// behaves where its documentation is silent: whether the apikey header is accepted, whether
// itemIds works on each endpoint, whether limit counts per call or per item, how rows of
// several items are ordered, and (only when asked to provoke one) what a rate-limit answer
// looks like. The collector is safe whatever the answers; the check says what to configure.
package apicheck

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
)

// Config is one check. BaseURL, Key and two or more ItemIDs (items with listings and sales)
// are required.
type Config struct {
	BaseURL string
	Key     string // the market key; never printed
	ItemIDs []string
	Pace    time.Duration // between requests; default 500ms
	Burst   int           // requests sent at once to provoke a rate-limit answer; 0 = do not
}

// Endpoint is what was learned about one market endpoint.
type Endpoint struct {
	ItemIDs bool   // an itemIds call was answered with rows of several items
	Limit   string // "per-call", "per-item" or "unknown"
	Order   string // "merged", "grouped" or "unknown"
	Note    string // why something is unknown
}

// Report is what the check found.
type Report struct {
	HeaderKey, QueryKey bool
	Auction, Sold       Endpoint
	RateLimit           string // e.g. "HTTP 429 API002 (APIKEY_LIMIT_EXCEEDED)", or why it is unknown
	Requests            int
}

// Run performs the check.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if cfg.BaseURL == "" || cfg.Key == "" || len(cfg.ItemIDs) < 2 || len(cfg.ItemIDs) > provider.MaxItemIDs {
		return Report{}, fmt.Errorf("api-check needs a base URL, the market key and 2 to %d item ids", provider.MaxItemIDs)
	}
	if cfg.Pace <= 0 {
		cfg.Pace = 500 * time.Millisecond
	}
	var rep Report
	client := func(keyIn string, limit int) (*provider.Client, error) {
		return provider.NewClient(provider.ClientConfig{Workload: provider.WorkloadMarket, BaseURL: cfg.BaseURL,
			Key: cfg.Key, KeyIn: keyIn, AuctionLimit: limit, SoldLimit: min(limit, provider.MaxSoldLimit)})
	}
	pace := func() error {
		rep.Requests++
		t := time.NewTimer(cfg.Pace)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	id := cfg.ItemIDs[0]
	for _, in := range []string{"header", "query"} {
		c, err := client(in, 1)
		if err != nil {
			return rep, err
		}
		_, err = c.Auction(ctx, id)
		if err := pace(); err != nil {
			return rep, err
		}
		if err != nil && provider.ClassOf(err) != provider.ClassConfig {
			return rep, fmt.Errorf("single-item call with the key in the %s: %w", in, err)
		}
		if in == "header" {
			rep.HeaderKey = err == nil
		} else {
			rep.QueryKey = err == nil
		}
	}
	keyIn := "header"
	if !rep.HeaderKey {
		if !rep.QueryKey {
			return rep, errors.New("the key was refused both in the apikey header and in the query: check NEOPLE_MARKET_API_KEY")
		}
		keyIn = "query"
	}
	ids := cfg.ItemIDs
	// limit=1 tells per-call (1 row) from per-item (one row per item with rows).
	one, err := client(keyIn, 1)
	if err != nil {
		return rep, err
	}
	full, err := client(keyIn, provider.MaxAuctionLimit)
	if err != nil {
		return rep, err
	}
	l1, err1 := one.AuctionMany(ctx, ids)
	if err := pace(); err != nil {
		return rep, err
	}
	lf, errf := full.AuctionMany(ctx, ids)
	if err := pace(); err != nil {
		return rep, err
	}
	rep.Auction = judge(err1, errf, len(l1.Rows), provider.MaxAuctionLimit, idsOf(lf.Rows, func(l provider.Listing) string { return l.ItemID }),
		slices.IsSortedFunc(lf.Rows, func(a, b provider.Listing) int { return compare(a.UnitPrice, b.UnitPrice) }), ids)
	s1, err1 := one.AuctionSoldMany(ctx, ids)
	if err := pace(); err != nil {
		return rep, err
	}
	sf, errf := full.AuctionSoldMany(ctx, ids)
	if err := pace(); err != nil {
		return rep, err
	}
	rep.Sold = judge(err1, errf, len(s1.Rows), provider.MaxSoldLimit, idsOf(sf.Rows, func(s provider.Sale) string { return s.ItemID }),
		slices.IsSortedFunc(sf.Rows, func(a, b provider.Sale) int { return b.SoldAt.Compare(a.SoldAt) }), ids)

	rep.RateLimit = "not provoked (no burst of requests was asked for)"
	if cfg.Burst > 0 {
		rep.RateLimit = provoke(ctx, full, id, cfg.Burst, &rep.Requests)
	}
	return rep, nil
}

func compare(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func idsOf[T any](rows []T, id func(T) string) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = id(r)
	}
	return out
}

// judge reads one endpoint's two packed answers: rows1 rows at limit=1, and the item id of
// every row (in order) at the full limit, sorted telling whether they are in one order.
func judge(err1, errFull error, rows1, limit int, rowIDs []string, sorted bool, asked []string) Endpoint {
	e := Endpoint{Limit: "unknown", Order: "unknown"}
	if err1 != nil || errFull != nil {
		e.Note = "itemIds refused: " + errors.Join(err1, errFull).Error()
		return e
	}
	distinct := map[string]bool{}
	for _, id := range rowIDs {
		distinct[id] = true
	}
	if len(distinct) == 1 && len(rowIDs) == limit && rowIDs[0] == asked[0] {
		// The first item asked for filled the whole answer: limit counts per call, and the
		// rows come item by item (or that item's rows all sort first).
		e.ItemIDs, e.Limit, e.Order = true, "per-call", "grouped"
		e.Note = "the first item filled the answer; grouped unless its rows all sort before the others"
		return e
	}
	e.ItemIDs = len(distinct) >= 2
	if !e.ItemIDs {
		e.Note = "the answer held rows of fewer than two of the items: pick items that all have listings and sales"
		return e
	}
	switch {
	case rows1 == 1:
		e.Limit = "per-call"
	case rows1 >= 2:
		e.Limit = "per-item"
	}
	runs := 1
	for i := 1; i < len(rowIDs); i++ {
		if rowIDs[i] != rowIDs[i-1] {
			runs++
		}
	}
	switch {
	case runs > len(distinct) && sorted:
		e.Order = "merged"
	case runs == len(distinct) && !sorted:
		e.Order = "grouped"
	default:
		e.Note = "rows of the items did not interleave, so merged and grouped look alike"
	}
	return e
}

// provoke sends n requests at once and describes the first rate-limit answer among them.
func provoke(ctx context.Context, c *provider.Client, id string, n int, requests *int) string {
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := c.Auction(ctx, id)
			errs <- err
		}()
	}
	found := ""
	for range n {
		*requests++
		if pe, ok := provider.RateLimitAnswer(<-errs); ok && found == "" {
			found = fmt.Sprintf("HTTP %d %s (%s)", pe.Status, pe.Code, pe.Message)
		}
	}
	if found == "" {
		return fmt.Sprintf("none among %d requests sent at once", n)
	}
	return found
}

func (r Report) String() string {
	var b strings.Builder
	yes := map[bool]string{true: "yes", false: "no"}
	fmt.Fprintf(&b, "apikey header accepted: %s; apikey in the query accepted: %s\n", yes[r.HeaderKey], yes[r.QueryKey])
	for _, e := range []struct {
		name string
		ep   Endpoint
	}{{provider.EndpointAuction, r.Auction}, {provider.EndpointAuctionSold, r.Sold}} {
		fmt.Fprintf(&b, "%s itemIds: %s; limit counts %s; rows of several items: %s", e.name, yes[e.ep.ItemIDs], e.ep.Limit, e.ep.Order)
		if e.ep.Note != "" {
			fmt.Fprintf(&b, " (%s)", e.ep.Note)
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "rate-limit answer: %s\n", r.RateLimit)
	fmt.Fprintf(&b, "requests sent: %d\n", r.Requests)
	return b.String()
}

// ConfigYAML is the configuration the findings imply.
func (r Report) ConfigYAML() string {
	keyIn := "header"
	if !r.HeaderKey && r.QueryKey {
		keyIn = "query"
	}
	pack := 1
	if r.Auction.ItemIDs && r.Sold.ItemIDs {
		pack = provider.MaxItemIDs
	}
	return fmt.Sprintf(`# Written by collector api-check. Packing stays safe whatever limit and order mean (the
# completeness rule and shadow verification); what was found: %s limit %s / order %s,
# %s limit %s / order %s; rate-limit answer: %s.
provider:
  key_in: %s
collect:
  pack_size: %d
`, provider.EndpointAuction, r.Auction.Limit, r.Auction.Order, provider.EndpointAuctionSold, r.Sold.Limit, r.Sold.Order,
		strings.ReplaceAll(r.RateLimit, "\n", " "), keyIn, pack)
}
