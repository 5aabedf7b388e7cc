package provider

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/config"
)

// ClientConfig builds one workload's client. Zero values take the defaults noted; Key and
// BaseURL are required.
type ClientConfig struct {
	Workload     Workload
	BaseURL      string
	Key          string
	KeyIn        string        // "header" (default) or "query"
	Timeout      time.Duration // per HTTP request, limiter waits excluded; default 10s
	MaxBodyBytes int64         // default MaxBodyBytesDefault
	Rate         float64       // requests per second; default 500
	Burst        int           // default 50
	PerMinute    int           // requests in any rolling 60 s; default 30000
	AuctionLimit int           // rows per /df/auction call; default and cap 400
	SoldLimit    int           // rows per /df/auction-sold call; default and cap 100
	HTTPClient   *http.Client  // optional; its Timeout and redirect policy then apply
	// FutureTolerance is how far past our clock a sale or listing may be dated before the
	// row is dropped; default FutureToleranceDefault.
	FutureTolerance time.Duration
	// MaxRetryAfter caps a Retry-After the provider asks for; default MaxRetryAfterDefault.
	MaxRetryAfter time.Duration
	// Log hears about rows dropped at the boundary (one line per answer); default none.
	Log *zap.Logger
}

// Limits no operator needs to turn; tests set ClientConfig's fields instead.
const (
	// MaxBodyBytesDefault caps an answer's body: the largest real answer is far below it.
	MaxBodyBytesDefault int64 = 8 << 20
	// FutureToleranceDefault: a sale or listing dated further ahead than this is dropped.
	FutureToleranceDefault = 24 * time.Hour
	// MaxRetryAfterDefault caps the provider's Retry-After, so a bogus one cannot park a key.
	MaxRetryAfterDefault = 5 * time.Minute
)

// Client calls the endpoints of one workload with that workload's key and budget. It is safe
// for concurrent use.
type Client struct {
	cfg      ClientConfig
	base     *url.URL
	http     *http.Client
	lim      *limiter
	redactor *strings.Replacer
	obs      RequestObserver
	hold     Hold

	requests, failures atomic.Int64
	rejected           [len(RejectReasons)]atomic.Int64 // by RejectReasons
}

// RequestObserver hears every HTTP request's duration and outcome ("ok" or the error class)
// and every wait on the client's own limiter, so the two can be told apart.
type RequestObserver interface {
	Request(w Workload, endpoint, outcome string, took time.Duration)
	Waited(w Workload, took time.Duration)
}

// SetObserver installs o; call it before the client is used.
func (c *Client) SetObserver(o RequestObserver) { c.obs = o }

// Hold is asked after the limiter's wait, the last moment before a request goes out. It
// returns false at once when the request may go; otherwise it waits until it may and returns
// true, or returns ctx's error. The daemon holds its calls while the database refuses writes:
// a result could not be stored, and a call that passed the dispatcher's own check earlier
// (queued on the budget when writes stopped) must not reach the provider either.
type Hold func(ctx context.Context) (held bool, err error)

// SetHold installs h; call it before the client is used.
func (c *Client) SetHold(h Hold) { c.hold = h }

// Route names used as Error.Endpoint: paths without the query or the item id.
const (
	EndpointAuction     = "/df/auction"
	EndpointAuctionSold = "/df/auction-sold"
	EndpointItems       = "/df/items"
	EndpointItem        = "/df/items/{itemId}"
)

// Caps the API applies to limit.
const (
	MaxAuctionLimit = 400
	MaxSoldLimit    = 100
	MaxItemsLimit   = 30
)

// NewClient validates cfg, fills defaults and builds the client.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Workload != WorkloadMarket && cfg.Workload != WorkloadItem {
		return nil, fmt.Errorf("neople client: unknown workload %q", cfg.Workload)
	}
	if strings.TrimSpace(cfg.Key) == "" {
		return nil, fmt.Errorf("%s is not set: the %s workload needs its own key (there is no shared fallback)",
			cfg.Workload.KeyEnv(), cfg.Workload)
	}
	if cfg.Rate < 0 || cfg.Burst < 0 || cfg.PerMinute < 0 || cfg.Timeout < 0 || cfg.MaxBodyBytes < 0 ||
		cfg.AuctionLimit < 0 || cfg.SoldLimit < 0 || cfg.FutureTolerance < 0 || cfg.MaxRetryAfter < 0 {
		return nil, fmt.Errorf("neople %s client: negative limit in %+v", cfg.Workload, redactedConfig(cfg))
	}
	base, err := url.Parse(cfg.BaseURL)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" || base.RawQuery != "" {
		return nil, fmt.Errorf("neople %s client: base URL %q must be an http(s) URL without a query", cfg.Workload, shownURL(cfg.BaseURL))
	}
	base.Path = strings.TrimRight(base.Path, "/")
	switch cfg.KeyIn {
	case "":
		cfg.KeyIn = config.Default().Provider.KeyIn
	case "header", "query":
	default:
		return nil, fmt.Errorf("neople %s client: key_in %q: allowed header, query", cfg.Workload, cfg.KeyIn)
	}
	// Zero fields take the provider.* defaults, which config owns.
	def := config.Default().Provider
	cfg.Timeout = orDefault(cfg.Timeout, def.Timeout)
	cfg.MaxBodyBytes = orDefault(cfg.MaxBodyBytes, MaxBodyBytesDefault)
	cfg.Rate = orDefault(cfg.Rate, def.Market.Rate)
	cfg.Burst = orDefault(cfg.Burst, def.Market.Burst)
	cfg.PerMinute = orDefault(cfg.PerMinute, def.Market.PerMinute)
	cfg.AuctionLimit = min(orDefault(cfg.AuctionLimit, def.AuctionLimit), MaxAuctionLimit)
	cfg.SoldLimit = min(orDefault(cfg.SoldLimit, def.SoldLimit), MaxSoldLimit)
	cfg.FutureTolerance = orDefault(cfg.FutureTolerance, FutureToleranceDefault)
	cfg.MaxRetryAfter = orDefault(cfg.MaxRetryAfter, MaxRetryAfterDefault)
	if cfg.Log == nil {
		cfg.Log = zap.NewNop()
	}

	hc := cfg.HTTPClient
	if hc == nil {
		// The default keeps only 2 idle connections per host, which churns connections
		// under a collector's concurrency.
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 64
		// The API does not redirect, and following one would hand the apikey header to
		// whatever host the Location names.
		hc = &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	// The key as it can appear in any text: raw, or escaped inside a URL.
	k := cfg.Key
	redactor := strings.NewReplacer(k, "[redacted]", url.QueryEscape(k), "[redacted]", url.PathEscape(k), "[redacted]")
	return &Client{
		cfg: cfg, base: base, http: hc, redactor: redactor,
		lim: newLimiter(cfg.Rate, cfg.Burst, cfg.PerMinute),
	}, nil
}

// FromConfig builds the client for workload w from the provider section and its key; log
// (may be nil) hears about rows dropped at the boundary.
func FromConfig(pc config.ProviderConfig, w Workload, log *zap.Logger) (*Client, error) {
	var key config.Secret
	var lim config.WorkloadLimits
	switch w {
	case WorkloadMarket:
		key, lim = pc.MarketKey, pc.Market
	case WorkloadItem:
		key, lim = pc.ItemKey, pc.Item
	default:
		return nil, fmt.Errorf("neople client: unknown workload %q", w)
	}
	return NewClient(ClientConfig{
		Workload: w, BaseURL: pc.BaseURL, Key: key.Reveal(), KeyIn: pc.KeyIn,
		Timeout: pc.Timeout,
		Rate:    lim.Rate, Burst: lim.Burst, PerMinute: lim.PerMinute,
		AuctionLimit: pc.AuctionLimit, SoldLimit: pc.SoldLimit,
		Log: log,
	})
}

// Workload is the workload whose key this client holds.
func (c *Client) Workload() Workload { return c.cfg.Workload }

// SetRateFactor scales the per-second rate to f × the configured rate, f clamped to
// [0.01, 1]; used to ramp up gently after an outage. The per-minute ceiling is unchanged.
func (c *Client) SetRateFactor(f float64) { c.lim.setFactor(f) }

// ClientStats counts what the client did since it was built.
type ClientStats struct {
	Requests int64            // HTTP requests sent
	Errors   int64            // calls that returned an error
	Waited   time.Duration    // total time callers spent waiting on the budgets
	Rejected map[string]int64 // rows dropped at the boundary, by reason (every reason present)
	Rate     float64          // per-second rate in force: the configured rate × SetRateFactor's factor
}

// Stats reports the counters.
func (c *Client) Stats() ClientStats {
	rej := make(map[string]int64, len(RejectReasons))
	for i, r := range RejectReasons {
		rej[r] = c.rejected[i].Load()
	}
	return ClientStats{Requests: c.requests.Load(), Errors: c.failures.Load(), Waited: time.Duration(c.lim.waited.Load()), Rejected: rej,
		Rate: float64(c.lim.bucket.Limit())}
}

// checked drops the rows of an answer that fail the row check, counts them, logs them once
// for the answer naming the items whose rows were dropped, and turns an answer with rows but
// none left into a ClassRejected error, unless all it dropped were impossible amounts.
func checked[T any](c *Client, endpoint string, ids []string, rows []T, err error,
	check func(RowCheck, []T, IDSet) ([]T, Rejected)) ([]T, error) {
	if err != nil || len(rows) == 0 {
		return rows, err
	}
	kept, rej := check(RowCheck{Now: time.Now(), FutureTolerance: c.cfg.FutureTolerance}, rows, NewIDSet(ids...))
	if rej.Total() == 0 {
		return rows, nil
	}
	for i, r := range RejectReasons {
		c.rejected[i].Add(int64(rej.Reasons[r]))
	}
	c.cfg.Log.Warn("provider rows rejected", zap.Strings("item_ids", cleanIDs(rej.ItemIDs, rejectedIDs)),
		zap.Strings("asked_item_ids", ids), zap.String("endpoint", endpoint),
		zap.Int("rows", len(rows)), zap.Int("rejected", rej.Total()), zap.Stringer("reasons", rej))
	if len(kept) == 0 && rej.Total() > rej.Reasons[RejectBadAmount] {
		return nil, c.fail(&Error{Class: ClassRejected, Endpoint: endpoint, Status: http.StatusOK,
			Err: fmt.Errorf("all %d rows rejected (%s)", len(rows), rej)})
	}
	// Rows of the asked items at possible dates, only their amounts impossible, are dropped
	// as rows: the answer is about the right items, and failing it whole failed the item's
	// every collection (its listings too) for as long as one such sale stayed in the answer.
	return kept, nil
}

// cleanIDs is at most n ids as they may appear in a log line (a foreign row's id is provider text).
func cleanIDs(ids []string, n int) []string {
	out := make([]string, 0, min(len(ids), n))
	for _, id := range ids[:min(len(ids), n)] {
		out = append(out, Clean(id, 64))
	}
	return out
}

// Answer is one market call's answer: the rows kept, how many rows the provider sent before
// the row check (an answer is cut at its limit by what was sent, so a full answer with a
// dropped row is still full), and its Date header, when the provider answered by its own clock
// (zero without one).
type Answer[T any] struct {
	Rows []T
	Sent int
	Date time.Time
}

// ClockTrust is how far an answer's Date may be from our clock and still be read as the
// provider's: further off, it is a broken header or a stale copy, not a clock.
const ClockTrust = time.Hour

// AnsweredAt is when the provider answered by the clock it dates its rows with: its Date
// header, or ours (at, read just before the call) when the answer has none or one ClockTrust
// or more from ours. Which seconds of a sales page have settled is judged by it, so a
// provider whose clock trails ours is not read as further on than it is.
func (a Answer[T]) AnsweredAt(at time.Time) time.Time {
	if a.Date.IsZero() || a.Date.Sub(at).Abs() >= ClockTrust {
		return at
	}
	return a.Date
}

// answerOf checks rows and makes them an Answer.
func answerOf[T any](c *Client, endpoint string, ids []string, rows []T, date time.Time, err error,
	check func(RowCheck, []T, IDSet) ([]T, Rejected)) (Answer[T], error) {
	sent := len(rows)
	rows, err = checked(c, endpoint, ids, rows, err, check)
	return Answer[T]{Rows: rows, Sent: sent, Date: date}, err
}

// Auction returns the current listings of one item, cheapest first, at most AuctionLimit rows.
func (c *Client) Auction(ctx context.Context, itemID string) (Answer[Listing], error) {
	q := url.Values{"itemId": {itemID}, "sort": {"unitPrice:asc"}, "limit": {strconv.Itoa(c.cfg.AuctionLimit)}}
	rows, date, err := call(ctx, c, WorkloadMarket, EndpointAuction, "", itemID, q, parseAuction)
	return answerOf(c, EndpointAuction, []string{itemID}, rows, date, err, RowCheck.Listings)
}

// AuctionSold returns the latest sales of one item, newest first as the API orders them, at
// most SoldLimit rows. Identical rows are distinct sales.
func (c *Client) AuctionSold(ctx context.Context, itemID string) (Answer[Sale], error) {
	q := url.Values{"itemId": {itemID}, "limit": {strconv.Itoa(c.cfg.SoldLimit)}}
	rows, date, err := call(ctx, c, WorkloadMarket, EndpointAuctionSold, "", itemID, q, parseSold)
	return answerOf(c, EndpointAuctionSold, []string{itemID}, rows, date, err, RowCheck.Sales)
}

// MaxItemIDs is how many ids one itemIds call may name (more is DNF008).
const MaxItemIDs = 10

// AuctionMany returns the current listings of up to MaxItemIDs items in one itemIds call,
// sorted by unit price, at most AuctionLimit rows. Whether the
// limit counts per call or per item, and how rows of several items are ordered, is unknown:
// split the rows by ItemID and judge each item's part with the packing rules before trusting it.
func (c *Client) AuctionMany(ctx context.Context, itemIDs []string) (Answer[Listing], error) {
	ids, err := c.joinIDs(EndpointAuction, itemIDs)
	if err != nil {
		return Answer[Listing]{}, err
	}
	q := url.Values{"itemIds": {ids}, "sort": {"unitPrice:asc"}, "limit": {strconv.Itoa(c.cfg.AuctionLimit)}}
	rows, date, err := call(ctx, c, WorkloadMarket, EndpointAuction, "", ids, q, parseAuction)
	return answerOf(c, EndpointAuction, itemIDs, rows, date, err, RowCheck.Listings)
}

// AuctionSoldMany returns the latest sales of up to MaxItemIDs items in one itemIds call, with
// the same caveats as AuctionMany.
func (c *Client) AuctionSoldMany(ctx context.Context, itemIDs []string) (Answer[Sale], error) {
	ids, err := c.joinIDs(EndpointAuctionSold, itemIDs)
	if err != nil {
		return Answer[Sale]{}, err
	}
	q := url.Values{"itemIds": {ids}, "limit": {strconv.Itoa(c.cfg.SoldLimit)}}
	rows, date, err := call(ctx, c, WorkloadMarket, EndpointAuctionSold, "", ids, q, parseSold)
	return answerOf(c, EndpointAuctionSold, itemIDs, rows, date, err, RowCheck.Sales)
}

// AuctionLimit and SoldLimit are the limits this client asks for: an answer with that many
// rows may have been cut.
func (c *Client) AuctionLimit() int { return c.cfg.AuctionLimit }

// SoldLimit: see AuctionLimit.
func (c *Client) SoldLimit() int { return c.cfg.SoldLimit }

// PackLimit is how many ids AuctionMany and AuctionSoldMany take.
func (c *Client) PackLimit() int { return MaxItemIDs }

func (c *Client) joinIDs(endpoint string, ids []string) (string, error) {
	if len(ids) == 0 || len(ids) > MaxItemIDs {
		return "", c.fail(&Error{Class: ClassBug, Endpoint: endpoint,
			Err: fmt.Errorf("itemIds takes 1 to %d ids, got %d", MaxItemIDs, len(ids))})
	}
	for _, id := range ids {
		if strings.TrimSpace(id) == "" || strings.Contains(id, ",") {
			return "", c.fail(&Error{Class: ClassBug, Endpoint: endpoint, Err: fmt.Errorf("item id %q cannot go in itemIds", id)})
		}
	}
	return strings.Join(ids, ","), nil
}

// SearchItems searches the catalog by name. wordType is "match" (exact, the API's default
// when ""), "front" (prefix) or "full" (contains). limit <= 0 or above 30 means 30.
func (c *Client) SearchItems(ctx context.Context, name, wordType string, limit int) ([]Item, error) {
	switch wordType {
	case "", "match", "front", "full":
	default:
		return nil, c.fail(&Error{Class: ClassBug, Endpoint: EndpointItems,
			Err: fmt.Errorf("wordType %q: allowed match, front, full", wordType)})
	}
	if limit <= 0 || limit > MaxItemsLimit {
		limit = MaxItemsLimit
	}
	q := url.Values{"itemName": {name}, "limit": {strconv.Itoa(limit)}}
	if wordType != "" {
		q.Set("wordType", wordType)
	}
	rows, _, err := call(ctx, c, WorkloadItem, EndpointItems, "", name, q, parseItems)
	if IsNotFound(err) {
		return []Item{}, nil
	}
	return rows, err
}

// GetItem returns one item by id.
func (c *Client) GetItem(ctx context.Context, itemID string) (Item, error) {
	item, _, err := call(ctx, c, WorkloadItem, EndpointItem, "/df/items/"+itemID, itemID, url.Values{}, parseItem)
	return item, err
}

// call runs one request: workload guard, budgets, HTTP, classification, parsing. path
// defaults to endpoint; arg is the required parameter, which must not be blank. It returns
// the answer's Date header too (zero without one).
func call[T any](ctx context.Context, c *Client, w Workload, endpoint, path, arg string, q url.Values, parse func([]byte) (T, error)) (T, time.Time, error) {
	var zero T
	if c.cfg.Workload != w {
		return zero, time.Time{}, c.fail(&Error{Class: ClassBug, Endpoint: endpoint,
			Err: fmt.Errorf("%s is a %s endpoint; this client holds the %s key", endpoint, w, c.cfg.Workload)})
	}
	if strings.TrimSpace(arg) == "" {
		return zero, time.Time{}, c.fail(&Error{Class: ClassBug, Endpoint: endpoint, Err: errors.New("empty item id or name")})
	}
	if err := c.waitToSend(ctx, endpoint); err != nil {
		return zero, time.Time{}, c.fail(err)
	}
	if path == "" {
		path = endpoint
	}
	t0 := time.Now()
	ans, derr := c.do(ctx, endpoint, path, q)
	took := time.Since(t0)
	var v T
	var perr error
	if derr == nil {
		if v, perr = decode(parse, ans.body); perr != nil {
			derr = &Error{Class: ClassTransient, Endpoint: endpoint, Status: http.StatusOK, Err: perr}
			// An error body with a 200 (the API's, or a gateway's in front of it): its code
			// says what it is, as it does under any other status: a maintenance or a rate
			// limit, not a malformed answer counting toward DEGRADED.
			if code, msg := parseEnvelope([]byte(c.redactor.Replace(string(ans.body)))); code != "" {
				derr = &Error{Class: classify(http.StatusOK, code, msg), Endpoint: endpoint, Status: http.StatusOK, Code: code, Message: msg}
				switch derr.Class {
				case ClassEndpoint:
					derr.Err = c.endpointCause(http.StatusOK, code)
				case ClassRateLimited:
					derr.RetryAfter = ans.retryAfter
				}
			}
		}
	}
	if c.obs != nil {
		outcome := "ok"
		if derr != nil {
			outcome = derr.Class.String()
		}
		c.obs.Request(c.cfg.Workload, endpoint, outcome, took)
	}
	if derr != nil {
		return zero, time.Time{}, c.fail(derr)
	}
	return v, ans.date, nil
}

// parseSlots bounds the answers decoded at once to one fewer than the Ps, so collection bursts
// leave a P free for the read API and the network poller.
var parseSlots = make(chan struct{}, max(1, runtime.GOMAXPROCS(0)-1))

// decode parses body in one of parseSlots.
func decode[T any](parse func([]byte) (T, error), body []byte) (T, error) {
	parseSlots <- struct{}{}
	defer func() { <-parseSlots }()
	return parse(body)
}

// reply is a 200's body with what its headers say: when it was answered (Date, zero without
// one) and how long a rate limit carried in the body asks to wait (Retry-After, capped; 0
// without one).
type reply struct {
	body       []byte
	date       time.Time
	retryAfter time.Duration
}

// do sends one GET and returns a 200's reply; anything else becomes an *Error.
func (c *Client) do(ctx context.Context, endpoint, path string, q url.Values) (reply, *Error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	u := *c.base
	u.Path += path
	if c.cfg.KeyIn == "query" {
		q.Set("apikey", c.cfg.Key)
	}
	u.RawQuery = q.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return reply{}, &Error{Class: ClassBug, Endpoint: endpoint, Err: stripURL(err, endpoint)}
	}
	req.Header.Set("Accept", "application/json")
	if c.cfg.KeyIn == "header" {
		req.Header.Set("apikey", c.cfg.Key)
	}
	c.requests.Add(1)
	sent := time.Now()
	resp, err := c.http.Do(req)
	if err != nil {
		return reply{}, &Error{Class: ClassTransient, Endpoint: endpoint, Err: stalled(ctx, sent, stripURL(err, endpoint))}
	}
	defer resp.Body.Close()
	fail := func(class Class, err error) *Error {
		return &Error{Class: class, Endpoint: endpoint, Status: resp.StatusCode, Err: err}
	}
	tooBig := fmt.Errorf("response body exceeds %d bytes (provider.MaxBodyBytesDefault)", c.cfg.MaxBodyBytes)
	if resp.ContentLength > c.cfg.MaxBodyBytes {
		return reply{}, fail(ClassTransient, tooBig)
	}
	// Read into a buffer of the announced size: io.ReadAll grows every answer from 512 bytes,
	// which at hundreds of answers a second was the daemon's largest garbage. Not a pool: kept
	// buffers, one per call in flight at the largest answer's size, added 10 MiB to
	// collect-due's peak RSS (BENCHMARKS.md).
	var buf bytes.Buffer
	if resp.ContentLength > 0 {
		buf.Grow(int(resp.ContentLength) + bytes.MinRead)
	}
	_, err = buf.ReadFrom(io.LimitReader(resp.Body, c.cfg.MaxBodyBytes+1))
	body := buf.Bytes()
	if err != nil {
		return reply{}, fail(ClassTransient, stalled(ctx, sent, fmt.Errorf("reading response body: %w", stripURL(err, endpoint))))
	}
	if int64(len(body)) > c.cfg.MaxBodyBytes {
		return reply{}, fail(ClassTransient, tooBig)
	}
	retryAfter := func() time.Duration {
		v := resp.Header.Get("Retry-After")
		if v == "" {
			return 0
		}
		return min(parseRetryAfter(v, answeredAt(resp)), c.cfg.MaxRetryAfter)
	}
	if resp.StatusCode == http.StatusOK {
		date, _ := http.ParseTime(resp.Header.Get("Date"))
		return reply{body: body, date: date, retryAfter: retryAfter()}, nil
	}
	// Redacted before parseEnvelope shortens it: a key cut in half by the excerpt would no
	// longer match the redactor, and its prefix would reach last_error and the console.
	code, msg := parseEnvelope([]byte(c.redactor.Replace(string(body))))
	if loc := resp.Header.Get("Location"); loc != "" {
		msg = "redirect to " + loc
	}
	class := classify(resp.StatusCode, code, msg)
	var cause error
	switch {
	case class == ClassEndpoint:
		cause = c.endpointCause(resp.StatusCode, code)
	case class == ClassConfig && code == "":
		// The API refuses a key with its error body; a bare 401/403 may as well come from a
		// proxy, a firewall or an address block in front of it: the operator checks both.
		cause = fmt.Errorf("refused without the API's error body: the key in %s, or something in front of %s (a proxy, a firewall, a block of this host's address) refused the call",
			c.cfg.Workload.KeyEnv(), shownURL(c.base.String()))
	}
	e := fail(class, cause)
	e.Code, e.Message = code, msg
	if e.Class == ClassRateLimited {
		e.RetryAfter = retryAfter()
	}
	return reply{}, e
}

// endpointCause says why an answer ends every pass: not the API at provider.base_url (a
// redirect, no Neople body, "no such URL"), or a gateway code the documented table lacks.
func (c *Client) endpointCause(status int, code string) error {
	where := shownURL(c.base.String())
	if status >= 400 && code != "" && code != "API900" && code != "DNF900" {
		return fmt.Errorf("%s answered with an error code not in the documented table; every call may meet it, so the pass stops", where)
	}
	return fmt.Errorf("%s does not answer as the Neople API; check provider.base_url", where)
}

// shownURL is a base URL as errors show it: no user part (a proxy's user:password), query or
// fragment (a key placed there by hand).
func shownURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(an unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}

// answeredAt is when the provider answered by its own clock (the Date header), to read a dated
// Retry-After against: this host's clock minutes off would otherwise cool the key down for
// every instance minutes too long, or not at all. Without a Date header, this host's clock.
func answeredAt(resp *http.Response) time.Time {
	if t, err := http.ParseTime(resp.Header.Get("Date")); err == nil {
		return t
	}
	return time.Now()
}

// fail is the one exit for errors: it stamps the workload, counts, and makes sure neither the
// key nor unclean provider text can appear in the error, whatever produced it.
func (c *Client) fail(e *Error) *Error {
	c.failures.Add(1)
	e.Workload = c.cfg.Workload
	e.Message = Clean(c.redactor.Replace(e.Message), MaxMessageRunes)
	e.Code = Clean(c.redactor.Replace(e.Code), 20)
	if e.Class == ClassConfig && e.Err == nil {
		e.Err = fmt.Errorf("the provider refused the key in %s", c.cfg.Workload.KeyEnv())
	}
	if e.Err != nil {
		if s := e.Err.Error(); Clean(c.redactor.Replace(s), MaxErrorRunes) != s {
			e.Err = errors.New(Clean(c.redactor.Replace(s), MaxErrorRunes))
		}
	}
	return e
}

// ErrStalled marks a call that failed because this process did not run, not because of the
// provider: it ended more than StallGrace past its deadline, which a call does only when the
// process was stopped (a paused VM, SIGSTOP) or starved of CPU: its timer fired late, or a
// reset or end of stream that waited in the socket meanwhile was read first. The health
// monitor does not count it against the provider: a daemon resumed after a long stop must not
// mark the provider DEGRADED for every instance with its own late failures.
var ErrStalled = errors.New("this process did not run while the call was in flight")

// StallGrace is how far past a call's deadline it may end before it counts as stalled: far
// beyond what a loaded scheduler delays a timer by.
const StallGrace = 2 * time.Second

// since is time.Since; tests stand in for a process stopped mid-call.
var since = time.Since

// stalled marks err with ErrStalled when the call ended past its deadline (ctx's) by more
// than StallGrace.
func stalled(ctx context.Context, sent time.Time, err error) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		return err
	}
	if late := since(sent) - deadline.Sub(sent); late > StallGrace {
		return fmt.Errorf("%w (%w for about %s)", err, ErrStalled, late.Round(time.Second))
	}
	return err
}

// stripURL replaces the URL inside a *url.Error (which net/http prints whole, query and all)
// with the endpoint, keeping the cause so errors.Is(err, context.DeadlineExceeded) still works.
func stripURL(err error, endpoint string) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return &url.Error{Op: ue.Op, URL: endpoint, Err: ue.Err}
	}
	return err
}

func redactedConfig(cfg ClientConfig) ClientConfig {
	cfg.Key = "[redacted]"
	cfg.BaseURL = shownURL(cfg.BaseURL)
	cfg.HTTPClient = nil
	return cfg
}

func orDefault[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
