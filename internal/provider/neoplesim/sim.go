// Package neoplesim emulates the Neople Open API auction and item endpoints over HTTP: it
// checks per-workload keys, enforces per-key token buckets, switches into maintenance, injects
// latency, errors, timeouts, malformed, oversized and hostile answers, and counts what it served
// so tests and benchmarks can check what a client really did. What it serves comes from a
// market model (package market, deterministic from a seed, with the ground truth of the
// realistic market); how fresh the client's copies stayed is measured by package score.
package neoplesim

import (
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/score"
)

// Server is the simulator; it is an http.Handler, safe for concurrent use.
type Server struct {
	opts     Options
	market   *market.Market
	scorer   *score.Scorer
	keys     map[string]provider.Workload
	limiters map[string]*rate.Limiter
	mux      *http.ServeMux

	mu          sync.Mutex
	maintenance bool
	faults      Faults
	rng         *rand.Rand
	stats       Stats
	seconds     map[string]*secondCount
	arrivals    map[string][]time.Time // by KeyLabel: the latest requests' arrival times, for NextRequest
	waiters     []*waiter
}

type secondCount struct{ sec, n int64 }

// New builds a simulator. It panics on options that Validate refuses.
func New(opts Options) *Server {
	if err := opts.Validate(); err != nil {
		panic(err)
	}
	opts = opts.withDefaults()
	mk, err := market.New(opts.Market, opts.Items, opts.Seed)
	if err != nil {
		panic(err)
	}
	s := &Server{
		opts:   opts,
		market: mk,
		scorer: score.New(mk, opts.Now),
		keys:   map[string]provider.Workload{opts.ItemKey: provider.WorkloadItem, opts.MarketKey: provider.WorkloadMarket},
		faults: Faults{Latency: opts.Latency},
		rng:    rand.New(rand.NewPCG(uint64(opts.Seed), 0xfa017)),
	}
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
		items := s.market.Items()
		rows := make([]catalogRow, len(items))
		for i, e := range items {
			rows[i] = catalogRow{e.Row(), e.Truth()}
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
	items := s.market.Items()
	out := make([]provider.Item, len(items))
	for i, e := range items {
		out[i] = e.Item
	}
	return out
}

// Market is the market the simulator serves, with its ground truth.
func (s *Server) Market() *market.Market { return s.market }

// Scorer measures what was served against the market's ground truth (GET /_sim/freshness).
func (s *Server) Scorer() *score.Scorer { return s.scorer }

// catalogRow is a GET /_sim/catalog row: the item, and its truth in the realistic market.
type catalogRow struct {
	market.ItemRow
	*market.Truth `json:",omitempty"`
}

func (s *Server) adminFreshness(w http.ResponseWriter, _ *http.Request) {
	if s.market.Kind() != market.Realistic {
		http.Error(w, "freshness needs the realistic market (Options.Market realistic)", http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, s.scorer.Report())
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
			s.countKey(key, time.Now())
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
		// Dated by the market's clock, which dates its rows, as a real provider's answers are.
		w.Header().Set("Date", s.opts.Now().UTC().Format(http.TimeFormat))
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
