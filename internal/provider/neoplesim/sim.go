// Package neoplesim is a simulator of the Neople Open API auction and item endpoints: it checks
// per-workload keys, enforces per-key token buckets, switches into maintenance, injects
// latency, errors, timeouts, malformed and oversized bodies, serves deterministic data from a
// seed, and counts what it served so tests and benchmarks can check what a client really did.
package neoplesim

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/duecollector/duecollector/internal/provider"
)

// Default keys, used when Options leaves a key blank.
const (
	DefaultItemKey   = "sim-item-key"
	DefaultMarketKey = "sim-market-key"
)

// Options configures a Server. Zero values: Items 50, keys DefaultItemKey/DefaultMarketKey,
// Rate unlimited, Now time.Now.
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
	// Market is MarketDefault ("" too) or MarketRealistic (market.go).
	Market string
	// RateLimitStatus is the HTTP status of the rate-limit answer: 429 (default) or 400, since
	// the real one is unknown.
	RateLimitStatus int
	// ItemIDsLimit says what limit caps in an itemIds answer: LimitPerCall (default, the whole
	// answer) or LimitPerItem (each item's rows). The real API does not document it.
	ItemIDsLimit string
	// ItemIDsOrder orders an itemIds answer: OrderMerged (default, one order over every item's
	// rows) or OrderGrouped (item by item in the order asked, each in the endpoint's order).
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

// Validate fills the defaults and checks the choices; New panics on what it rejects.
func (o *Options) Validate() error {
	if o.RateLimitStatus == 0 {
		o.RateLimitStatus = http.StatusTooManyRequests
	}
	if o.ItemIDsLimit == "" {
		o.ItemIDsLimit = LimitPerCall
	}
	if o.ItemIDsOrder == "" {
		o.ItemIDsOrder = OrderMerged
	}
	var errs []string
	if o.RateLimitStatus != http.StatusTooManyRequests && o.RateLimitStatus != http.StatusBadRequest {
		errs = append(errs, fmt.Sprintf("rate-limit status %d: allowed 400, 429", o.RateLimitStatus))
	}
	if o.ItemIDsLimit != LimitPerCall && o.ItemIDsLimit != LimitPerItem {
		errs = append(errs, fmt.Sprintf("itemids-limit %q: allowed %s, %s", o.ItemIDsLimit, LimitPerCall, LimitPerItem))
	}
	if o.ItemIDsOrder != OrderMerged && o.ItemIDsOrder != OrderGrouped {
		errs = append(errs, fmt.Sprintf("itemids-order %q: allowed %s, %s", o.ItemIDsOrder, OrderMerged, OrderGrouped))
	}
	if len(errs) > 0 {
		return fmt.Errorf("simulator options: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Faults are injected into /df requests that pass the key and rate checks. Rates are
// probabilities in [0, 1]; at most one fault applies to a request.
type Faults struct {
	Latency       time.Duration
	ErrorRate     float64 // 500 DNF999
	MalformedRate float64 // 200 with a truncated JSON body
	TimeoutRate   float64 // no answer until the client gives up (at most 30 s)
	OversizeRate  float64 // 200 with a valid body of OversizeBytes
	// HostileRate: an error whose text is one of HostileTexts (NUL, EUC-KR, gzip bytes, long
	// Korean), as a 404 DNF003 envelope or a raw 502 body by turns.
	HostileRate float64
	FutureRate  float64 // 200 with an extra row dated 2099 (a sale, or a listing's regDate)
	AncientRate float64 // 200 with an extra row dated 2001, before the game existed
	ForeignRate float64 // 200 whose rows all carry another item's id
	// RetryAfterRate: 429 API002 with Retry-After: 999999999 (about 31 years).
	RetryAfterRate float64
	// HostileMaintenance: maintenance answers carry NUL and EUC-KR bytes in their message.
	HostileMaintenance bool
}

// OversizeBytes is the size of an oversized body: above the client's default 8 MiB cap.
const OversizeBytes = 9 << 20

type faultsJSON struct {
	Latency            string  `json:"latency"`
	ErrorRate          float64 `json:"error_rate"`
	MalformedRate      float64 `json:"malformed_rate"`
	TimeoutRate        float64 `json:"timeout_rate"`
	OversizeRate       float64 `json:"oversize_rate"`
	HostileRate        float64 `json:"hostile_rate"`
	FutureRate         float64 `json:"future_rate"`
	AncientRate        float64 `json:"ancient_rate"`
	ForeignRate        float64 `json:"foreign_rate"`
	RetryAfterRate     float64 `json:"retry_after_rate"`
	HostileMaintenance bool    `json:"hostile_maintenance"`
}

// MarshalJSON writes latency as a duration string ("50ms").
func (f Faults) MarshalJSON() ([]byte, error) {
	return json.Marshal(faultsJSON{f.Latency.String(), f.ErrorRate, f.MalformedRate, f.TimeoutRate, f.OversizeRate,
		f.HostileRate, f.FutureRate, f.AncientRate, f.ForeignRate, f.RetryAfterRate, f.HostileMaintenance})
}

// UnmarshalJSON reads {"latency":"50ms","error_rate":0.1,...}; omitted fields are zero.
func (f *Faults) UnmarshalJSON(b []byte) error {
	var j faultsJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	var lat time.Duration
	if j.Latency != "" {
		var err error
		if lat, err = time.ParseDuration(j.Latency); err != nil || lat < 0 {
			return fmt.Errorf("latency %q: want a duration such as 50ms", j.Latency)
		}
	}
	for name, r := range map[string]float64{"error_rate": j.ErrorRate, "malformed_rate": j.MalformedRate,
		"timeout_rate": j.TimeoutRate, "oversize_rate": j.OversizeRate, "hostile_rate": j.HostileRate,
		"future_rate": j.FutureRate, "ancient_rate": j.AncientRate, "foreign_rate": j.ForeignRate,
		"retry_after_rate": j.RetryAfterRate} {
		if r < 0 || r > 1 {
			return fmt.Errorf("%s %v: want a probability in [0, 1]", name, r)
		}
	}
	*f = Faults{lat, j.ErrorRate, j.MalformedRate, j.TimeoutRate, j.OversizeRate,
		j.HostileRate, j.FutureRate, j.AncientRate, j.ForeignRate, j.RetryAfterRate, j.HostileMaintenance}
	return nil
}

// Server is the simulator; it is an http.Handler, safe for concurrent use.
type Server struct {
	opts     Options
	catalog  []*entry
	byID     map[string]*entry
	keys     map[string]provider.Workload
	limiters map[string]*rate.Limiter
	mux      *http.ServeMux

	mu          sync.Mutex
	maintenance bool
	faults      Faults
	rng         *rand.Rand
	stats       Stats
	seconds     map[string]*secondCount
	tracks      map[string]*track // realistic market: each item's copy (freshness.go)
	resetAt     int64             // sim time of the last stats reset, ms
}

type secondCount struct{ sec, n int64 }

// New builds a simulator. It panics on options that Validate rejects.
func New(opts Options) *Server {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	if opts.Items <= 0 {
		opts.Items = 50
	}
	if opts.ItemKey == "" {
		opts.ItemKey = DefaultItemKey
	}
	if opts.MarketKey == "" {
		opts.MarketKey = DefaultMarketKey
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Market != MarketRealistic {
		opts.Market = MarketDefault
	}
	s := &Server{
		opts:    opts,
		catalog: buildCatalog(opts.Items, opts.Seed),
		byID:    map[string]*entry{},
		keys:    map[string]provider.Workload{opts.ItemKey: provider.WorkloadItem, opts.MarketKey: provider.WorkloadMarket},
		faults:  Faults{Latency: opts.Latency},
		rng:     rand.New(rand.NewPCG(uint64(opts.Seed), 0xfa017)),
	}
	for _, e := range s.catalog {
		s.byID[e.ItemID] = e
		if opts.Market == MarketRealistic {
			e.real = newRealistic(e.h)
		}
	}
	s.tracks = map[string]*track{}
	if opts.Rate > 0 {
		burst := max(1, int(math.Ceil(opts.Rate)))
		s.limiters = map[string]*rate.Limiter{
			opts.ItemKey:   rate.NewLimiter(rate.Limit(opts.Rate), burst),
			opts.MarketKey: rate.NewLimiter(rate.Limit(opts.Rate), burst),
		}
	}
	s.ResetStats()

	m := http.NewServeMux()
	m.HandleFunc("GET /df/items", s.df(provider.EndpointItems, provider.WorkloadItem, s.items))
	m.HandleFunc("GET /df/items/{itemId}", s.df(provider.EndpointItem, provider.WorkloadItem, s.item))
	m.HandleFunc("GET /df/auction", s.df(provider.EndpointAuction, provider.WorkloadMarket, s.auction))
	m.HandleFunc("GET /df/auction-sold", s.df(provider.EndpointAuctionSold, provider.WorkloadMarket, s.auctionSold))
	m.HandleFunc("/df/", s.df("other", "", nil))
	m.HandleFunc("GET /_sim/maintenance", s.adminMaintenance)
	m.HandleFunc("POST /_sim/maintenance", s.adminMaintenance)
	m.HandleFunc("GET /_sim/faults", s.adminFaults)
	m.HandleFunc("POST /_sim/faults", s.adminFaults)
	m.HandleFunc("GET /_sim/stats", func(w http.ResponseWriter, _ *http.Request) { writeJSON(w, http.StatusOK, s.Stats()) })
	m.HandleFunc("DELETE /_sim/stats", func(w http.ResponseWriter, _ *http.Request) { s.ResetStats(); w.WriteHeader(http.StatusNoContent) })
	m.HandleFunc("GET /_sim/catalog", func(w http.ResponseWriter, _ *http.Request) {
		rows := make([]catalogRow, len(s.catalog))
		for i, e := range s.catalog {
			rows[i] = catalogRow{e.row(), nil}
			if e.real != nil {
				rows[i].Truth = &e.real.Truth
			}
		}
		writeJSON(w, http.StatusOK, map[string]any{"rows": rows})
	})
	m.HandleFunc("GET /_sim/freshness", s.adminFreshness)
	m.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) { s.writeAPIError(w, notFound) })
	s.mux = m
	return s
}

func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Catalog returns the items, in the same order for the same Seed and Items.
func (s *Server) Catalog() []provider.Item {
	out := make([]provider.Item, len(s.catalog))
	for i, e := range s.catalog {
		out[i] = e.Item
	}
	return out
}

// SetMaintenance switches every /df endpoint to 503 DNF980 (on) or back.
func (s *Server) SetMaintenance(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.maintenance = on
}

// Maintenance reports whether maintenance is on.
func (s *Server) Maintenance() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.maintenance
}

// SetFaults replaces every fault setting, latency included.
func (s *Server) SetFaults(f Faults) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults = f
}

// Faults returns the current fault settings.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// Stats is what the simulator has seen since New or ResetStats.
type Stats struct {
	Requests    int64                `json:"requests"`    // every /df request
	Paths       map[string]int64     `json:"paths"`       // by route, e.g. /df/auction; unknown paths are "other"
	Keys        map[string]KeyStats  `json:"keys"`        // by KeyLabel, never the key
	Items       map[string]ItemStats `json:"items"`       // by requested item id, known or not
	Maintenance int64                `json:"maintenance"` // answered 503 DNF980
	Faults      int64                `json:"faults"`      // faults injected
}

// KeyStats counts the requests that carried one key.
type KeyStats struct {
	Total        int64 `json:"total"`
	MaxPerSecond int64 `json:"max_per_second"` // most requests received in one wall-clock second
	RateLimited  int64 `json:"rate_limited"`   // answered API002 (429 or 400, Options.RateLimitStatus)
}

// ItemStats counts requests naming one item, per endpoint.
type ItemStats struct {
	Auction     int64 `json:"auction"`
	AuctionSold int64 `json:"auction_sold"`
	Item        int64 `json:"item"` // /df/items/{itemId}
}

// KeyLabel is how a key appears in Stats: a short sha256 prefix.
func KeyLabel(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:4])
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.stats
	out.Paths = clone(s.stats.Paths)
	out.Keys = clone(s.stats.Keys)
	out.Items = clone(s.stats.Items)
	return out
}

// KeyStats returns the counters of one key.
func (s *Server) KeyStats(key string) KeyStats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats.Keys[KeyLabel(key)]
}

// ItemRequests is how many /df/auction requests named itemID.
func (s *Server) ItemRequests(itemID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return int(s.stats.Items[itemID].Auction)
}

// ResetStats zeroes every counter.
func (s *Server) ResetStats() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stats = Stats{Paths: map[string]int64{}, Keys: map[string]KeyStats{}, Items: map[string]ItemStats{}}
	s.seconds = map[string]*secondCount{}
	if s.tracks != nil {
		s.resetTracks()
	}
}

func clone[M ~map[K]V, K comparable, V any](m M) M {
	out := make(M, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// apiError is a Neople error envelope with its HTTP status; ko is the Korean sentence sent
// instead of message under Options.KoreanMessages.
type apiError struct {
	status            int
	code, message, ko string
}

// Message texts as captured from the live API where known (docs: ../shared/spec/neople-api.md).
var (
	notFound      = &apiError{http.StatusNotFound, "DNF900", "INVALID_URL", "유효하지 않은 URL 입니다."}
	maintenance   = &apiError{http.StatusServiceUnavailable, "DNF980", "SYSTEM_INSPECT", "시스템 점검 중입니다."}
	noKey         = &apiError{http.StatusUnauthorized, "API000", "NOT_FOUND_APIKEY", "API KEY가 없습니다."}
	badKey        = &apiError{http.StatusUnauthorized, "API003", "INVALID_APIKEY", "유효하지 않은 API KEY 입니다."}
	systemError   = &apiError{http.StatusInternalServerError, "DNF999", "SYSTEM_ERROR", "시스템 오류입니다."}
	tooManyIDs    = &apiError{http.StatusBadRequest, "DNF008", "ITEM_IDS_COUNT_EXCEEDED", "아이템 ID는 최대 10개까지 입력할 수 있습니다."}
	tooBroad      = &apiError{http.StatusBadRequest, "DNF007", "SEARCH_ITEM_OVER", "검색 결과가 너무 많습니다."}
	noItem        = &apiError{http.StatusNotFound, "DNF003", "NOT_FOUND_ITEM", "존재하지 않는 아이템입니다."}
	nothingByName = &apiError{http.StatusBadRequest, "API001", "NOT_FOUND_SEARCH_VALUE", "검색 결과가 없습니다."}
)

// rateLimited is the rate-limit answer; its HTTP status is an option because the real one is unknown.
func (s *Server) rateLimited() *apiError {
	return &apiError{s.opts.RateLimitStatus, "API002", "APIKEY_LIMIT_EXCEEDED", "API KEY 사용량을 초과했습니다. (APIKEY_LIMIT)"}
}

// badParam is DNF901 with the API's text and, after it, what was wrong (for people reading tests).
func badParam(format string, args ...any) *apiError {
	return &apiError{http.StatusBadRequest, "DNF901", "NOT_FOUND_SEARCH_VALUE: " + fmt.Sprintf(format, args...), "유효하지 않은 요청 변수입니다."}
}

func (s *Server) writeAPIError(w http.ResponseWriter, e *apiError) {
	msg := e.message
	if s.opts.KoreanMessages {
		msg = e.ko
	}
	writeJSON(w, e.status, map[string]any{"error": map[string]any{"status": e.status, "code": e.code, "message": msg}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// handler answers one /df request with a body to encode, or an API error.
type handler func(r *http.Request) (any, *apiError)

// df wraps an endpoint with what every /df request goes through, in the API's order:
// maintenance, key, rate limit, then (simulated) latency and faults.
func (s *Server) df(route string, wl provider.Workload, h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("apikey")
		if key == "" {
			key = r.URL.Query().Get("apikey")
		}
		s.mu.Lock()
		s.stats.Requests++
		s.stats.Paths[route]++
		if key != "" {
			s.countKey(key, time.Now().Unix())
		}
		maint, faults := s.maintenance, s.faults
		if maint {
			s.stats.Maintenance++
		}
		s.mu.Unlock()

		switch {
		case h == nil:
			s.writeAPIError(w, notFound)
			return
		case maint && faults.HostileMaintenance:
			writeRaw(w, http.StatusServiceUnavailable, HostileEnvelope(http.StatusServiceUnavailable, "DNF980", "SYSTEM\x00INSPECT "+HostileTexts()[1].Text))
			return
		case maint:
			s.writeAPIError(w, maintenance)
			return
		case key == "":
			s.writeAPIError(w, noKey)
			return
		case s.keys[key] != wl:
			s.writeAPIError(w, badKey)
			return
		}
		if lim := s.limiters[key]; lim != nil && !lim.Allow() {
			s.mu.Lock()
			ks := s.stats.Keys[KeyLabel(key)]
			ks.RateLimited++
			s.stats.Keys[KeyLabel(key)] = ks
			s.mu.Unlock()
			s.writeAPIError(w, s.rateLimited())
			return
		}
		if faults.Latency > 0 && !sleep(r, faults.Latency) {
			return
		}
		fault := s.pickFault(faults)
		if fault == "timeout" {
			sleep(r, 30*time.Second)
			return
		}
		switch fault {
		case "error":
			s.writeAPIError(w, systemError)
			return
		case "hostile":
			s.writeHostile(w)
			return
		case "retry_after":
			w.Header().Set("Retry-After", "999999999")
			s.writeAPIError(w, &apiError{http.StatusTooManyRequests, "API002", "APIKEY_LIMIT_EXCEEDED", "API KEY 사용량을 초과했습니다."})
			return
		}
		body, apiErr := h(r)
		if apiErr != nil {
			s.writeAPIError(w, apiErr)
			return
		}
		switch fault {
		case "future", "ancient", "foreign":
			writeRaw(w, http.StatusOK, impossibleRows(body, fault))
		case "malformed":
			b, _ := json.Marshal(body)
			w.Header().Set("Content-Type", "application/json;charset=UTF-8")
			_, _ = w.Write(b[:len(b)/2])
		case "oversize":
			writeOversize(w)
		default:
			writeJSON(w, http.StatusOK, body)
		}
	}
}

// countKey records a request for the per-key totals and the busiest wall-clock second.
// Callers hold s.mu.
func (s *Server) countKey(key string, sec int64) {
	label := KeyLabel(key)
	c := s.seconds[label]
	if c == nil {
		c = &secondCount{}
		s.seconds[label] = c
	}
	if c.sec != sec {
		c.sec, c.n = sec, 0
	}
	c.n++
	ks := s.stats.Keys[label]
	ks.Total++
	ks.MaxPerSecond = max(ks.MaxPerSecond, c.n)
	s.stats.Keys[label] = ks
}

func (s *Server) countItem(id string, f func(*ItemStats)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats.Items[id]
	f(&st)
	s.stats.Items[id] = st
}

func (s *Server) pickFault(f Faults) string {
	if f.ErrorRate+f.MalformedRate+f.TimeoutRate+f.OversizeRate+f.HostileRate+f.FutureRate+f.AncientRate+
		f.ForeignRate+f.RetryAfterRate == 0 {
		return ""
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	roll := s.rng.Float64()
	for _, c := range []struct {
		name string
		p    float64
	}{{"timeout", f.TimeoutRate}, {"error", f.ErrorRate}, {"malformed", f.MalformedRate}, {"oversize", f.OversizeRate},
		{"hostile", f.HostileRate}, {"future", f.FutureRate}, {"ancient", f.AncientRate}, {"foreign", f.ForeignRate},
		{"retry_after", f.RetryAfterRate}} {
		if roll < c.p {
			s.stats.Faults++
			return c.name
		}
		roll -= c.p
	}
	return ""
}

// sleep waits d or until the client goes away; it reports whether the full d passed.
func sleep(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
		return false
	}
}

func writeOversize(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "application/json;charset=UTF-8")
	pad := []byte(strings.Repeat("x", 64<<10))
	_, _ = w.Write([]byte(`{"rows":[],"pad":"`))
	for n := 0; n < OversizeBytes; n += len(pad) {
		if _, err := w.Write(pad); err != nil {
			return
		}
	}
	_, _ = w.Write([]byte(`"}`))
}

func (s *Server) adminMaintenance(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		on, err := strconv.ParseBool(r.URL.Query().Get("on"))
		if err != nil {
			http.Error(w, "on=true|false required", http.StatusBadRequest)
			return
		}
		s.SetMaintenance(on)
	}
	writeJSON(w, http.StatusOK, map[string]bool{"maintenance": s.Maintenance()})
}

func (s *Server) adminFaults(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		var f Faults
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16)).Decode(&f); err != nil {
			http.Error(w, "faults: "+err.Error(), http.StatusBadRequest)
			return
		}
		s.SetFaults(f)
	}
	writeJSON(w, http.StatusOK, s.Faults())
}
