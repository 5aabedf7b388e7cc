package neoplesim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
	"github.com/duecollector/duecollector/internal/testkit"
)

var t0 = time.Date(2026, 5, 1, 1, 24, 58, 0, provider.KST)

type fixture struct {
	sim *neoplesim.Server
	srv *httptest.Server
	now time.Time
}

func newFixture(t *testing.T, opts neoplesim.Options) *fixture {
	t.Helper()
	f := &fixture{now: t0}
	if opts.Now == nil {
		opts.Now = func() time.Time { return f.now } // tests change f.now only between requests
	}
	f.sim = neoplesim.New(opts)
	f.srv = httptest.NewServer(f.sim)
	t.Cleanup(f.srv.Close)
	return f
}

type response struct {
	status int
	body   []byte
	Rows   []map[string]any `json:"rows"`
	Error  struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
	} `json:"error"`
}

// get sends GET path with params; key goes in the apikey header unless params has apikey.
func (f *fixture) get(t *testing.T, key, path string, params url.Values) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, f.srv.URL+path+"?"+params.Encode(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("apikey", key)
	}
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	r := response{status: resp.StatusCode}
	if r.body, err = io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal(r.body, &r)
	return r
}

func (f *fixture) market(t *testing.T, path string, params url.Values) response {
	t.Helper()
	return f.get(t, neoplesim.DefaultMarketKey, path, params)
}

func wantError(t *testing.T, r response, status int, code string) {
	t.Helper()
	if r.status != status || r.Error.Code != code || r.Error.Status != status {
		t.Fatalf("got HTTP %d %s, want %d %s; body %.200s", r.status, r.Error.Code, status, code, r.body)
	}
}

func TestCatalogIsDeterministic(t *testing.T) {
	a := neoplesim.New(neoplesim.Options{Items: 40, Seed: 7}).Catalog()
	b := neoplesim.New(neoplesim.Options{Items: 40, Seed: 7}).Catalog()
	c := neoplesim.New(neoplesim.Options{Items: 40, Seed: 8}).Catalog()
	if !slices.Equal(a, b) {
		t.Fatal("same seed gave different catalogs")
	}
	if a[0].ItemID == c[0].ItemID {
		t.Fatal("different seeds gave the same ids")
	}
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	ids, names := map[string]bool{}, map[string]bool{}
	for _, it := range a {
		if !hex32.MatchString(it.ItemID) || !hex32.MatchString(it.ItemTypeID) || !hex32.MatchString(it.ItemTypeDetailID) {
			t.Fatalf("ids not 32 lowercase hex: %+v", it)
		}
		if !slices.Contains(market.Rarities, it.ItemRarity) {
			t.Fatalf("rarity %q", it.ItemRarity)
		}
		if ids[it.ItemID] || names[it.ItemName] {
			t.Fatalf("duplicate id or name: %+v", it)
		}
		ids[it.ItemID], names[it.ItemName] = true, true
	}
	if a[0].ItemName != "무색 큐브 조각" || !strings.HasPrefix(a[1].ItemName, a[0].ItemName) {
		t.Fatalf("want two items sharing a prefix first, got %q, %q", a[0].ItemName, a[1].ItemName)
	}
}

func TestKeyChecks(t *testing.T) {
	f := newFixture(t, neoplesim.Options{ItemKey: "ik", MarketKey: "mk"})
	id := url.Values{"itemId": {f.sim.Catalog()[0].ItemID}}
	wantError(t, f.get(t, "", "/df/auction", id), 401, "API000")
	wantError(t, f.get(t, "nope", "/df/auction", id), 401, "API003")
	wantError(t, f.get(t, "ik", "/df/auction", id), 401, "API003")
	wantError(t, f.get(t, "ik", "/df/auction-sold", id), 401, "API003")
	wantError(t, f.get(t, "mk", "/df/items", url.Values{"itemName": {"코스모 소울"}}), 401, "API003")
	if r := f.get(t, "mk", "/df/auction", id); r.status != 200 {
		t.Fatalf("market key in header: HTTP %d", r.status)
	}
	q := url.Values{"itemName": {"코스모 소울"}, "apikey": {"ik"}}
	if r := f.get(t, "", "/df/items", q); r.status != 200 || len(r.Rows) != 1 {
		t.Fatalf("item key in query: HTTP %d %s", r.status, r.body)
	}
	wantError(t, f.get(t, "mk", "/df/nothing", nil), 404, "DNF900")
}

func TestItemsSearch(t *testing.T) {
	f := newFixture(t, neoplesim.Options{Items: 100})
	items := func(p url.Values) response { return f.get(t, neoplesim.DefaultItemKey, "/df/items", p) }
	cat := f.sim.Catalog()

	if r := items(url.Values{"itemName": {cat[0].ItemName}}); len(r.Rows) != 1 || r.Rows[0]["itemId"] != cat[0].ItemID {
		t.Fatalf("match: %s", r.body)
	}
	if r := items(url.Values{"itemName": {"무색 큐브"}, "wordType": {"front"}}); len(r.Rows) < 2 {
		t.Fatalf("front search should be ambiguous: %s", r.body)
	}
	if r := items(url.Values{"itemName": {"꾸러미"}, "wordType": {"full"}, "limit": {"99"}}); len(r.Rows) != 30 {
		t.Fatalf("limit cap: got %d rows, want 30", len(r.Rows))
	}
	if r := items(url.Values{"itemName": {"없는 아이템"}}); r.status != 200 || string(r.body) != `{"rows":[]}` {
		t.Fatalf("no match: HTTP %d %s", r.status, r.body)
	}
	rarity := cat[3].ItemRarity
	r := items(url.Values{"itemName": {"결정"}, "wordType": {"full"}, "q": {"minLevel:1,rarity:" + rarity}})
	for _, row := range r.Rows {
		if row["itemRarity"] != rarity {
			t.Fatalf("q rarity filter let through %v", row)
		}
	}
	wantError(t, items(url.Values{"itemName": {"x"}, "wordType": {"fuzzy"}}), 400, "DNF901")
	wantError(t, items(url.Values{"itemName": {"x"}, "limit": {"ten"}}), 400, "DNF901")

	one := f.get(t, neoplesim.DefaultItemKey, "/df/items/"+cat[5].ItemID, nil)
	var detail map[string]any
	if err := json.Unmarshal(one.body, &detail); err != nil || detail["itemId"] != cat[5].ItemID || detail["itemExplain"] == nil {
		t.Fatalf("item detail: %s", one.body)
	}
	wantError(t, f.get(t, neoplesim.DefaultItemKey, "/df/items/"+strings.Repeat("0", 32), nil), 404, "DNF003")
}

func TestAuction(t *testing.T) {
	f := newFixture(t, neoplesim.Options{Items: 30, Seed: 3})
	cat := f.sim.Catalog()
	big := cat[3].ItemID // the catalog gives every 25th item from the 4th more listings than the cap
	r := f.market(t, "/df/auction", url.Values{"itemId": {big}, "sort": {"unitPrice:asc"}, "limit": {"1000"}})
	if len(r.Rows) != 400 {
		t.Fatalf("limit cap: got %d rows, want 400", len(r.Rows))
	}
	fields := []string{"auctionNo", "regDate", "expireDate", "itemId", "itemName", "itemAvailableLevel", "itemRarity",
		"itemTypeId", "itemType", "itemTypeDetailId", "itemTypeDetail", "refine", "reinforce", "amplificationName",
		"fame", "count", "price", "currentPrice", "unitPrice", "averagePrice"}
	prev := 0.0
	for _, row := range r.Rows {
		for _, k := range fields {
			if _, ok := row[k]; !ok {
				t.Fatalf("row lacks %s: %v", k, row)
			}
		}
		unit, count := row["unitPrice"].(float64), row["count"].(float64)
		if row["currentPrice"].(float64) != unit*count || unit < prev || row["price"].(float64) != -1 {
			t.Fatalf("bad prices or order: %v", row)
		}
		prev = unit
		reg, err1 := time.ParseInLocation(provider.DateLayout, row["regDate"].(string), provider.KST)
		exp, err2 := time.ParseInLocation(provider.DateLayout, row["expireDate"].(string), provider.KST)
		if err1 != nil || err2 != nil || exp.Sub(reg) != 24*time.Hour || reg.After(f.now) || !exp.After(f.now) {
			t.Fatalf("bad dates: %v", row)
		}
	}
	if d := f.market(t, "/df/auction", url.Values{"itemId": {big}}); len(d.Rows) != 10 {
		t.Fatalf("default limit: got %d rows, want 10", len(d.Rows))
	}

	// Prices move with time, deterministically.
	lowest := func() any {
		return f.market(t, "/df/auction", url.Values{"itemId": {big}, "sort": {"unitPrice:asc"}, "limit": {"1"}}).Rows[0]["unitPrice"]
	}
	p0 := lowest()
	if again := lowest(); again != p0 {
		t.Fatalf("same instant, different price: %v vs %v", p0, again)
	}
	seen := map[any]bool{p0: true}
	for range 6 {
		f.now = f.now.Add(25 * time.Minute)
		seen[lowest()] = true
	}
	if len(seen) < 2 {
		t.Fatalf("price did not move in 2.5 h: %v", p0)
	}

	var ids []string
	for _, it := range cat[:11] {
		ids = append(ids, it.ItemID)
	}
	wantError(t, f.market(t, "/df/auction", url.Values{"itemIds": {strings.Join(ids, ",")}}), 400, "DNF008")
	if r := f.market(t, "/df/auction", url.Values{"itemIds": {strings.Join(ids[:10], ",")}, "limit": {"400"}}); r.status != 200 {
		t.Fatalf("10 itemIds: HTTP %d", r.status)
	}
	if r := f.market(t, "/df/auction", url.Values{"itemId": {strings.Repeat("f", 32)}}); r.status != 200 || string(r.body) != `{"rows":[]}` {
		t.Fatalf("unknown item: HTTP %d %s", r.status, r.body)
	}
	wantError(t, f.market(t, "/df/auction", nil), 400, "DNF901")
	wantError(t, f.market(t, "/df/auction", url.Values{"itemId": {big}, "itemName": {"x"}}), 400, "DNF901")
	wantError(t, f.market(t, "/df/auction", url.Values{"itemName": {"꾸러미"}, "wordType": {"full"}}), 400, "DNF007")
	if r := f.market(t, "/df/auction", url.Values{"itemName": {cat[0].ItemName}}); r.status != 200 {
		t.Fatalf("auction by name: HTTP %d", r.status)
	}
}

func TestAuctionSold(t *testing.T) {
	f := newFixture(t, neoplesim.Options{Items: 30, Seed: 5})
	sold := func(id string) []map[string]any {
		return f.market(t, "/df/auction-sold", url.Values{"itemId": {id}, "limit": {"500"}}).Rows
	}
	dupItems, full, quiet := 0, 0, 0
	busiest, busiestSince := "", ""
	for _, it := range f.sim.Catalog() {
		rows := sold(it.ItemID)
		switch {
		case len(rows) > 100:
			t.Fatalf("limit cap: %d rows, want <= 100", len(rows))
		case len(rows) == 100:
			full++
			if since := rows[99]["soldDate"].(string); since > busiestSince {
				busiest, busiestSince = it.ItemID, since
			}
		default:
			quiet++
		}
		dup := false
		for i := 1; i < len(rows); i++ {
			if rows[i]["soldDate"].(string) > rows[i-1]["soldDate"].(string) {
				t.Fatalf("not newest first at %d: %v after %v", i, rows[i], rows[i-1])
			}
			if rows[i]["unitPrice"].(float64)*rows[i]["count"].(float64) != rows[i]["price"].(float64) {
				t.Fatalf("price != unitPrice × count: %v", rows[i])
			}
			dup = dup || equalRows(rows[i], rows[i-1])
		}
		if dup {
			dupItems++
		}
	}
	if dupItems == 0 || full == 0 || quiet == 0 {
		t.Fatalf("%d items with identical adjacent sales, %d with a full 100, %d quiet; want some of each", dupItems, full, quiet)
	}

	// Repeated fetches overlap: a quarter of the busiest item's 100-sale span later (about 25
	// sales), the old head is further down the list and the rows before it are new.
	before := sold(busiest)
	since, _ := time.ParseInLocation(provider.DateLayout, busiestSince, provider.KST)
	f.now = f.now.Add(f.now.Sub(since) / 4)
	after := sold(busiest)
	k := slices.IndexFunc(after, func(r map[string]any) bool { return equalRows(r, before[0]) })
	if k <= 0 || k > 75 {
		t.Fatalf("old head at %d, want within 1..75", k)
	}
	for i := 0; k+i < len(after); i++ {
		if !equalRows(after[k+i], before[i]) {
			t.Fatalf("overlap differs at %d", i)
		}
	}
}

func equalRows(a, b map[string]any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	return string(ja) == string(jb)
}

func TestMaintenance(t *testing.T) {
	f := newFixture(t, neoplesim.Options{})
	admin(t, f, http.MethodPost, "/_sim/maintenance?on=true", "")
	if !f.sim.Maintenance() {
		t.Fatal("admin endpoint did not switch maintenance on")
	}
	wantError(t, f.market(t, "/df/auction", url.Values{"itemId": {f.sim.Catalog()[0].ItemID}}), 503, "DNF980")
	wantError(t, f.get(t, neoplesim.DefaultItemKey, "/df/items", url.Values{"itemName": {"x"}}), 503, "DNF980")
	wantError(t, f.get(t, "", "/df/auction-sold", nil), 503, "DNF980")
	f.sim.SetMaintenance(false)
	if r := f.market(t, "/df/auction", url.Values{"itemId": {f.sim.Catalog()[0].ItemID}}); r.status != 200 {
		t.Fatalf("after maintenance: HTTP %d", r.status)
	}
	if got := f.sim.Stats().Maintenance; got != 3 {
		t.Fatalf("maintenance answers counted %d, want 3", got)
	}
}

func admin(t *testing.T, f *fixture, method, path, body string) []byte {
	t.Helper()
	req, _ := http.NewRequest(method, f.srv.URL+path, strings.NewReader(body))
	resp, err := f.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("%s %s: HTTP %d %s", method, path, resp.StatusCode, b)
	}
	return b
}

func TestFaults(t *testing.T) {
	f := newFixture(t, neoplesim.Options{})
	id := url.Values{"itemId": {f.sim.Catalog()[0].ItemID}}
	admin(t, f, http.MethodPost, "/_sim/faults", `{"latency":"1ms","error_rate":1}`)
	if got := f.sim.Faults(); got.Latency != time.Millisecond || got.ErrorRate != 1 {
		t.Fatalf("faults from JSON: %+v", got)
	}
	wantError(t, f.market(t, "/df/auction", id), 500, "DNF999")

	f.sim.SetFaults(neoplesim.Faults{MalformedRate: 1})
	if r := f.market(t, "/df/auction-sold", id); r.status != 200 || json.Valid(r.body) {
		t.Fatalf("malformed fault: HTTP %d, valid JSON %q", r.status, r.body)
	}
	f.sim.SetFaults(neoplesim.Faults{OversizeRate: 1})
	if r := f.market(t, "/df/auction", id); r.status != 200 || len(r.body) < neoplesim.OversizeBytes || !json.Valid(r.body) {
		t.Fatalf("oversize fault: HTTP %d, %d bytes", r.status, len(r.body))
	}
	// Counted from answers received whole, so every one of their handlers has counted: the
	// timeout's handler may not have run yet when its client gives up.
	if got := f.sim.Stats().Faults; got != 3 {
		t.Fatalf("faults counted %d, want 3", got)
	}
	f.sim.SetFaults(neoplesim.Faults{TimeoutRate: 1})
	c := &http.Client{Timeout: 50 * time.Millisecond}
	req, _ := http.NewRequest(http.MethodGet, f.srv.URL+"/df/auction?"+id.Encode(), nil)
	req.Header.Set("apikey", neoplesim.DefaultMarketKey)
	if resp, err := c.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("timeout fault answered HTTP %d", resp.StatusCode)
	}
	for _, bad := range []string{`{"latency":"soon"}`, `{"error_rate":2}`, `nope`} {
		req, _ := http.NewRequest(http.MethodPost, f.srv.URL+"/_sim/faults", strings.NewReader(bad))
		resp, err := f.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 400 {
			t.Fatalf("faults %s: HTTP %d, want 400", bad, resp.StatusCode)
		}
	}
}

func TestRateLimitPerKey(t *testing.T) {
	// One request per second with a burst of one: ten back-to-back requests cannot all pass
	// however slow the machine, unless they took nine seconds.
	f := newFixture(t, neoplesim.Options{Rate: 1})
	id := url.Values{"itemId": {f.sim.Catalog()[0].ItemID}}
	limited := 0
	for range 10 {
		if r := f.market(t, "/df/auction", id); r.status == 429 {
			wantError(t, r, 429, "API002")
			limited++
		}
	}
	// The other key has its own bucket.
	if r := f.get(t, neoplesim.DefaultItemKey, "/df/items", url.Values{"itemName": {"x"}}); r.status != 200 {
		t.Fatalf("item key limited by market traffic: HTTP %d", r.status)
	}
	ks := f.sim.KeyStats(neoplesim.DefaultMarketKey)
	if limited == 0 || ks.RateLimited != int64(limited) || ks.Total != 10 || ks.MaxPerSecond < 1 {
		t.Fatalf("limited %d, stats %+v", limited, ks)
	}
}

func TestStats(t *testing.T) {
	f := newFixture(t, neoplesim.Options{MarketKey: "very-secret-market-key"})
	cat := f.sim.Catalog()
	for range 3 {
		f.get(t, "very-secret-market-key", "/df/auction", url.Values{"itemId": {cat[1].ItemID}})
	}
	f.get(t, "very-secret-market-key", "/df/auction-sold", url.Values{"itemIds": {cat[1].ItemID + "," + cat[2].ItemID}})
	f.get(t, "very-secret-market-key", "/df/auction", url.Values{"itemId": {"synthetic-1"}})

	st := f.sim.Stats()
	if st.Requests != 5 || st.Paths[provider.EndpointAuction] != 4 || st.Paths[provider.EndpointAuctionSold] != 1 {
		t.Fatalf("stats %+v", st)
	}
	if f.sim.ItemRequests(cat[1].ItemID) != 3 || f.sim.ItemRequests("synthetic-1") != 1 || f.sim.ItemRequests(cat[2].ItemID) != 0 {
		t.Fatalf("item stats %+v", st.Items)
	}
	if st.Items[cat[2].ItemID].AuctionSold != 1 {
		t.Fatalf("itemIds not counted per item: %+v", st.Items)
	}
	if ks := st.Keys[neoplesim.KeyLabel("very-secret-market-key")]; ks.Total != 5 {
		t.Fatalf("key stats %+v", st.Keys)
	}
	body := admin(t, f, http.MethodGet, "/_sim/stats", "")
	if strings.Contains(string(body), "secret") || !strings.Contains(string(body), `"max_per_second"`) {
		t.Fatalf("stats JSON leaks the key or lacks fields: %s", body)
	}
	admin(t, f, http.MethodDelete, "/_sim/stats", "")
	if st := f.sim.Stats(); st.Requests != 0 || len(st.Keys) != 0 {
		t.Fatalf("after reset: %+v", st)
	}
}

// Tests wait for traffic, not for time to pass: Served hears the request that brings a key's
// count since the last reset to n, NextRequest the first one at or after a moment.
func TestServedAndNextRequest(t *testing.T) {
	f := newFixture(t, neoplesim.Options{})
	id := url.Values{"itemId": {f.sim.Catalog()[1].ItemID}}
	quiet := func(ch <-chan time.Time, what string) {
		t.Helper()
		select {
		case at := <-ch:
			t.Fatalf("%s heard a request at %s", what, at)
		default:
		}
	}
	second := f.sim.Served(neoplesim.DefaultMarketKey, 2)
	from := time.Now()
	next := f.sim.NextRequest(neoplesim.DefaultMarketKey, from)
	later := f.sim.NextRequest(neoplesim.DefaultMarketKey, from.Add(time.Hour))
	f.market(t, "/df/auction", id)
	quiet(second, "Served(2) after one request")
	if at := testkit.Recv(t, next, time.Minute, "the next request"); at.Before(from) {
		t.Fatalf("NextRequest(%s) heard a request at %s", from, at)
	}
	f.get(t, neoplesim.DefaultItemKey, "/df/items", url.Values{"itemName": {"코스모 소울"}})
	quiet(second, "Served(2) after another key's request")
	f.market(t, "/df/auction-sold", id)
	testkit.Recv(t, second, time.Minute, "the second market request")
	testkit.Recv(t, f.sim.Served(neoplesim.DefaultMarketKey, 2), time.Minute, "a count already reached")
	quiet(later, "NextRequest an hour ahead")
	// Asked late, NextRequest looks back: the request it names may have come before the call.
	if at := testkit.Recv(t, f.sim.NextRequest(neoplesim.DefaultMarketKey, from), time.Minute, "a past request"); at.Before(from) {
		t.Fatalf("NextRequest(%s) asked late heard a request at %s", from, at)
	}

	f.sim.ResetStats()
	third := f.sim.Served(neoplesim.DefaultMarketKey, 2)
	f.market(t, "/df/auction", id)
	quiet(third, "Served(2) after one request since the reset")
	f.market(t, "/df/auction", id)
	testkit.Recv(t, third, time.Minute, "two requests since the reset")
}

// The busiest second after ResetStats counts the whole second in progress, not only the
// requests after the reset.
func TestBusiestSecondSpansAReset(t *testing.T) {
	for attempt := 0; ; attempt++ {
		f := newFixture(t, neoplesim.Options{}) // a fresh count for each attempt
		id := url.Values{"itemId": {f.sim.Catalog()[1].ItemID}}
		start := time.Now()
		for range 3 {
			f.market(t, "/df/auction", id)
		}
		f.sim.ResetStats()
		f.market(t, "/df/auction", id)
		if time.Now().Unix() != start.Unix() { // the four straddled a second: try again
			if attempt == 5 {
				t.Fatal("four local requests never fell in one wall-clock second")
			}
			continue
		}
		if ks := f.sim.KeyStats(neoplesim.DefaultMarketKey); ks.Total != 1 || ks.MaxPerSecond != 4 {
			t.Fatalf("after a reset mid-second: %+v, want a total of 1 and a busiest second of 4", ks)
		}
		return
	}
}

func TestSameSeedSameMarket(t *testing.T) {
	a := newFixture(t, neoplesim.Options{Seed: 11})
	b := newFixture(t, neoplesim.Options{Seed: 11})
	for _, path := range []string{"/df/auction", "/df/auction-sold"} {
		p := url.Values{"itemId": {a.sim.Catalog()[4].ItemID}, "limit": {"100"}}
		if ra, rb := a.market(t, path, p), b.market(t, path, p); string(ra.body) != string(rb.body) {
			t.Fatalf("%s differs between two simulators with one seed", path)
		}
	}
}

// The hostile fault modes: text a client must clean, impossible dates, foreign rows, an
// absurd Retry-After, a maintenance message with NUL and EUC-KR bytes.
func TestHostileFaultModes(t *testing.T) {
	f := newFixture(t, neoplesim.Options{})
	item := f.sim.Catalog()[0].ItemID
	id := url.Values{"itemId": {item}}
	admin(t, f, http.MethodPost, "/_sim/faults", `{"hostile_rate":1}`)
	for i := 0; i < 8; i++ {
		if r := f.market(t, "/df/auction", id); r.status != 404 && r.status != 502 {
			t.Fatalf("hostile fault: HTTP %d", r.status)
		}
	}
	f.sim.SetFaults(neoplesim.Faults{FutureRate: 1})
	if r := f.market(t, "/df/auction-sold", id); r.status != 200 || len(r.Rows) == 0 || r.Rows[0]["soldDate"] != "2099-01-01 00:00:00" {
		t.Fatalf("future fault: HTTP %d, rows %.300s", r.status, r.body)
	}
	f.sim.SetFaults(neoplesim.Faults{AncientRate: 1})
	if r := f.market(t, "/df/auction", id); r.status != 200 || len(r.Rows) == 0 || r.Rows[0]["regDate"] != "2001-01-01 00:00:00" {
		t.Fatalf("ancient fault: HTTP %d, rows %.300s", r.status, r.body)
	}
	f.sim.SetFaults(neoplesim.Faults{ForeignRate: 1})
	if r := f.market(t, "/df/auction", id); r.status != 200 || len(r.Rows) == 0 || r.Rows[0]["itemId"] == item {
		t.Fatalf("foreign fault: HTTP %d, rows %.300s", r.status, r.body)
	}
	f.sim.SetFaults(neoplesim.Faults{RetryAfterRate: 1})
	wantError(t, f.market(t, "/df/auction", id), 429, "API002")
	f.sim.SetFaults(neoplesim.Faults{HostileMaintenance: true})
	f.sim.SetMaintenance(true)
	if r := f.market(t, "/df/auction", id); r.status != 503 || !strings.Contains(string(r.body), `\u0000`) {
		t.Fatalf("hostile maintenance: HTTP %d %q", r.status, r.body)
	}
	var got neoplesim.Faults
	admin(t, f, http.MethodPost, "/_sim/faults", `{"foreign_rate":0.5,"hostile_maintenance":true}`)
	if got = f.sim.Faults(); got.ForeignRate != 0.5 || !got.HostileMaintenance {
		t.Fatalf("faults from JSON: %+v", got)
	}
}
