// Package api is the read API under /api/v1/: every item's current market in one cheap poll
// (/latest), an item's series (/items/{id}/timeseries) and item search (/items). It is a read
// model like the console: the history and catalog packages own every query, and a request never
// counts over a table. Answers carry ETags so a client polling an unchanged market costs one
// hash comparison; errors are RFC 9457 problems; openapi.json describes it all.
package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/httpserve"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
)

// DB is where the API reads: a pool, or a read replica's router. It never writes.
type DB interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Config configures an API; the zero value of each optional field takes its default.
type Config struct {
	config.APIConfig
	// MaxAge is how old the /latest copy may be when a request reads it; 0 = MaxAgeDefault.
	MaxAge time.Duration
	// Now is the clock of rate limits and the copy's age; nil = time.Now.
	Now func() time.Time
	// MaxReads is how many reads the API runs on the database at once; 0 = MaxReadsDefault.
	MaxReads int
	// Latest is where /latest reads, when not the DB every other endpoint reads: the primary,
	// with a read replica configured. A replica may trail by seconds, and /latest promises
	// one; its one read a refresh for all clients together is a small, bounded cost.
	Latest DB
}

// MaxReadsDefault keeps the API to a quarter of the default pool (database.max_conns 8): a
// burst of series requests waits its turn instead of taking the connections collection
// writes with. /latest's polls read no database; its refresh has a slot of its own besides,
// so no burst of series reads can hold back the poll every client makes.
const MaxReadsDefault = 2

// MaxAgeDefault bounds how far /latest may trail the database: a snapshot committed now is in
// every answer from a second on.
const MaxAgeDefault = time.Second

// API serves /api/v1/. Start keeps the /latest copy fresh while clients poll it.
type API struct {
	cfg     Config
	db      DB
	log     *zap.Logger
	latest  *latestCache
	limit   *limiter
	tokens  [][32]byte
	warned  atomic.Int64 // unix ns of the last logged read failure
	metrics *metrics
	slots   chan struct{} // one per read running on the database, /latest's refresh apart
	// primary is the primary of a read-replica router (store.Reads), slotted; nil without one.
	primary DB
}

// New builds an API over db.
func New(db DB, cfg Config, log *zap.Logger) (*API, error) {
	if cfg.MaxAge == 0 {
		cfg.MaxAge = MaxAgeDefault
	}
	if cfg.MaxAge < 0 {
		return nil, errors.New("api: MaxAge must be > 0")
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxReads == 0 {
		cfg.MaxReads = MaxReadsDefault
	}
	if cfg.MaxReads < 0 {
		return nil, errors.New("api: MaxReads must be > 0")
	}
	a := &API{cfg: cfg, db: db, log: log, limit: newLimiter(cfg.Rate, cfg.Now), metrics: newMetrics(),
		slots: make(chan struct{}, cfg.MaxReads)}
	latestDB := cfg.Latest
	if latestDB == nil {
		latestDB = db
	}
	// One refresh runs at a time (latestCache.mu): one slot of its own is all it needs.
	a.latest = newLatestCache(slotted{latestDB, make(chan struct{}, 1)}, cfg.MaxAge, cfg.Now)
	a.db = slotted{db, a.slots}
	if r, ok := db.(interface{ Primary() *pgxpool.Pool }); ok {
		a.primary = slotted{r.Primary(), a.slots}
	}
	a.latest.refreshed = a.metrics.refresh
	// Tokens are compared by their hashes in constant time, so neither a token's length nor
	// its prefix leaks through timing.
	for _, t := range cfg.Tokens {
		a.tokens = append(a.tokens, sha256.Sum256([]byte(t.Reveal())))
	}
	return a, nil
}

// Start refreshes the /latest copy every half MaxAge while it is being polled, so a poll
// finds it current instead of waiting for a read; it returns when ctx ends.
func (a *API) Start(ctx context.Context) {
	t := time.NewTicker(max(a.cfg.MaxAge/2, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !a.latest.polled(idleAfter) {
			continue
		}
		// Bounded like a poll's read: polls wait on this one's lock, and a hung read would
		// hold them past their own timeout.
		rctx, cancel := context.WithTimeout(ctx, a.latest.timeout)
		err := a.latest.refresh(rctx, true)
		cancel()
		if err != nil && ctx.Err() == nil {
			a.warn("refresh the latest markets", zap.Error(err))
		}
	}
}

// idleAfter is how long after the last poll of /latest the copy stops being refreshed: an
// unpolled API reads nothing.
const idleAfter = 30 * time.Second

// Prefix is where the API is mounted.
const Prefix = "/api/v1/"

//go:embed openapi.json
var openapiDoc []byte

// Handler serves the API at Prefix; mount it beside the console.
func (a *API) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc(Prefix+"openapi.json", get(func(w http.ResponseWriter, r *http.Request) {
		serve(w, r, openapi)
	}))
	mux.HandleFunc(Prefix+"latest", get(a.getLatest))
	mux.HandleFunc(Prefix+"items", get(readSource(a.getItems)))
	mux.HandleFunc(Prefix+"items/{id}/timeseries", get(readSource(a.getTimeseries)))
	mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		writeProblem(w, http.StatusNotFound, probNotFound, "no such endpoint: "+provider.Clean(r.URL.Path, 200)+" (see "+Prefix+"openapi.json)", "")
	})
	return a.observed(nosniff(a.cors(a.guard(mux))))
}

// nosniff keeps browsers from reading an answer (which may echo a parameter) as anything but
// the JSON it says it is.
func nosniff(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		h.ServeHTTP(w, r)
	})
}

var openapi = newBody(openapiDoc, time.Time{})

// readSource makes h's answer say where its reads were answered (Read-Source, set by serve):
// "primary", or "replica; lag=S", the replica's lag in seconds as last measured (at most
// store.MaxLagDefault, or reads go to the primary). /latest does not say: its copy is read
// apart from the request.
func readSource(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ctx, _ := store.WithServed(r.Context())
		h(w, r.WithContext(ctx))
	}
}

// get answers anything but GET and HEAD with a problem, not ServeMux's plain-text 405.
func get(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			writeProblem(w, http.StatusMethodNotAllowed, probMethod, "the API is read-only: use GET", "")
			return
		}
		h(w, r)
	}
}

// params reads the query string of an endpoint that takes the parameters allowed. r.URL.Query()
// drops the pairs it cannot parse (a bad %-escape, a ';' separator), so a garbled ?ids= would
// answer every item instead of an error: a malformed query string is refused, and so is a
// parameter the endpoint does not take (a typo such as limt=5 would be ignored too), each
// naming the parameter. Refused before anything reaches the database, like any bad parameter.
func params(w http.ResponseWriter, r *http.Request, allowed ...string) (url.Values, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		param, pair := malformedPair(r.URL.RawQuery)
		badParam(w, param, fmt.Sprintf("the query string is malformed at %q (%v): separate parameters with '&', and percent-encode '%%', '&', ';' and '+' within a value",
			provider.Clean(pair, 40), err))
		return nil, false
	}
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if !slices.Contains(allowed, name) {
			name = provider.Clean(name, 40)
			badParam(w, name, fmt.Sprintf("unknown parameter %q: this endpoint takes %s", name, strings.Join(allowed, ", ")))
			return nil, false
		}
		// A second value would be dropped (the handlers read the first): a client that adds
		// its own limit to a next link that has one must hear of it. ids lists, so it repeats.
		if len(q[name]) > 1 && name != "ids" {
			badParam(w, name, fmt.Sprintf("parameter %q given %d times: give it once", name, len(q[name])))
			return nil, false
		}
	}
	return q, true
}

// malformedPair is the first pair of a query string that does not parse, and its parameter's
// name when that much reads ("" when not).
func malformedPair(raw string) (param, pair string) {
	for pair := range strings.SplitSeq(raw, "&") {
		if _, err := url.ParseQuery(pair); err == nil {
			continue
		}
		key, _, _ := strings.Cut(pair, "=")
		if name, err := url.QueryUnescape(key); err == nil && !strings.Contains(key, ";") {
			param = provider.Clean(name, 40)
		}
		return param, pair
	}
	return "", raw
}

// guard checks the bearer token (when tokens are configured) and then the client's rate.
// The OpenAPI document is public: it says how to call, not what the data is.
func (a *API) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		client := httpserve.ClientAddr(r) // behind a reverse proxy every client shares the proxy's: give clients tokens
		if len(a.tokens) > 0 && r.URL.Path != Prefix+"openapi.json" {
			tok, ok := a.bearer(r)
			if !ok {
				// Limited by its address like any client, so guessing tokens is paced too.
				if a.overRate(w, client) {
					return
				}
				w.Header().Set("WWW-Authenticate", `Bearer realm="duecollector"`)
				writeProblem(w, http.StatusUnauthorized, probUnauthorized,
					"this API requires a bearer token: send Authorization: Bearer <token>", "")
				return
			}
			client = tokenClient + tok
		}
		if a.overRate(w, client) {
			return
		}
		next.ServeHTTP(w, r)
	})
}

// overRate takes one request from client's bucket, sets the RateLimit fields, and answers 429
// when the bucket is empty.
func (a *API) overRate(w http.ResponseWriter, client string) bool {
	if a.limit == nil {
		return false
	}
	d := a.limit.take(client)
	a.limit.headers(w.Header(), d)
	if !d.ok {
		writeProblem(w, http.StatusTooManyRequests, probRateLimited,
			"too many requests from this client: wait Retry-After seconds (RateLimit-Policy says the quota)", "")
	}
	return !d.ok
}

// bearer returns which configured token the request carries (by index, never the token).
func (a *API) bearer(r *http.Request) (string, bool) {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	sum := sha256.Sum256([]byte(strings.TrimSpace(tok)))
	found := -1
	for i, t := range a.tokens {
		if subtle.ConstantTimeCompare(sum[:], t[:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return "", false
	}
	return strconv.Itoa(found), true
}

// exposedHeaders are the answers' headers a configured origin's page may read (docs/api.md#cors
// lists them).
const exposedHeaders = "ETag, Last-Modified, RateLimit, RateLimit-Policy, Retry-After, Read-Source"

// cors answers preflights and marks answers readable by the configured origins' pages.
func (a *API) cors(next http.Handler) http.Handler {
	if len(a.cfg.CORSOrigins) == 0 {
		return next
	}
	any := slices.Contains(a.cfg.CORSOrigins, "*")
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		h := w.Header()
		h.Add("Vary", "Origin")
		allowed := origin != "" && (any || slices.Contains(a.cfg.CORSOrigins, origin))
		if allowed {
			if any {
				h.Set("Access-Control-Allow-Origin", "*")
			} else {
				h.Set("Access-Control-Allow-Origin", origin)
			}
			h.Set("Access-Control-Expose-Headers", exposedHeaders)
		}
		if r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != "" {
			if allowed {
				h.Set("Access-Control-Allow-Methods", "GET, HEAD")
				h.Set("Access-Control-Allow-Headers", "Authorization, If-None-Match, If-Modified-Since")
				h.Set("Access-Control-Max-Age", "600")
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// slotted is a DB whose reads each hold one of the API's slots until their rows are closed,
// waiting for one while all are taken (or until the request ends).
type slotted struct {
	db    DB
	slots chan struct{}
}

// slotWait bounds a read's wait for a slot: a client's request has no deadline of its own
// (the server's read timeout no longer runs once the handler has it), so behind a few slow
// windows held by one client every other series read waited without end, and got no answer
// telling it to come back.
var slotWait atomic.Int64

func init() { slotWait.Store(int64(5 * time.Second)) }

// errSlotsBusy: every read slot stayed taken for slotWait.
var errSlotsBusy = errors.New("every database read slot stayed busy")

func (s slotted) acquire(ctx context.Context) error {
	wait := time.Duration(slotWait.Load())
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case s.slots <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("wait for a database read slot: %w", ctx.Err())
	case <-t.C:
		return fmt.Errorf("%w for %s", errSlotsBusy, wait)
	}
}

func (s slotted) release() { <-s.slots }

func (s slotted) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := s.acquire(ctx); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, sql, args...)
	if err != nil {
		s.release()
		return nil, err
	}
	return &slottedRows{Rows: rows, release: s.release}, nil
}

func (s slotted) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := s.acquire(ctx); err != nil {
		return errRow{err}
	}
	return slottedRow{row: s.db.QueryRow(ctx, sql, args...), release: s.release}
}

type slottedRows struct {
	pgx.Rows
	release func()
	once    sync.Once
}

func (r *slottedRows) Close() {
	r.Rows.Close()
	r.once.Do(r.release)
}

// Next closes the rows (and frees the slot) at their end, as pgx does, for callers that read
// to the end without calling Close.
func (r *slottedRows) Next() bool {
	if r.Rows.Next() {
		return true
	}
	r.once.Do(r.release)
	return false
}

type slottedRow struct {
	row     pgx.Row
	release func()
}

func (r slottedRow) Scan(dest ...any) error {
	defer r.release()
	return r.row.Scan(dest...)
}

type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }
