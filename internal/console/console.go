// Package console is the operator console: a read model over what `collector status`,
// `collector items` and the history reads already compute, rendered as HTML, with the few
// actions the CLI has (pin, provider pause, packing, outbox retry) behind a login.
//
// No SQL lives here: every fact is read by the package that owns its table. The overview reads a
// copy of the cluster status refreshed in the background every Config.Refresh, so no request
// counts over the catalog; item pages walk indexes by keyset.
package console

import (
	"cmp"
	"context"
	"embed"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/daemon"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// Config configures a console.
type Config struct {
	// ProviderName is the provider whose status is shown and paused (provider.name).
	ProviderName string
	// Market is the market key's configured budget (provider.market.*).
	Market config.WorkloadLimits
	// PackSize is collect.pack_size: packing is off for every endpoint when it is 1.
	PackSize int
	// NoOutbox is outbox.enabled=false: the overview says events are off.
	NoOutbox bool
	// LearnedShare reads the share of Market the provider was found to allow (1 = all of it);
	// nil when daemon.budget.adaptive is off.
	LearnedShare func(ctx context.Context) (float64, error)
	// User and Password enable the actions; an empty password makes the console read-only.
	User     string
	Password config.Secret
	// Refresh is how often the status copy is re-read; 0 = RefreshDefault.
	Refresh time.Duration
	// Session is how long a login lasts (console.session).
	Session time.Duration
	// ReadYourWrites is how long after a session's action its pages read the primary; 0 =
	// ReadYourWritesDefault.
	ReadYourWrites time.Duration
	// API is where the read API is served beside the console (api.Prefix), for the item page's
	// links to it; "" = it is not.
	API string
	// Reads, when set, serves the item pages' reads, from a replica while it keeps up
	// (database.read_url), and the overview says where they go. The overview's status and the
	// actions use the pool: the status asks whether the primary takes writes, and who is alive.
	Reads *store.Reads
}

// Console serves the console's pages. Start must run for the overview to have data.
type Console struct {
	cfg   Config
	pool  *pgxpool.Pool
	log   *zap.Logger
	pages map[string]*template.Template
	auth  *sessions
	// logins paces password guessing (loginBurst, loginEvery).
	logins  *loginPacer
	loginMu sync.Mutex // tryLogin

	mu     sync.Mutex
	ready  chan struct{} // closed after the first refresh
	latest overview
	// failing logs failed refreshes once a streak and then once a minute (under mu): an
	// overview left open re-reads every few seconds through a whole database outage.
	failing telemetry.Streak
	once    sync.Once
	// viewed is set when a page reads the status copy: an unwatched console stops re-reading
	// the status (on a large catalog that read is the console's one real cost); kick asks for
	// a refresh at once when a page finds the copy stale.
	viewed atomic.Bool
	kick   chan struct{}
	// readSlots holds one token per request reading the database (slotted).
	readSlots chan struct{}
	every     atomic.Int64 // the time between status reads, ns (see refreshCost)
}

// RefreshDefault is how often the console re-reads the cluster status its pages show: pages
// read that copy, so requests never count over the catalog.
const RefreshDefault = 5 * time.Second

// New builds a console over pool.
func New(pool *pgxpool.Pool, cfg Config, log *zap.Logger) (*Console, error) {
	if cfg.Refresh == 0 {
		cfg.Refresh = RefreshDefault
	}
	if cfg.Refresh < 0 {
		return nil, fmt.Errorf("console: refresh %s must be > 0", cfg.Refresh)
	}
	if cfg.Session <= 0 {
		return nil, fmt.Errorf("console: session %s must be > 0", cfg.Session)
	}
	pages, err := parseTemplates()
	if err != nil {
		return nil, err
	}
	return &Console{cfg: cfg, pool: pool, log: log, pages: pages, auth: newSessions(cfg.Session),
		logins:  newLoginPacer(),
		failing: telemetry.Streak{Log: log, What: "console: status refresh failed"},
		ready:   make(chan struct{}), kick: make(chan struct{}, 1), readSlots: make(chan struct{}, MaxReads)}, nil
}

// reader is what the item pages read through: Config.Reads, else the pool.
type reader interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

func (c *Console) reads() reader {
	if c.cfg.Reads != nil {
		return c.cfg.Reads
	}
	return c.pool
}

// ReadYourWritesDefault is how long after a session's action its pages read the primary: a
// replica serving reads trails by at most store.MaxLagDefault at its last measurement, a
// second ago.
const ReadYourWritesDefault = 2 * store.MaxLagDefault

// readsFor is reads(), except for a session that acted within Config.ReadYourWrites: the page
// it is sent back to shows what it just did, not the replica's copy from before.
func (c *Console) readsFor(r *http.Request) reader {
	if ss, _, ok := c.sessionOf(r); ok && time.Since(ss.wrote) < cmp.Or(c.cfg.ReadYourWrites, ReadYourWritesDefault) {
		return c.pool
	}
	return c.reads()
}

// overview is the status copy the overview renders.
type overview struct {
	Status      daemon.ClusterStatus
	Packing     []dispatcher.PackingStatus
	Transitions []provider.Transition // newest first
	Learned     float64
	ReadAt      time.Time
	Err         string // the last refresh's failure; the previous status stays shown
	// readLocal is when the copy was read, on this process's clock (staleness only).
	readLocal time.Time
}

// recentTransitions is how many of the provider's transitions the overview lists.
const recentTransitions = 8

// refreshCost bounds the share of time the status read may take: on a catalog where one read
// takes longer than Refresh/refreshCost, the copy is re-read every refreshCost × that instead.
const refreshCost = 5

// Start refreshes the status copy at once and then every Refresh (or longer, see refreshCost)
// while pages are being viewed, until ctx ends.
func (c *Console) Start(ctx context.Context) {
	c.refresh(ctx)
	t := time.NewTimer(c.interval())
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if c.viewed.Swap(false) {
				c.refresh(ctx)
			}
		case <-c.kick:
			c.refresh(ctx)
			t.Stop()
		}
		t.Reset(c.interval())
	}
}

// interval is the time between two status reads now.
func (c *Console) interval() time.Duration { return time.Duration(c.every.Load()) }

// refresh reads the cluster status as `collector status` does.
func (c *Console) refresh(ctx context.Context) {
	t0 := time.Now()
	ov, err := c.readOverview(ctx)
	if err != nil && ctx.Err() != nil {
		return
	}
	c.every.Store(int64(max(c.cfg.Refresh, refreshCost*time.Since(t0))))
	c.mu.Lock()
	if err != nil {
		c.failing.Failed(time.Now(), err)
		c.latest.Err = err.Error()
	} else {
		c.failing.Ok(time.Now())
		c.latest = ov
	}
	c.mu.Unlock()
	c.once.Do(func() { close(c.ready) })
}

func (c *Console) readOverview(ctx context.Context) (overview, error) {
	var ov overview
	var err error
	if ov.Status, err = daemon.Status(ctx, c.pool, c.cfg.ProviderName); err != nil {
		return ov, err
	}
	ov.Status.NoOutbox = c.cfg.NoOutbox
	if ov.Packing, err = dispatcher.ReadPackingStatus(ctx, c.pool); err != nil {
		return ov, err
	}
	if ov.Transitions, err = provider.ReadTransitions(ctx, c.pool, c.cfg.ProviderName, recentTransitions); err != nil {
		return ov, err
	}
	ov.Learned = 1
	if c.cfg.LearnedShare != nil {
		if ov.Learned, err = c.cfg.LearnedShare(ctx); err != nil {
			return ov, err
		}
	}
	ov.ReadAt, ov.readLocal = ov.Status.DatabaseNow, time.Now()
	return ov, nil
}

// current waits for the first refresh, then returns the latest status copy.
func (c *Console) current(ctx context.Context) (overview, error) {
	select {
	case <-c.ready:
	case <-ctx.Done():
		return overview{}, ctx.Err()
	}
	c.viewed.Store(true)
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.latest.readLocal) > 2*c.interval() {
		// Stale after an unwatched spell: this page shows the copy with its time, and the next
		// refresh of the page (or the next page) shows a fresh one.
		select {
		case c.kick <- struct{}{}:
		default:
		}
	}
	return c.latest, nil
}

// Handler serves the console at /; mount it beside /metrics.
func (c *Console) Handler() http.Handler {
	mux := http.NewServeMux()
	static, _ := fs.Sub(staticFS, "static")
	mux.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))
	mux.HandleFunc("GET /{$}", c.page(c.overviewPage))
	mux.HandleFunc("GET /overview.part", c.page(c.overviewPart))
	mux.HandleFunc("GET /items", c.slotted(c.page(c.itemsPage)))
	mux.HandleFunc("GET /items/{id}", c.slotted(c.page(c.itemPage)))
	mux.HandleFunc("GET /items/{id}/chart.json", c.slotted(c.chartJSON))
	mux.HandleFunc("GET /login", c.page(c.loginPage))
	// Browsers ask for it on pages without an icon link, such as the API's JSON answers.
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /login", c.login)
	mux.HandleFunc("POST /logout", c.logout)
	mux.HandleFunc("POST /actions/{action}", c.action)
	return c.loopbackHosts(secureHeaders(c.cleanInput(smallForms(mux))))
}

// maxForm bounds a POST's body: the console's forms are a few fields. Unbounded, a login
// form (read before any credential is checked) could be held in memory up to 32 MB a request,
// its file parts spilled to the temporary directory without end.
const maxForm = 16 << 10

// smallForms reads a POST's url-encoded form within maxForm before any handler runs, so that
// none parses a multipart body: 413 past it, 400 when the form cannot be read.
func smallForms(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			if err := r.ParseForm(); err != nil {
				var tooBig *http.MaxBytesError
				if errors.As(err, &tooBig) {
					http.Error(w, fmt.Sprintf("form larger than %d bytes", maxForm), http.StatusRequestEntityTooLarge)
					return
				}
				http.Error(w, "unreadable form", http.StatusBadRequest)
				return
			}
		}
		h.ServeHTTP(w, r)
	})
}

// cleanInput answers 400, naming the parameter, for a path or query value PostgreSQL could not
// take as text (invalid UTF-8, a NUL): passed on, the statement would fail as a 500 with a
// warning in the log, one line per request anyone can send.
func (c *Console) cleanInput(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bad := func(what string, err error) {
			c.render(w, http.StatusBadRequest, "error", pageData{Title: http.StatusText(http.StatusBadRequest), Message: what + ": " + err.Error(), Actions: c.actionsEnabled()})
		}
		if err := cleanValue(r.URL.Path); err != nil {
			bad("path", err)
			return
		}
		// A malformed pair (a bare %, a ;) is dropped, as the pages' own r.URL.Query() drops it.
		q, _ := url.ParseQuery(r.URL.RawQuery)
		for _, k := range slices.Sorted(maps.Keys(q)) { // the same parameter named every time
			for _, v := range append([]string{k}, q[k]...) {
				if err := cleanValue(v); err != nil {
					bad(strconv.Quote(k), err)
					return
				}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// cleanValue refuses text PostgreSQL cannot store or compare.
func cleanValue(s string) error {
	switch {
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.ContainsRune(s, 0):
		return errors.New("contains a NUL character")
	}
	return nil
}

// secureHeaders sets the same strict policy on every answer: scripts and styles only from the
// console itself (no inline script, no CDN), never framed.
func secureHeaders(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Security-Policy", ContentSecurityPolicy)
		hd.Set("X-Content-Type-Options", "nosniff")
		hd.Set("Referrer-Policy", "same-origin")
		hd.Set("X-Frame-Options", "DENY")
		h.ServeHTTP(w, r)
	})
}

// ContentSecurityPolicy is the policy of every console answer.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

// errNotFound answers 404 with the page's message.
var errNotFound = errors.New("not found")

// httpError carries a status code to the page renderer.
type httpError struct {
	code int
	msg  string
}

func (e httpError) Error() string { return e.msg }
