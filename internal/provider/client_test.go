package provider_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
)

// recorder keeps the last request the simulator received.
type recorder struct {
	mu  sync.Mutex
	req *http.Request
}

func (r *recorder) last() *http.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.req
}

type env struct {
	sim *neoplesim.Server
	srv *httptest.Server
	rec *recorder
}

func newEnv(t *testing.T, opts neoplesim.Options) *env {
	t.Helper()
	e := &env{sim: neoplesim.New(opts), rec: &recorder{}}
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.rec.mu.Lock()
		e.rec.req = r.Clone(context.Background())
		e.rec.mu.Unlock()
		e.sim.ServeHTTP(w, r)
	}))
	t.Cleanup(e.srv.Close)
	return e
}

func (e *env) client(t *testing.T, w provider.Workload, mod func(*provider.ClientConfig)) *provider.Client {
	t.Helper()
	cfg := provider.ClientConfig{Workload: w, BaseURL: e.srv.URL, Key: neoplesim.DefaultMarketKey, Timeout: 5 * time.Second}
	if w == provider.WorkloadItem {
		cfg.Key = neoplesim.DefaultItemKey
	}
	if mod != nil {
		mod(&cfg)
	}
	c, err := provider.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func wantClass(t *testing.T, err error, want provider.Class) *provider.Error {
	t.Helper()
	var pe *provider.Error
	if !errors.As(err, &pe) || pe.Class != want {
		t.Fatalf("got %v, want a %s *provider.Error", err, want)
	}
	return pe
}

func TestKeyInHeader(t *testing.T) {
	e := newEnv(t, neoplesim.Options{Seed: 1})
	c := e.client(t, provider.WorkloadMarket, nil)
	item := e.sim.Catalog()[3]
	rowsA, err := c.Auction(context.Background(), item.ItemID)
	rows := rowsA.Rows
	if err != nil {
		t.Fatal(err)
	}
	r := e.rec.last()
	if r.Header.Get("apikey") != neoplesim.DefaultMarketKey || r.URL.Query().Has("apikey") ||
		strings.Contains(r.URL.RawQuery, neoplesim.DefaultMarketKey) {
		t.Fatalf("key not (only) in the header: query %q", r.URL.RawQuery)
	}
	q := r.URL.Query()
	if r.URL.Path != "/df/auction" || q.Get("itemId") != item.ItemID || q.Get("sort") != "unitPrice:asc" || q.Get("limit") != "400" {
		t.Fatalf("request %s?%s", r.URL.Path, r.URL.RawQuery)
	}
	if len(rows) != 400 {
		t.Fatalf("got %d listings, want the 400 cap", len(rows))
	}
	for i, l := range rows {
		if l.ItemID != item.ItemID || l.CurrentPrice != l.UnitPrice*l.Count || l.RegCount < l.Count ||
			l.RegDate.Location() != provider.KST || l.ExpireDate.Sub(l.RegDate) != 24*time.Hour ||
			(i > 0 && l.UnitPrice < rows[i-1].UnitPrice) {
			t.Fatalf("listing %d: %+v", i, l)
		}
	}
}

func TestMarketAndItemEndpoints(t *testing.T) {
	e := newEnv(t, neoplesim.Options{Seed: 2})
	ctx := context.Background()
	market := e.client(t, provider.WorkloadMarket, func(c *provider.ClientConfig) { c.SoldLimit = 60 })
	items := e.client(t, provider.WorkloadItem, func(c *provider.ClientConfig) { c.KeyIn = "query" })
	cat := e.sim.Catalog()

	salesA, err := market.AuctionSold(ctx, cat[0].ItemID)
	sales := salesA.Rows
	if err != nil {
		t.Fatal(err)
	}
	if len(sales) != 60 || e.rec.last().URL.Query().Get("limit") != "60" {
		t.Fatalf("got %d sales, want 60", len(sales))
	}
	for i := 1; i < len(sales); i++ {
		if sales[i].SoldAt.After(sales[i-1].SoldAt) {
			t.Fatalf("sales not newest first at %d", i)
		}
	}

	found, err := items.SearchItems(ctx, "무색 큐브", "front", 100)
	if err != nil {
		t.Fatal(err)
	}
	q := e.rec.last().URL.Query()
	if len(found) < 2 || q.Get("limit") != "30" || q.Get("apikey") != neoplesim.DefaultItemKey || e.rec.last().Header.Get("apikey") != "" {
		t.Fatalf("search: %d items, query %v", len(found), q)
	}
	got, err := items.GetItem(ctx, cat[4].ItemID)
	if err != nil || got != cat[4] {
		t.Fatalf("GetItem = %+v, %v; want %+v", got, err, cat[4])
	}
	none, err := items.SearchItems(ctx, "없는 아이템", "", 0)
	if err != nil || len(none) != 0 {
		t.Fatalf("no match: %v, %v", none, err)
	}
}

func TestWrongWorkloadIsABug(t *testing.T) {
	e := newEnv(t, neoplesim.Options{})
	market := e.client(t, provider.WorkloadMarket, nil)
	items := e.client(t, provider.WorkloadItem, nil)
	_, err := market.SearchItems(context.Background(), "코스모 소울", "match", 1)
	wantClass(t, err, provider.ClassBug)
	_, err = items.Auction(context.Background(), e.sim.Catalog()[0].ItemID)
	wantClass(t, err, provider.ClassBug)
	_, err = market.Auction(context.Background(), "")
	wantClass(t, err, provider.ClassBug)
	if n := e.sim.Stats().Requests; n != 0 {
		t.Fatalf("%d requests reached the provider", n)
	}
}

func TestQueryKeyNeverInErrors(t *testing.T) {
	const sentinel = "SENTINEL/key+42=="
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := "http://" + ln.Addr().String()
	ln.Close()

	sim := neoplesim.New(neoplesim.Options{MarketKey: sentinel})
	sim.SetFaults(neoplesim.Faults{TimeoutRate: 1})
	slow := httptest.NewServer(sim)
	defer slow.Close()

	for name, base := range map[string]string{"connection refused": closed, "timeout": slow.URL} {
		c, err := provider.NewClient(provider.ClientConfig{
			Workload: provider.WorkloadMarket, BaseURL: base, Key: sentinel, KeyIn: "query", Timeout: 200 * time.Millisecond,
		})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Auction(context.Background(), "785e56a0ed4e3efd573da1f56a45217d")
		pe := wantClass(t, err, provider.ClassTransient)
		for _, text := range []string{err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", pe.Err), pe.Endpoint} {
			if strings.Contains(text, sentinel) || strings.Contains(text, url.QueryEscape(sentinel)) || strings.Contains(text, "apikey") {
				t.Fatalf("%s: key leaked: %s", name, text)
			}
		}
		if name == "timeout" && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("timeout error lost its cause: %v", err)
		}
	}
}

func TestErrorClassesFromSimulator(t *testing.T) {
	e := newEnv(t, neoplesim.Options{})
	ctx := context.Background()
	id := e.sim.Catalog()[0].ItemID
	market := e.client(t, provider.WorkloadMarket, nil)

	e.sim.SetMaintenance(true)
	_, err := market.Auction(ctx, id)
	pe := wantClass(t, err, provider.ClassMaintenance)
	if pe.Status != 503 || pe.Code != "DNF980" || pe.Endpoint != provider.EndpointAuction || pe.Workload != provider.WorkloadMarket {
		t.Fatalf("maintenance error %+v", pe)
	}
	e.sim.SetMaintenance(false)

	wrongKey := e.client(t, provider.WorkloadMarket, func(c *provider.ClientConfig) { c.Key = neoplesim.DefaultItemKey })
	_, err = wrongKey.AuctionSold(ctx, id)
	if pe := wantClass(t, err, provider.ClassConfig); !strings.Contains(err.Error(), "NEOPLE_MARKET_API_KEY") || pe.Code != "API003" {
		t.Fatalf("config error should name the variable: %v", err)
	}

	items := e.client(t, provider.WorkloadItem, nil)
	_, err = items.GetItem(ctx, strings.Repeat("0", 32))
	if pe := wantClass(t, err, provider.ClassItem); pe.Code != "DNF003" {
		t.Fatalf("unknown item: %+v", pe)
	}

	for _, c := range []struct {
		faults neoplesim.Faults
		want   string
	}{
		{neoplesim.Faults{ErrorRate: 1}, "DNF999"},
		{neoplesim.Faults{MalformedRate: 1}, "malformed"},
		{neoplesim.Faults{OversizeRate: 1}, "MaxBodyBytes"},
	} {
		e.sim.SetFaults(c.faults)
		_, err := market.Auction(ctx, id)
		wantClass(t, err, provider.ClassTransient)
		if !strings.Contains(err.Error(), c.want) {
			t.Fatalf("%+v: error %q lacks %q", c.faults, err, c.want)
		}
	}
	e.sim.SetFaults(neoplesim.Faults{})

	limited := newEnv(t, neoplesim.Options{Rate: 1})
	c := limited.client(t, provider.WorkloadMarket, nil)
	var last error
	for range 10 { // one per second allowed: ten at once cannot all pass
		if _, err := c.Auction(ctx, id); err != nil {
			last = err
		}
	}
	if pe := wantClass(t, last, provider.ClassRateLimited); pe.Code != "API002" || pe.Status != 429 {
		t.Fatalf("rate limited: %+v", pe)
	}
	if _, ok := provider.RateLimitAnswer(last); !ok {
		t.Fatalf("the provider's 429 is not a RateLimitAnswer: %v", last)
	}
}

// Codes the simulator never sends, from a stub, through the same HTTP path.
func TestErrorClassesFromStub(t *testing.T) {
	for _, c := range []struct {
		status     int
		body       string
		retryAfter string
		want       provider.Class
		wantAfter  time.Duration
	}{
		{400, `{"error":{"status":400,"code":"API008","message":"?"}}`, "7", provider.ClassRateLimited, 7 * time.Second},
		{429, `{"error":{"status":429,"code":"API002","message":"APIKEY_USAGE_EXCEEDED"}}`, "", provider.ClassRateLimited, 0},
		{401, `{"error":{"status":401,"code":"API004","message":"BLOCKED"}}`, "", provider.ClassConfig, 0},
		{404, `{"error":{"status":404,"code":"DNF004","message":"NOT_FOUND_AUCTION"}}`, "", provider.ClassItem, 0},
		{400, `{"error":{"status":400,"code":"DNF901","message":"NOT_FOUND_SEARCH_VALUE"}}`, "", provider.ClassItem, 0},
		{404, `{"error":{"status":404,"code":"API900","message":"INVALID_URL"}}`, "", provider.ClassEndpoint, 0},
		{400, `{"error":{"status":400,"code":"DNF008","message":"TOO_MANY"}}`, "", provider.ClassBug, 0},
		{502, `<html>bad gateway</html>`, "", provider.ClassTransient, 0},
		{503, `<html>down</html>`, "", provider.ClassMaintenance, 0},
		{302, ``, "", provider.ClassEndpoint, 0}, // not followed: the header key would go along
		{200, `{"rows":[{"itemId":"x","unitPrice":"cheap"}]}`, "", provider.ClassTransient, 0},
		{200, `{"rows":[{"itemId":"x","regDate":"2026-05"}]}`, "", provider.ClassTransient, 0},
		{200, `{"error":"no rows"}`, "", provider.ClassTransient, 0},
		// The API's own error body under a code not in the table is about the request: taken for
		// a wrong base URL it ended every pass at the one item that met it.
		{400, `{"error":{"status":400,"code":"DNF001","message":"요청 값이 올바르지 않습니다."}}`, "", provider.ClassItem, 0},
		{404, `{"error":{"status":404,"code":"DNF123","message":"?"}}`, "", provider.ClassItem, 0},
		// An unknown gateway code (key, header) is as likely to meet every call: the pass stops.
		{400, `{"error":{"status":400,"code":"API006","message":"INVALID_HEADER"}}`, "", provider.ClassEndpoint, 0},
		{400, `{"error":{"status":400,"code":"API010","message":"APIKEY_LIMIT_EXCEEDED"}}`, "", provider.ClassRateLimited, 0},
		// An error body under a 200 says what it is, as under any other status.
		{200, `{"error":{"status":503,"code":"DNF980","message":"SYSTEM_INSPECT"}}`, "", provider.ClassMaintenance, 0},
		{200, `{"error":{"status":400,"code":"API002","message":"APIKEY_LIMIT"}}`, "", provider.ClassRateLimited, 0},
		{200, `{"error":{"status":429,"code":"API002","message":"APIKEY_LIMIT"}}`, "7", provider.ClassRateLimited, 7 * time.Second},
	} {
		err := stubAuction(t, c.status, c.body, c.retryAfter)
		if pe := wantClass(t, err, c.want); pe.RetryAfter != c.wantAfter || pe.Status != c.status {
			t.Fatalf("HTTP %d %s: %+v", c.status, c.body, pe)
		}
	}
}

func TestBodyCap(t *testing.T) {
	e := newEnv(t, neoplesim.Options{})
	c := e.client(t, provider.WorkloadMarket, func(c *provider.ClientConfig) { c.MaxBodyBytes = 4096 })
	// A 400-row answer is far above 4 KiB: a legitimate but oversized body is refused too.
	_, err := c.Auction(context.Background(), e.sim.Catalog()[3].ItemID)
	if wantClass(t, err, provider.ClassTransient); !strings.Contains(err.Error(), "4096") {
		t.Fatalf("error should name the cap: %v", err)
	}
}

func TestRateLimiterKeepsTheBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("paced by the limiter: about 1 s")
	}
	e := newEnv(t, neoplesim.Options{})
	const rate, burst, n = 50, 1, 60
	c := e.client(t, provider.WorkloadMarket, func(c *provider.ClientConfig) { c.Rate, c.Burst = rate, burst })
	id := e.sim.Catalog()[0].ItemID
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range n / 4 {
				if _, err := c.AuctionSold(context.Background(), id); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	ks := e.sim.KeyStats(neoplesim.DefaultMarketKey)
	// The bucket allows rate+burst in any second of sending; arrival jitter on a loaded
	// machine can shift a few into the next second, hence the slack. Unlimited, four
	// goroutines send hundreds per second.
	if ks.Total != n || ks.MaxPerSecond > rate+burst+10 {
		t.Fatalf("simulator saw %+v, want %d requests and at most ~%d in any second", ks, n, rate+burst)
	}
	if st := c.Stats(); st.Requests != n || st.Errors != 0 || st.Waited == 0 {
		t.Fatalf("client stats %+v", st)
	}
}

func TestPerMinuteBudget(t *testing.T) {
	e := newEnv(t, neoplesim.Options{})
	c := e.client(t, provider.WorkloadMarket, func(c *provider.ClientConfig) { c.PerMinute = 3 })
	id := e.sim.Catalog()[0].ItemID
	for range 3 {
		if _, err := c.Auction(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	// The fourth would have to wait a minute; a caller with less time is told at once.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Auction(ctx, id)
	if pe := wantClass(t, err, provider.ClassRateLimited); pe.RetryAfter <= 5*time.Second {
		t.Fatalf("RetryAfter %s, want most of a minute", pe.RetryAfter)
	}
	// The client's own budget refused, not the provider: nothing to cool the key down for.
	if _, ok := provider.RateLimitAnswer(err); ok {
		t.Fatalf("the client's own refusal counts as the provider's answer: %v", err)
	}
	if got := e.sim.KeyStats(neoplesim.DefaultMarketKey).Total; got != 3 {
		t.Fatalf("simulator saw %d requests, want 3", got)
	}
}

func TestCancelledWhileWaiting(t *testing.T) {
	e := newEnv(t, neoplesim.Options{})
	c := e.client(t, provider.WorkloadMarket, func(c *provider.ClientConfig) { c.PerMinute = 1 })
	id := e.sim.Catalog()[0].ItemID
	if _, err := c.Auction(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Auction(ctx, id); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

func TestNewClientNeedsItsOwnKey(t *testing.T) {
	_, err := provider.NewClient(provider.ClientConfig{Workload: provider.WorkloadMarket, BaseURL: "http://x", Key: " "})
	if err == nil || !strings.Contains(err.Error(), "NEOPLE_MARKET_API_KEY is not set") {
		t.Fatalf("got %v", err)
	}
	pc := config.Default().Provider
	pc.MarketKey = "market-secret"
	if c, err := provider.FromConfig(pc, provider.WorkloadMarket, nil); err != nil || c.Workload() != provider.WorkloadMarket {
		t.Fatalf("FromConfig(market): %v", err)
	}
	_, err = provider.FromConfig(pc, provider.WorkloadItem, nil)
	if err == nil || !strings.Contains(err.Error(), "NEOPLE_ITEM_API_KEY") || strings.Contains(err.Error(), "market-secret") {
		t.Fatalf("item workload must not fall back to the market key: %v", err)
	}
	for _, bad := range []provider.ClientConfig{
		{Workload: "other", BaseURL: "http://x", Key: "k"},
		{Workload: provider.WorkloadItem, BaseURL: "ftp://x", Key: "k"},
		{Workload: provider.WorkloadItem, BaseURL: "http://x", Key: "k", KeyIn: "cookie"},
		{Workload: provider.WorkloadItem, BaseURL: "http://x", Key: "k", Rate: -1},
	} {
		if _, err := provider.NewClient(bad); err == nil {
			t.Errorf("NewClient(%+v) accepted", bad)
		}
	}
	// A proxy's credentials in the base URL, or a key put in its query, stay out of the refusal.
	for _, bad := range []provider.ClientConfig{
		{Workload: provider.WorkloadItem, BaseURL: "ftp://user:pr0xy-pw@x/?apikey=k3y", Key: "k"},
		{Workload: provider.WorkloadItem, BaseURL: "http://user:pr0xy-pw@x/?apikey=k3y", Key: "k", Rate: -1},
	} {
		_, err := provider.NewClient(bad)
		if err == nil || strings.Contains(err.Error(), "pr0xy-pw") || strings.Contains(err.Error(), "k3y") {
			t.Errorf("NewClient with base URL %s: %v, want a refusal without the password or the key", bad.BaseURL, err)
		}
	}
}

type observed struct {
	mu       sync.Mutex
	requests []string
	took     []time.Duration
	waited   time.Duration
	waits    int
}

func (o *observed) Request(w provider.Workload, endpoint, outcome string, took time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.requests = append(o.requests, string(w)+" "+endpoint+" "+outcome)
	o.took = append(o.took, took)
}

func (o *observed) Waited(_ provider.Workload, took time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.waited += took
	o.waits++
}

// The request duration covers the HTTP call alone: a call held back by the limiter reports
// the wait apart from the request.
func TestObserverSeparatesRequestFromLimiterWait(t *testing.T) {
	if testing.Short() {
		t.Skip("waits 2 s for the limiter")
	}
	e := newEnv(t, neoplesim.Options{Items: 3})
	// One request every 2 s: the second call waits about 2 s for the limiter.
	c := e.client(t, provider.WorkloadMarket, func(c *provider.ClientConfig) { c.Rate, c.Burst = 0.5, 1 })
	o := &observed{}
	c.SetObserver(o)
	id := e.sim.Catalog()[0].ItemID
	for range 2 {
		if _, err := c.Auction(context.Background(), id); err != nil {
			t.Fatal(err)
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.requests) != 2 || o.requests[0] != "market /df/auction ok" || o.requests[1] != "market /df/auction ok" {
		t.Fatalf("requests observed: %q", o.requests)
	}
	if o.waited < time.Second {
		t.Fatalf("limiter wait observed %s, want about 2 s or more", o.waited)
	}
	for i, d := range o.took {
		if d >= time.Second {
			t.Fatalf("request %d took %s: the limiter wait leaked into the request duration", i, d)
		}
	}
}

// A held call sends nothing until the hold lets it go, then waits for the limiter again (the
// calls held meanwhile go out at its pace, not at once); one whose context ends while held
// fails as transient and sends nothing.
func TestHeldCallSendsNothingUntilReleased(t *testing.T) {
	e := newEnv(t, neoplesim.Options{Items: 3})
	c := e.client(t, provider.WorkloadMarket, nil)
	o := &observed{}
	c.SetObserver(o)
	entered, release := make(chan struct{}), make(chan struct{})
	holds := 0
	c.SetHold(func(ctx context.Context) (bool, error) {
		holds++
		if holds > 1 {
			return false, nil
		}
		close(entered)
		select {
		case <-release:
			return true, nil
		case <-ctx.Done():
			return true, ctx.Err()
		}
	})
	id := e.sim.Catalog()[0].ItemID
	done := make(chan error, 1)
	go func() {
		_, err := c.Auction(context.Background(), id)
		done <- err
	}()
	select {
	case <-entered:
	case err := <-done:
		t.Fatalf("the call ended (%v) without asking the hold", err)
	}
	if n := e.sim.Stats().Requests; n != 0 {
		t.Fatalf("%d requests sent while held, want 0", n)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	o.mu.Lock()
	waits, requests := o.waits, len(o.requests)
	o.mu.Unlock()
	if n := e.sim.Stats().Requests; n != 1 || holds != 2 || requests != 1 || waits != 2 {
		t.Fatalf("after release: %d requests (%d observed), hold asked %d times, limiter waited %d times: want 1, 2, 2 (the limiter is waited for again)", n, requests, holds, waits)
	}

	ctx, cancel := context.WithCancel(context.Background())
	c.SetHold(func(ctx context.Context) (bool, error) {
		cancel()
		<-ctx.Done()
		return true, ctx.Err()
	})
	_, err := c.Auction(ctx, id)
	if provider.ClassOf(err) != provider.ClassTransient || !errors.Is(err, context.Canceled) {
		t.Fatalf("held until the context ended: %v (class %v), want a transient error wrapping context.Canceled", err, provider.ClassOf(err))
	}
	if n := e.sim.Stats().Requests; n != 1 {
		t.Fatalf("%d requests in all, want the one released", n)
	}
}

// A gateway page that echoes the request URL, key and all, cut by the error's excerpt right
// inside the key: no part of the key may reach the error (which goes to last_error, the
// status reason, logs and the console).
func TestAKeyCutByTheExcerptIsStillRedacted(t *testing.T) {
	const key = "0123456789abcdef0123456789abcdef"
	for _, body := range []string{
		"<html>" + strings.Repeat("x", 110) + "GET /df/auction?apikey=" + key + "</html>",
		`{"error":{"status":500,"code":"X` + key + `","message":"` + strings.Repeat("y", 190) + key + `"}}`,
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusBadGateway)
			_, _ = io.WriteString(w, body)
		}))
		c, err := provider.NewClient(provider.ClientConfig{Workload: provider.WorkloadMarket, BaseURL: srv.URL, Key: key, KeyIn: "query"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Auction(context.Background(), "785e56a0ed4e3efd573da1f56a45217d")
		srv.Close()
		var pe *provider.Error
		if !errors.As(err, &pe) {
			t.Fatalf("error %v", err)
		}
		for _, text := range []string{err.Error(), pe.Message, pe.Code} {
			if strings.Contains(text, key[:8]) {
				t.Errorf("part of the key shows: %q", text)
			}
		}
	}
}

// Whatever answers in the API's place (a web server's 404 page, a redirect, the API's own
// "no such URL") is told apart from an item's error: the class ends a pass, and the error names
// the key to fix and the address, without the address's credentials or query.
func TestAnAddressThatIsNotTheAPINamesTheKey(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
	}{
		{404, `<html>Not Found</html>`},
		{400, `Bad Request`},
		{301, ``},
		{404, `{"error":{"status":404,"code":"DNF900","message":"INVALID_URL"}}`},
	} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			if c.status == 301 {
				w.Header().Set("Location", "https://elsewhere.invalid/")
			}
			w.WriteHeader(c.status)
			_, _ = w.Write([]byte(c.body))
		}))
		base := strings.Replace(srv.URL, "http://", "http://user:hunter2@", 1) + "/df"
		cl, err := provider.NewClient(provider.ClientConfig{Workload: provider.WorkloadMarket, BaseURL: base, Key: "k"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = cl.Auction(context.Background(), "785e56a0ed4e3efd573da1f56a45217d")
		srv.Close()
		wantClass(t, err, provider.ClassEndpoint)
		if msg := err.Error(); !strings.Contains(msg, "provider.base_url") || !strings.Contains(msg, srv.URL+"/df") || strings.Contains(msg, "hunter2") {
			t.Fatalf("HTTP %d: error %q; want provider.base_url and the address without its password", c.status, msg)
		}
	}
}

// A call whose deadline is noticed long after it passed was stalled by this process (a paused
// VM, SIGSTOP), not slowed by the provider: its error says so (provider.ErrStalled), so that the
// health monitor leaves the provider's status alone. A timeout noticed on time is the provider's.
func TestATimeoutNoticedLateIsThisProcessesStall(t *testing.T) {
	sim := neoplesim.New(neoplesim.Options{})
	sim.SetFaults(neoplesim.Faults{TimeoutRate: 1})
	slow := httptest.NewServer(sim)
	defer slow.Close()
	c, err := provider.NewClient(provider.ClientConfig{
		Workload: provider.WorkloadMarket, BaseURL: slow.URL, Key: neoplesim.DefaultMarketKey, Timeout: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	id := sim.Catalog()[0].ItemID
	_, err = c.Auction(context.Background(), id)
	wantClass(t, err, provider.ClassTransient)
	if !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, provider.ErrStalled) {
		t.Fatalf("a timeout noticed on time: %v; want the provider's timeout, not a stall", err)
	}
	// A connection the other end closed: the provider's failure, unless it is read only long
	// after the call's deadline (the close waited in the socket while this process was stopped).
	closing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}))
	defer closing.Close()
	cc, err := provider.NewClient(provider.ClientConfig{
		Workload: provider.WorkloadMarket, BaseURL: closing.URL, Key: neoplesim.DefaultMarketKey, Timeout: time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Auction(context.Background(), id); errors.Is(err, provider.ErrStalled) || err == nil {
		t.Fatalf("a connection closed at once: %v; want the provider's failure, not a stall", err)
	}

	provider.StopProcessFor(t, 2*time.Minute)
	_, err = c.Auction(context.Background(), id)
	wantClass(t, err, provider.ClassTransient)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, provider.ErrStalled) {
		t.Fatalf("a timeout noticed two minutes late: %v; want it marked a stall of this process", err)
	}
	if _, err := cc.Auction(context.Background(), id); !errors.Is(err, provider.ErrStalled) {
		t.Fatalf("a closed connection read a minute past the call's deadline: %v; want it marked a stall", err)
	}
}

// What an answer ending every pass says: a redirect or "no such URL" (under any status) names
// provider.base_url; an unknown gateway code says it is not in the table, not that the address
// is wrong.
func TestEndpointAnswersSayWhy(t *testing.T) {
	for _, c := range []struct {
		status int
		body   string
		want   string
	}{
		{302, `{"error":{"status":302,"code":"API006","message":"?"}}`, "check provider.base_url"},
		{200, `{"error":{"status":404,"code":"API900","message":"INVALID_URL"}}`, "check provider.base_url"},
		{400, `{"error":{"status":400,"code":"API006","message":"INVALID_HEADER"}}`, "not in the documented table"},
	} {
		err := stubAuction(t, c.status, c.body, "")
		if wantClass(t, err, provider.ClassEndpoint); !strings.Contains(err.Error(), c.want) {
			t.Errorf("HTTP %d %s: %v, want it to say %q", c.status, c.body, err, c.want)
		}
	}
}

// A bare 401/403 (no Neople error body) is still a refusal that stops the workload, but its
// error does not blame the key alone: a proxy, a firewall or an address block answers so too.
func TestARefusalWithoutTheAPIsBodyNamesWhatElseMayRefuse(t *testing.T) {
	for _, status := range []int{401, 403} {
		err := stubAuction(t, status, `<html><body>Access denied</body></html>`, "")
		if wantClass(t, err, provider.ClassConfig); !strings.Contains(err.Error(), "NEOPLE_MARKET_API_KEY") || !strings.Contains(err.Error(), "firewall") {
			t.Errorf("HTTP %d without a Neople body: %v; want the key and what else may refuse named", status, err)
		}
	}
	err := stubAuction(t, 401, `{"error":{"status":401,"code":"API001","message":"INVALID_APIKEY"}}`, "")
	if wantClass(t, err, provider.ClassConfig); strings.Contains(err.Error(), "firewall") || !strings.Contains(err.Error(), "refused the key in NEOPLE_MARKET_API_KEY") {
		t.Errorf("the API's own refusal: %v; want the key named alone", err)
	}
}

// stubAuction makes one /df/auction call to a server answering status and body (a 302 with a
// Location elsewhere, a Retry-After when given) and returns the call's error.
func stubAuction(t *testing.T, status int, body, retryAfter string) error {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		if status == 302 {
			w.Header().Set("Location", "http://elsewhere.invalid/df/auction")
		}
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	defer srv.Close()
	cl, err := provider.NewClient(provider.ClientConfig{Workload: provider.WorkloadMarket, BaseURL: srv.URL, Key: "sentinel-key-0123"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = cl.Auction(context.Background(), "785e56a0ed4e3efd573da1f56a45217d")
	return err
}
