package neoplesim

import (
	"cmp"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
)

// maxNameMatches is how many items an auction itemName may match before DNF007.
const maxNameMatches = 10

// GET /df/items?itemName=&wordType=&limit=&q=minLevel:N,maxLevel:N,rarity:NAME
func (s *Server) items(r *http.Request) (any, *apiError) {
	q := r.URL.Query()
	if q.Get("itemName") == "" {
		return nil, badParam("itemName is required")
	}
	limit, e := limitParam(q, 10, 30)
	if e != nil {
		return nil, e
	}
	found, e := s.search(q.Get("itemName"), q.Get("wordType"))
	if e != nil {
		return nil, e
	}
	minLevel, maxLevel, rarity := 0, 1<<30, ""
	for _, kv := range strings.Split(q.Get("q"), ",") {
		k, v, _ := strings.Cut(kv, ":")
		var err error
		switch k {
		case "minLevel":
			minLevel, err = strconv.Atoi(v)
		case "maxLevel":
			maxLevel, err = strconv.Atoi(v)
		case "rarity":
			rarity = v
		}
		if err != nil {
			return nil, badParam("q %s", kv)
		}
	}
	rows := []market.ItemRow{}
	for _, e := range found {
		if len(rows) == limit {
			break
		}
		if e.ItemAvailableLevel >= minLevel && e.ItemAvailableLevel <= maxLevel && (rarity == "" || e.ItemRarity == rarity) {
			rows = append(rows, e.Row())
		}
	}
	return map[string]any{"rows": rows}, nil
}

// GET /df/items/{itemId}
func (s *Server) item(r *http.Request) (any, *apiError) {
	id := r.PathValue("itemId")
	s.countItem(id, func(st *ItemStats) { st.Item++ })
	e := s.market.Item(id)
	if e == nil {
		return nil, noItem
	}
	return e.Detail(), nil
}

// GET /df/auction?itemId=|itemIds=|itemName=(&wordType=)&limit=&sort=
func (s *Server) auction(r *http.Request) (any, *apiError) {
	q := r.URL.Query()
	limit, e := limitParam(q, 10, 400)
	if e != nil {
		return nil, e
	}
	less, e := sortParam(q.Get("sort"))
	if e != nil {
		return nil, e
	}
	found, packed, e := s.resolve(q, func(st *ItemStats) { st.Auction++ })
	if e != nil {
		return nil, e
	}
	now := s.opts.Now()
	groups := make([][]market.Listing, len(found))
	for i, it := range found {
		groups[i] = it.Listings(now)
		slices.SortStableFunc(groups[i], less)
	}
	s.scorer.ServedListings(found, now)
	perItem, grouped := s.itemIDsShape(packed)
	return map[string]any{"rows": shape(perItem, grouped, groups, limit, less)}, nil
}

// GET /df/auction-sold?itemId=|itemIds=|itemName=(&wordType=)&limit=
func (s *Server) auctionSold(r *http.Request) (any, *apiError) {
	q := r.URL.Query()
	limit, e := limitParam(q, 10, 100)
	if e != nil {
		return nil, e
	}
	found, packed, e := s.resolve(q, func(st *ItemStats) { st.AuctionSold++ })
	if e != nil {
		return nil, e
	}
	now := s.opts.Now()
	groups := make([][]market.Sale, len(found))
	for i, it := range found {
		groups[i] = it.Sales(now, limit)
	}
	perItem, grouped := s.itemIDsShape(packed)
	// Newest first (the date layout sorts like time).
	newest := func(a, b market.Sale) int { return cmp.Compare(b.SoldDate, a.SoldDate) }
	rows := shape(perItem, grouped, groups, limit, newest)
	s.scorer.ServedSales(found, rows, now)
	return map[string]any{"rows": rows}, nil
}

// shape turns each item's rows, already in the endpoint's order, into one answer. An itemIds
// answer takes the shape Options.ItemIDsLimit and ItemIDsOrder choose; any other answer is
// every row in one order, cut at limit.
func shape[R any](limitPerItem, grouped bool, groups [][]R, limit int, order func(a, b R) int) []R {
	rows := []R{}
	for _, g := range groups {
		if limitPerItem {
			g = g[:min(len(g), limit)]
		}
		rows = append(rows, g...)
	}
	if !grouped {
		slices.SortStableFunc(rows, order)
	}
	if !limitPerItem {
		rows = rows[:min(len(rows), limit)]
	}
	return rows
}

// itemIDsShape is how an answer is cut and ordered: only itemIds answers take the options' shape.
func (s *Server) itemIDsShape(packed bool) (limitPerItem, grouped bool) {
	return packed && s.opts.ItemIDsLimit == LimitPerItem, packed && s.opts.ItemIDsOrder == OrderGrouped
}

// resolve reads exactly one of itemId, itemIds, itemName and returns the known items, and
// whether they were asked for by itemIds; it counts every requested id, known or not, so tests
// can prove an id was never asked for.
func (s *Server) resolve(q url.Values, count func(*ItemStats)) (_ []*market.Item, packed bool, _ *apiError) {
	given := 0
	for _, k := range []string{"itemId", "itemIds", "itemName"} {
		if q.Get(k) != "" {
			given++
		}
	}
	if given != 1 {
		return nil, false, badParam("exactly one of itemId, itemIds, itemName is required")
	}
	var ids []string
	switch {
	case q.Get("itemId") != "":
		ids = []string{q.Get("itemId")}
	case q.Get("itemIds") != "":
		ids, packed = strings.Split(q.Get("itemIds"), ","), true
		if len(ids) > 10 {
			return nil, false, tooManyIDs
		}
	default:
		found, e := s.search(q.Get("itemName"), q.Get("wordType"))
		if e != nil {
			return nil, false, e
		}
		if len(found) > maxNameMatches {
			return nil, false, tooBroad
		}
		for _, it := range found {
			ids = append(ids, it.ItemID)
		}
	}
	var out []*market.Item
	for _, id := range ids {
		s.countItem(id, count)
		if it := s.market.Item(id); it != nil {
			out = append(out, it)
		}
	}
	return out, packed, nil
}

// search matches names: match = exact, front = prefix, full = contains.
func (s *Server) search(name, wordType string) ([]*market.Item, *apiError) {
	var ok func(string) bool
	switch wordType {
	case "", "match":
		ok = func(n string) bool { return n == name }
	case "front":
		ok = func(n string) bool { return strings.HasPrefix(n, name) }
	case "full":
		ok = func(n string) bool { return strings.Contains(n, name) }
	default:
		return nil, badParam("wordType %s", wordType)
	}
	var out []*market.Item
	for _, e := range s.market.Items() {
		if ok(e.ItemName) {
			out = append(out, e)
		}
	}
	if len(out) == 0 && s.opts.NotFoundAPI001 {
		return nil, nothingByName
	}
	return out, nil
}

// limitParam reads limit: default def, silently capped at max like the API.
func limitParam(q url.Values, def, ceiling int) (int, *apiError) {
	v := q.Get("limit")
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		return 0, badParam("limit %s", v)
	}
	return min(n, ceiling), nil
}

// sortParam reads sort=key:asc|desc for unitPrice or auctionNo; the default is auctionNo order.
func sortParam(v string) (func(a, b market.Listing) int, *apiError) {
	if v == "" {
		v = "auctionNo:asc"
	}
	key, dir, _ := strings.Cut(v, ":")
	var by func(market.Listing) int64
	switch key {
	case "unitPrice":
		by = func(l market.Listing) int64 { return l.UnitPrice }
	case "auctionNo":
		by = func(l market.Listing) int64 { return l.AuctionNo }
	default:
		return nil, badParam("sort %s", v)
	}
	switch dir {
	case "", "asc":
		return func(a, b market.Listing) int { return cmp.Compare(by(a), by(b)) }, nil
	case "desc":
		return func(a, b market.Listing) int { return cmp.Compare(by(b), by(a)) }, nil
	}
	return nil, badParam("sort %s", v)
}
