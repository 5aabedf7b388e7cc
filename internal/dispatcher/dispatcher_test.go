package dispatcher

import (
	"cmp"
	"context"
	"crypto/md5"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/health"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

const (
	itemKey   = "test-item-key"
	marketKey = "test-market-key"
)

type env struct {
	pool   *pgxpool.Pool
	sim    *neoplesim.Server
	srv    *httptest.Server
	client *provider.Client
	items  []provider.Item
	url    string // the test database's
}

// setup gives a fresh database with n tracked items (all due now) and a simulator behind HTTP.
// wrap, when set, sits in front of the simulator to inject item-specific answers.
func setup(t *testing.T, n int, tier tiers.Tier, wrap func(next http.Handler) http.Handler) *env {
	t.Helper()
	return setupSim(t, n, tier, neoplesim.Options{Seed: 7}, wrap)
}

// stoppedMarket is the simulator with its clock stopped a minute back: a test that compares
// answers across calls sees no listing change at a minute's turn and no sale that
// history.SalesSettle held back from the first collection stored by a later one.
func stoppedMarket() neoplesim.Options {
	stopped := time.Now().Add(-time.Minute)
	return neoplesim.Options{Seed: 7, Now: func() time.Time { return stopped }}
}

// setupSim is setup with the simulator's options (its market, seed and clock); the item count
// and keys are setup's.
func setupSim(t *testing.T, n int, tier tiers.Tier, opts neoplesim.Options, wrap func(next http.Handler) http.Handler) *env {
	t.Helper()
	pool, url := storetest.NewPool(t)
	opts.Items, opts.ItemKey, opts.MarketKey = n, itemKey, marketKey
	sim := neoplesim.New(opts)
	var h http.Handler = sim
	if wrap != nil {
		h = wrap(sim)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	client, err := provider.NewClient(provider.ClientConfig{
		Workload: provider.WorkloadMarket, BaseURL: srv.URL, Key: marketKey, Rate: 100000, Burst: 10000, PerMinute: 10000000,
		// Generous: on a loaded machine a 10 s timeout fails items these tests expect collected.
		Timeout: 2 * time.Minute,
	})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{pool: pool, sim: sim, srv: srv, client: client, items: sim.Catalog(), url: url}
	if len(e.items) < n {
		t.Fatalf("simulator has %d items, want %d", len(e.items), n)
	}
	e.items = e.items[:n]
	rows := make([]storetest.Item, n)
	for i, it := range e.items {
		rows[i] = storetest.Item{ID: it.ItemID, Name: it.ItemName, Tier: tier, NextCollectAt: storetest.Ago(time.Second)}
	}
	storetest.Items(t, pool, rows...)
	return e
}

// numberedItems are items 1…n as generated ones look: id md5(i), name "item i", due now, in
// tier(i).
func numberedItems(n int, tier func(i int) tiers.Tier) []storetest.Item {
	rows := make([]storetest.Item, n)
	for i := 1; i <= n; i++ {
		rows[i-1] = storetest.Item{ID: fmt.Sprintf("%x", md5.Sum([]byte(strconv.Itoa(i)))), Name: "item " + strconv.Itoa(i), Tier: tier(i)}
	}
	return rows
}

func (e *env) dispatcher(t *testing.T, cfg Config, log *zap.Logger) *Dispatcher {
	t.Helper()
	d, err := New(e.pool, e.client, configured(e.pool, cfg), log)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// configured is cfg with what a test leaves zero of provider.name, collect.* and
// catalog.estimate_window taken from the configuration's defaults, and a partition keeper over
// pool, so a test names only what it varies. Packing stays as the test set it (0: off).
// everyCollection is history.mode every: a snapshot per collection.
var everyCollection = history.Policy{Every: true, Heartbeat: time.Hour}

func configured(pool *pgxpool.Pool, cfg Config) Config {
	def := FromConfig(config.Default())
	cfg.Provider = cmp.Or(cfg.Provider, def.Provider)
	cfg.BatchSize = cmp.Or(cfg.BatchSize, def.BatchSize)
	cfg.Lease = cmp.Or(cfg.Lease, def.Lease)
	cfg.Concurrency = cmp.Or(cfg.Concurrency, def.Concurrency)
	cfg.FlushSize = cmp.Or(cfg.FlushSize, def.FlushSize)
	cfg.EstimateWindow = cmp.Or(cfg.EstimateWindow, def.EstimateWindow)
	if cfg.History.Heartbeat == 0 {
		cfg.History = def.History
	}
	if cfg.Partitions == nil && pool != nil {
		cfg.Partitions = storetest.Keeper(pool)
	}
	return cfg
}

func count(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestConcurrentCollectorsCollectEachItemExactlyOnce(t *testing.T) {
	// Not parallel: its passes are heavy, and beside the other tests on a loaded 2-core machine
	// they outlast the leases and schedules it checks.
	const n, workers = 2000, 8
	// COLD: the next slot is at least 5 minutes away, so "exactly once" cannot be confused
	// with a legitimate second collection on a slow machine.
	e := setup(t, n, tiers.Cold, nil)
	var wg sync.WaitGroup
	var collected atomic.Int64
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		d := e.dispatcher(t, Config{BatchSize: 50, Concurrency: 8, Owner: fmt.Sprintf("w%d", w)}, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := d.RunOnce(context.Background())
			if err != nil {
				errs <- err
				return
			}
			collected.Add(int64(s.Collected))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if collected.Load() != n {
		t.Fatalf("collected %d, want %d", collected.Load(), n)
	}
	for _, it := range e.items {
		if got := e.sim.ItemRequests(it.ItemID); got != 1 {
			t.Fatalf("item %s fetched %d times from /df/auction, want exactly 1", it.ItemID, got)
		}
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL OR lease_expires_at IS NOT NULL`); c != 0 {
		t.Fatalf("%d items left leased", c)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM auction_snapshots`); c != n {
		t.Fatalf("%d snapshots, want %d", c, n)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM outbox`); c != n {
		t.Fatalf("%d outbox rows, want %d", c, n)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE next_collect_at <= now()`); c != 0 {
		t.Fatalf("%d items still due after collection", c)
	}
	checkEventsCarryStoredInstants(t, e.pool)
}

// checkEventsCarryStoredInstants: an event's collected_at is the stored one to the
// nanosecond, or a consumer chaining previous_snapshot_at to it finds no match.
func checkEventsCarryStoredInstants(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	rows, _ := pool.Query(context.Background(), `
		SELECT s.collected_at, o.payload->>'collected_at' FROM auction_snapshots s JOIN outbox o USING (snapshot_id)`)
	var stored time.Time
	var published string
	if _, err := pgx.ForEachRow(rows, []any{&stored, &published}, func() error {
		if p, err := time.Parse(time.RFC3339Nano, published); err != nil || !p.Equal(stored) {
			return fmt.Errorf("event collected_at %s, stored %s (%v)", published, stored.Format(time.RFC3339Nano), err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// A worker that stalls past its lease while its call is in flight writes nothing when it comes
// back: the item went to another worker, whose collection is the one stored.
func TestStaleWorkerWriteIsFencedOut(t *testing.T) {
	t.Parallel()
	inFlight, release := make(chan struct{}, 1), make(chan struct{})
	var calls atomic.Int64
	e := setup(t, 1, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction" && calls.Add(1) == 1 { // worker A's call stalls
				inFlight <- struct{}{}
				<-release
			}
			next.ServeHTTP(w, r)
		})
	})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	ctx := context.Background()
	a := e.dispatcher(t, Config{Owner: "worker-a", Concurrency: 1}, nil)
	b := e.dispatcher(t, Config{Owner: "worker-b", Concurrency: 1}, nil)
	done := runPass(ctx, a)
	testkit.Recv(t, inFlight, testkit.Timeout, "worker A's call in flight")
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET lease_expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if s, err := b.RunOnce(ctx); err != nil || s.Collected != 1 {
		t.Fatalf("worker B after A's lease expired: %+v %v, want the item collected", s, err)
	}
	close(release)
	o := testkit.Recv(t, done, testkit.Timeout, "worker A's pass to end")
	if o.err != nil || o.s.Fenced != 1 || o.s.Collected != 0 {
		t.Fatalf("worker A after stalling: %+v %v, want its write fenced out", o.s, o.err)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM auction_snapshots`); n != 1 {
		t.Fatalf("%d snapshots, want worker B's only", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM outbox`); n != 1 {
		t.Fatalf("%d outbox rows, want worker B's only", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NULL AND next_collect_at > now()`); n != 1 {
		t.Fatal("the item is not rescheduled and released after worker B's collection")
	}
}

// The write-back finds a row where its claim left it; a row something else updated while the
// item was leased (here its popularity, as the scorer does) has moved, and is still written,
// once, by key: not counted fenced, not left leased.
func TestRowUpdatedWhileLeasedIsStillWritten(t *testing.T) {
	t.Parallel()
	inFlight, release := make(chan struct{}, 1), make(chan struct{})
	e := setup(t, 1, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction" {
				inFlight <- struct{}{}
				<-release
			}
			next.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()
	d := e.dispatcher(t, Config{Owner: "worker-a", Concurrency: 1}, nil)
	done := runPass(ctx, d)
	testkit.Recv(t, inFlight, testkit.Timeout, "the call in flight")
	var before, after string
	if err := e.pool.QueryRow(ctx, `SELECT ctid::text FROM tracked_items`).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := e.pool.QueryRow(ctx, `UPDATE tracked_items SET popularity_score = popularity_score + 1 RETURNING ctid::text`).Scan(&after); err != nil {
		t.Fatal(err)
	}
	if before == after {
		t.Fatalf("the update left the row at %s: the test needs it moved", before)
	}
	close(release)
	o := testkit.Recv(t, done, testkit.Timeout, "the pass to end")
	if o.err != nil || o.s.Collected != 1 || o.s.Fenced != 0 {
		t.Fatalf("pass: %+v %v, want the item collected, nothing fenced", o.s, o.err)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM auction_snapshots`); n != 1 {
		t.Fatalf("%d snapshots, want 1", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NULL AND next_collect_at > now() AND last_outcome = 'ok'`); n != 1 {
		t.Fatal("the moved item is not written back: rescheduled, released, its outcome stored")
	}
}

// passOutcome is what one RunOnce returned.
type passOutcome struct {
	s   Summary
	err error
}

// runPass runs one pass in the background, for tests that act while its calls are in flight.
func runPass(ctx context.Context, d *Dispatcher) <-chan passOutcome {
	done := make(chan passOutcome, 1)
	go func() {
		s, err := d.RunOnce(ctx)
		done <- passOutcome{s, err}
	}()
	return done
}

// itemAnswer answers /df/auction for one item with a fixed status and body.
func itemAnswer(itemID string, status int, body string) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction" && r.URL.Query().Get("itemId") == itemID {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(status)
				_, _ = w.Write([]byte(body))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

func TestFailingItemIsStillRescheduledByTier(t *testing.T) {
	t.Parallel()
	var bad string
	e := setup(t, 5, tiers.Active, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			itemAnswer(bad, 404, `{"error":{"status":404,"code":"DNF003","message":"INVALID_ITEM_INFO"}}`)(next).ServeHTTP(w, r)
		})
	})
	bad = e.items[2].ItemID
	s, err := e.dispatcher(t, Config{}, nil).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Collected != 4 || s.Failed != 1 {
		t.Fatalf("summary %s: want 4 collected, 1 failed", s)
	}
	var streak int
	var outcome, lastErr string
	var next, attempt time.Time
	err = e.pool.QueryRow(context.Background(), `
		SELECT failure_streak, last_outcome, last_error, next_collect_at, last_attempt_at
		FROM tracked_items WHERE item_id = $1`, bad).Scan(&streak, &outcome, &lastErr, &next, &attempt)
	if err != nil {
		t.Fatal(err)
	}
	if streak != 1 || outcome != "item_error" || !strings.Contains(lastErr, "DNF003") {
		t.Fatalf("failure not recorded: streak=%d outcome=%q err=%q", streak, outcome, lastErr)
	}
	want, _ := tiers.NextDue(bad, tiers.Active, attempt)
	if !next.Equal(want) {
		t.Fatalf("failed item next_collect_at = %v, want its tier slot %v", next, want)
	}
	// A second pass right away claims nothing: the failing item is not due forever.
	s, err = e.dispatcher(t, Config{}, nil).RunOnce(context.Background())
	if err != nil || s.Claimed != 0 {
		t.Fatalf("second pass claimed %d (%v); a failed item must not stay due", s.Claimed, err)
	}
}

func TestDormantItemGetsNoNextCollection(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, tiers.Hot, nil)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET collection_tier = 'DORMANT', next_collect_at = NULL`); err != nil {
		t.Fatal(err)
	}
	s, err := e.dispatcher(t, Config{}, nil).RunOnce(ctx)
	if err != nil || s.Claimed != 0 {
		t.Fatalf("a DORMANT item was claimed by collect-due: %s %v", s, err)
	}
	// An operator collects it by hand: it is collected and stays unscheduled.
	s, err = e.dispatcher(t, Config{}, nil).CollectOne(ctx, e.items[0].ItemID)
	if err != nil || s.Collected != 1 {
		t.Fatalf("collect one: %s %v", s, err)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE next_collect_at IS NULL AND last_collected_at IS NOT NULL`); c != 1 {
		t.Fatal("DORMANT item must keep next_collect_at NULL after collection")
	}
}

func TestPausedProviderClaimsNothing(t *testing.T) {
	t.Parallel()
	for _, st := range []provider.Status{provider.Maintenance, provider.Degraded} {
		t.Run(string(st), func(t *testing.T) {
			e := setup(t, 3, tiers.Hot, nil)
			ctx := context.Background()
			if _, err := provider.SetStatus(ctx, e.pool, "neople", st, "test says so"); err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zap.InfoLevel)
			s, err := e.dispatcher(t, Config{}, zap.New(core)).RunOnce(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !s.Paused || s.Claimed != 0 {
				t.Fatalf("summary %+v: want paused with nothing claimed", s)
			}
			paused := logs.FilterMessage("collection paused").FilterField(zap.String("status", string(st))).
				FilterField(zap.String("reason", "test says so"))
			if paused.Len() != 1 || !strings.Contains(s.String(), "(test says so)") {
				t.Fatalf("want one line \"collection paused\" with status and reason fields; got %v / %s", logs.All(), s)
			}
			if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL`); c != 0 {
				t.Fatalf("%d items leased while paused", c)
			}
		})
	}
}

// A run without a health monitor (collect-due from cron, no daemon anywhere) does not stay
// paused for good: its gate probes the paused provider (Config.Recover, health.Once), and when
// the provider answers the same pass collects, RECOVERING.
func TestAOneShotBringsAPausedProviderBack(t *testing.T) {
	t.Parallel()
	for _, st := range []provider.Status{provider.Maintenance, provider.Degraded} {
		t.Run(string(st), func(t *testing.T) {
			e := setup(t, 3, tiers.Hot, nil)
			ctx := context.Background()
			if _, err := provider.SetStatus(ctx, e.pool, "neople", st, "the daemon that saw it is gone"); err != nil {
				t.Fatal(err)
			}
			hc := health.Config{Thresholds: health.Thresholds{ProbeBackoff: time.Microsecond, ProbeBackoffMax: time.Second},
				Provider: "neople", Owner: "cron-1"}
			probe := health.AuctionProbe(e.pool, e.client.Auction)
			s, err := e.dispatcher(t, Config{Recover: func(ctx context.Context) error {
				return health.Once(ctx, e.pool, hc, probe, zap.NewNop())
			}}, nil).RunOnce(ctx)
			if err != nil || s.Paused || s.Collected != 3 {
				t.Fatalf("a one-shot over a provider %s that answers again: %s, %v; want every item collected", st, s, err)
			}
			if row, err := provider.ReadStatus(ctx, e.pool, "neople"); err != nil || row.Status != provider.Recovering {
				t.Fatalf("status after the one-shot's probe: %+v %v, want RECOVERING", row, err)
			}
		})
	}
}

func TestManualOverrideWinsAndExpires(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, tiers.Hot, nil)
	ctx := context.Background()
	if err := provider.SetOverride(ctx, e.pool, "neople", provider.Maintenance, "planned", 0); err != nil {
		t.Fatal(err)
	}
	if s, _ := e.dispatcher(t, Config{}, nil).RunOnce(ctx); !s.Paused {
		t.Fatal("override MAINTENANCE must pause")
	}
	// An override that has already expired no longer applies.
	if _, err := e.pool.Exec(ctx, `UPDATE provider_status SET override_until = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if s, err := e.dispatcher(t, Config{}, nil).RunOnce(ctx); err != nil || s.Paused || s.Collected != 2 {
		t.Fatalf("after expiry: %s %v", s, err)
	}
}

func TestMaintenanceMidBatchPausesAndReleasesTheRest(t *testing.T) {
	t.Parallel()
	var served atomic.Int64
	var sim *neoplesim.Server
	e := setup(t, 100, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction" && served.Add(1) == 21 {
				sim.SetMaintenance(true)
			}
			next.ServeHTTP(w, r)
		})
	})
	sim = e.sim
	s, err := e.dispatcher(t, Config{BatchSize: 100, Concurrency: 1}, nil).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !s.Paused || s.Status != provider.Maintenance {
		t.Fatalf("summary %+v: want paused in MAINTENANCE", s)
	}
	// The 21st item's own call drew the answer: its failure is written back, at its due time;
	// the 79 never asked go back unchanged.
	if s.Collected != 20 || s.Failed != 1 || s.Released != 79 {
		t.Fatalf("collected %d failed %d released %d, want 20, 1 and 79", s.Collected, s.Failed, s.Released)
	}
	// So is the item the probe asked (answered alike), without its lease or schedule.
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_outcome = 'maintenance' AND failure_streak = 1 AND next_collect_at <= now()`); c != 2 {
		t.Fatalf("%d items failed with the maintenance answer and still due, want the one it was given for and the probed one", c)
	}
	row, err := provider.ReadStatus(context.Background(), e.pool, "neople")
	if err != nil || row.Status != provider.Maintenance || !strings.Contains(row.Reason, "DNF980") {
		t.Fatalf("provider_status = %+v %v, want MAINTENANCE with DNF980 in the reason", row, err)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL OR lease_expires_at IS NOT NULL`); c != 0 {
		t.Fatalf("%d leases left: unprocessed items must be handed back at once", c)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE next_collect_at <= now()`); c != 80 {
		t.Fatalf("%d items due, want the 80 not collected still due", c)
	}
}

// setupPoisoned is setup with n HOT items, the first of which something in front of the API
// answers with answer, every other item being answered; it is the most overdue, so claims and
// probes take it first. calls counts the provider calls.
func setupPoisoned(t *testing.T, n int, answer func(w http.ResponseWriter)) (e *env, bad string, calls *atomic.Int64) {
	t.Helper()
	var poisoned atomic.Value
	poisoned.Store("")
	calls = new(atomic.Int64)
	e = setup(t, n, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			if id := r.URL.Query().Get("itemId"); id != "" && id == poisoned.Load() {
				answer(w)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	bad = e.items[0].ItemID
	poisoned.Store(bad)
	if _, err := e.pool.Exec(context.Background(), `UPDATE tracked_items SET next_collect_at = now() - CASE WHEN item_id = $1 THEN interval '1 hour' ELSE interval '1 minute' END`, bad); err != nil {
		t.Fatal(err)
	}
	return e, bad, calls
}

// One item that something in front of the API answers alone, with what would stop everyone
// (a gateway's bare 503, a firewall's 403, a proxy's 404 page), while every other item is
// answered, stalls nothing. Taken for everyone's answer and handed back unchanged, it stayed
// the most overdue item and stopped every pass (and, for the 503 and the 403, every provider
// probe and key re-check, which asked it) for good. The provider is asked at once for another
// item: it answers, so the answer is the item's own. The item fails alone and is rescheduled,
// and from then on that answer is its own for every instance, without asking again.
func TestAnItemAnsweredAloneStallsNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		answer  func(w http.ResponseWriter)
		outcome string
	}{
		{"maintenance", func(w http.ResponseWriter) {
			http.Error(w, "<html><body>503 Service Temporarily Unavailable</body></html>", http.StatusServiceUnavailable)
		}, "item_maintenance"},
		{"refused", func(w http.ResponseWriter) { w.WriteHeader(http.StatusForbidden) }, "item_config"},
		{"not the API", func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte("<html><body>404 Not Found</body></html>"))
		}, "item_endpoint"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, bad, calls := setupPoisoned(t, 4, tc.answer)
			ctx := context.Background()
			s, err := e.dispatcher(t, Config{Concurrency: 2}, nil).RunOnce(ctx)
			if err != nil || s.Paused || s.Stop != StopNothingDue || s.Collected != 3 || s.Failed != 1 || s.ItemErrors != 1 {
				t.Fatalf("first pass: %s, %v; want the 3 other items collected and the poisoned one failed alone", s, err)
			}
			if row, err := provider.ReadStatus(ctx, e.pool, "neople"); err != nil || row.Status != provider.Healthy {
				t.Fatalf("status: %+v %v, want HEALTHY: nobody paused", row, err)
			}
			var streak int
			var outcome string
			var due bool
			read := func() {
				t.Helper()
				if err := e.pool.QueryRow(ctx, `SELECT failure_streak, last_outcome, next_collect_at <= now() FROM tracked_items WHERE item_id = $1`,
					bad).Scan(&streak, &outcome, &due); err != nil {
					t.Fatal(err)
				}
			}
			if read(); streak != 1 || outcome != tc.outcome || due {
				t.Fatalf("the poisoned item: streak %d outcome %q due %v; want failed as its own answer (%s) and rescheduled", streak, outcome, due, tc.outcome)
			}
			// At its next slot, another instance takes the answer for its own without asking.
			laterOn(t, e.pool, bad)
			calls.Store(0)
			if s, err := e.dispatcher(t, Config{Concurrency: 1}, nil).RunOnce(ctx); err != nil || s.Paused || s.Failed != 1 || s.Claimed != 1 {
				t.Fatalf("at its next slot: %s, %v; want the poisoned item failed alone again", s, err)
			}
			if n := calls.Load(); n != 1 {
				t.Fatalf("%d provider calls at its next slot, want its own 1: no probe for an answer judged before", n)
			}
			if read(); streak != 2 || due {
				t.Fatalf("the poisoned item: streak %d due %v; want failed again and rescheduled", streak, due)
			}
		})
	}
}

// Two items refused alone: the first's probe asks the second, which is refused too, so the
// pass stops. The second's failure is recorded, so the next pass's probe asks an item that is
// answered: both fail alone and the others are collected. Unrecorded, the second was the
// item every probe asked first, and every pass stopped for good.
func TestTwoItemsAnsweredAloneStallNothing(t *testing.T) {
	t.Parallel()
	var poisoned sync.Map
	e := setup(t, 4, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, bad := poisoned.Load(r.URL.Query().Get("itemId")); bad {
				w.WriteHeader(http.StatusForbidden)
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()
	a, b := e.items[0].ItemID, e.items[1].ItemID
	poisoned.Store(a, true)
	poisoned.Store(b, true)
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - CASE item_id WHEN $1 THEN interval '2 hours' WHEN $2 THEN interval '1 hour' ELSE interval '1 minute' END`, a, b); err != nil {
		t.Fatal(err)
	}
	if s, err := e.dispatcher(t, Config{Concurrency: 1}, nil).RunOnce(ctx); err == nil || s.Stop != StopKeyRefused {
		t.Fatalf("first pass: %s, %v; want it stopped (the probe asked the other refused item)", s, err)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE item_id = $1 AND failure_streak = 1 AND last_outcome = 'config'`, b); c != 1 {
		t.Fatal("the probed item's refusal is not recorded")
	}
	s, err := e.dispatcher(t, Config{Concurrency: 1}, nil).RunOnce(ctx)
	if err != nil || s.Failed != 2 || s.Collected != 2 || s.ItemErrors != 2 {
		t.Fatalf("second pass: %s, %v; want both refused items failed alone and the 2 others collected", s, err)
	}
}

// A probe that the API answers with an error about the other item (it does not know it) shows
// the API up all the same: the first item's answer is its own, and nobody is paused.
func TestAProbeAnsweredWithAnItemErrorShowsTheAPIUp(t *testing.T) {
	t.Parallel()
	var bad, unknown string
	e := setup(t, 2, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Query().Get("itemId") {
			case bad:
				http.Error(w, "busy", http.StatusServiceUnavailable)
			case unknown:
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				_, _ = w.Write([]byte(`{"error":{"status":404,"code":"DNF003","message":"NOT_FOUND_ITEM"}}`))
			default:
				next.ServeHTTP(w, r)
			}
		})
	})
	bad, unknown = e.items[0].ItemID, e.items[1].ItemID
	if _, err := e.pool.Exec(context.Background(), `UPDATE tracked_items SET next_collect_at = now() - interval '1 hour' WHERE item_id = $1`, bad); err != nil {
		t.Fatal(err)
	}
	s, err := e.dispatcher(t, Config{Concurrency: 1}, nil).RunOnce(context.Background())
	if err != nil || s.Paused || s.Failed != 2 || s.ItemErrors != 2 {
		t.Fatalf("summary %s, %v: want both items failed for their own errors, nobody paused", s, err)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE item_id = $1 AND last_outcome = 'item_maintenance'`, bad); c != 1 {
		t.Fatal("the 503 was not judged the item's own")
	}
}

// A pass makes at most probeCap probes: past them, the next answer is not judged (the pass
// stops), however many items draw one.
func TestAPassProbesAtMostProbeCapTimes(t *testing.T) {
	t.Parallel()
	e := setup(t, probeCap+2, tiers.Hot, nil)
	d := e.dispatcher(t, Config{Concurrency: 1}, nil)
	f := newFlow(1)
	refused := &provider.Error{Class: provider.ClassConfig, Workload: provider.WorkloadMarket, Endpoint: provider.EndpointAuction, Status: http.StatusForbidden}
	before := e.sim.Stats().Requests
	for i := range probeCap + 1 {
		own := d.ownAnswer(context.Background(), f, catalog.Claim{ItemID: e.items[i].ItemID}, refused)
		if want := i < probeCap; own != want {
			t.Fatalf("answer %d judged own %v, want %v", i+1, own, want)
		}
	}
	if n := e.sim.Stats().Requests - before; n != probeCap {
		t.Fatalf("%d probes, want %d", n, probeCap)
	}
}

// laterOn moves the item's next slot an hour back, as if that hour had passed.
func laterOn(t *testing.T, pool *pgxpool.Pool, itemID string) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE tracked_items SET next_collect_at = now() - interval '1 second' WHERE item_id = $1`, itemID); err != nil {
		t.Fatal(err)
	}
}

// A maintenance that answers every item alike is not taken for one item's own: the probe of
// another item is answered alike, the pass pauses everyone, and the item asked is written back
// failed at its due time (so the provider probe asks another), the rest handed back. So it is
// for an item that was answered maintenance before.
func TestAMaintenanceForEveryItemStillPauses(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	e := setup(t, 3, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			http.Error(w, "down", http.StatusServiceUnavailable)
		})
	})
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET last_outcome = 'maintenance', failure_streak = 1, last_attempt_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	s, err := e.dispatcher(t, Config{Concurrency: 1}, nil).RunOnce(ctx)
	if err != nil || !s.Paused || s.Status != provider.Maintenance || s.Failed != 1 || s.Released != 2 {
		t.Fatalf("summary %s, %v: want the first answer to pause everyone, its item failed at its due time, the others handed back", s, err)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE next_collect_at <= now()`); c != 3 {
		t.Fatalf("%d items due, want all 3", c)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("%d provider calls, want 2: the item's, and one probe of another", n)
	}
}

// A key refused for every item still stops the pass after one probe, and the item asked is
// written back failed at its due time, so that the daemon's key re-check (catalog.ProbeItem)
// asks another item.
func TestAKeyRefusedForEveryItemStillStops(t *testing.T) {
	t.Parallel()
	e := setup(t, 3, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusForbidden) })
	})
	ctx := context.Background()
	s, err := e.dispatcher(t, Config{Concurrency: 1}, nil).RunOnce(ctx)
	if err == nil || s.Stop != StopKeyRefused || s.Failed != 1 || s.Released != 2 || s.ItemErrors != 0 {
		t.Fatalf("summary %s, %v: want the pass stopped for the refused key, its item failed, 2 handed back", s, err)
	}
	var id string
	if err := e.pool.QueryRow(ctx, `SELECT item_id FROM tracked_items WHERE last_outcome = 'config' AND failure_streak = 1 AND next_collect_at <= now()`).Scan(&id); err != nil {
		t.Fatalf("the refused item's failure is not written at its due time: %v", err)
	}
	if p, err := catalog.ProbeItem(ctx, e.pool, ""); err != nil || p == id {
		t.Fatalf("probe item %q, %v: want one whose last collection did not fail", p, err)
	}
}

func TestMalformedAndOversizedBodiesAreItemFailures(t *testing.T) {
	t.Parallel()
	var broken, huge string
	e := setup(t, 4, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.URL.Query().Get("itemId")
			switch {
			case r.URL.Path == "/df/auction" && id == broken:
				_, _ = w.Write([]byte(`{"rows":[{"auctionNo":"not-a-number"`))
			case r.URL.Path == "/df/auction" && id == huge:
				_, _ = w.Write([]byte(`{"rows":[` + strings.Repeat(`{"auctionNo":1},`, 200000) + `{}]}`))
			default:
				next.ServeHTTP(w, r)
			}
		})
	})
	broken, huge = e.items[0].ItemID, e.items[1].ItemID
	client, err := provider.NewClient(provider.ClientConfig{
		Workload: provider.WorkloadMarket, BaseURL: e.srv.URL, Key: marketKey, MaxBodyBytes: 1 << 20,
	})
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(e.pool, client, configured(e.pool, Config{}), nil)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Collected != 2 || s.Failed != 2 {
		t.Fatalf("summary %s: want 2 collected and 2 failed", s)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE failure_streak = 1 AND next_collect_at > now()`); c != 2 {
		t.Fatalf("%d failed items rescheduled, want 2", c)
	}
}

func TestRecollectingTheSameSalesAddsNoDuplicates(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	sold := `{"rows":[
		{"soldDate":"2026-05-01 01:00:09","itemId":"X","itemName":"n","count":1,"price":100,"unitPrice":100},
		{"soldDate":"2026-05-01 01:00:05","itemId":"X","itemName":"n","count":2,"price":100,"unitPrice":50},
		{"soldDate":"2026-05-01 01:00:05","itemId":"X","itemName":"n","count":2,"price":100,"unitPrice":50},
		{"soldDate":"2026-05-01 01:00:01","itemId":"X","itemName":"n","count":1,"price":10,"unitPrice":10}]}`
	e := setup(t, 1, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction-sold" {
				mu.Lock()
				defer mu.Unlock()
				// Rows of another item would be dropped at the boundary: answer for the one asked.
				_, _ = w.Write([]byte(strings.ReplaceAll(sold, `"itemId":"X"`, `"itemId":"`+r.URL.Query().Get("itemId")+`"`)))
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()
	id := e.items[0].ItemID
	collect := func() {
		t.Helper()
		// Every collection writes a snapshot, so each says how many sales were new.
		if s, err := e.dispatcher(t, Config{History: everyCollection}, nil).CollectOne(ctx, id); err != nil || s.Collected != 1 {
			t.Fatalf("collect: %s %v", s, err)
		}
	}
	latestSales := func() int {
		return count(t, e.pool, `SELECT sales_count FROM auction_snapshots ORDER BY snapshot_id DESC LIMIT 1`)
	}
	collect()
	if c := count(t, e.pool, `SELECT count(*) FROM auction_sales`); c != 4 || latestSales() != 4 {
		t.Fatalf("first collection stored %d sales (snapshot says %d), want 4 incl. both identical rows", c, latestSales())
	}
	collect()
	if c := count(t, e.pool, `SELECT count(*) FROM auction_sales`); c != 4 || latestSales() != 0 {
		t.Fatalf("re-collection: %d sales stored, snapshot reports %d new; want 4 and 0", c, latestSales())
	}
	mu.Lock()
	sold = strings.Replace(sold, `{"rows":[`, `{"rows":[{"soldDate":"2026-05-01 01:00:09","itemId":"X","itemName":"n","count":1,"price":100,"unitPrice":100},`, 1)
	mu.Unlock()
	collect()
	if c := count(t, e.pool, `SELECT count(*) FROM auction_sales`); c != 5 || latestSales() != 1 {
		t.Fatalf("a new identical sale in the same second: %d stored, %d new; want 5 and 1", c, latestSales())
	}
}

// 10,000 HOT items added at once are rescheduled so that no second of the minute holds more
// than 1.5x the mean. This exercises the claim and write-back path directly: the provider has
// nothing to do with where the next slots fall.
func TestPhasePinnedReschedulesSpreadTenThousandHotItems(t *testing.T) {
	// Not parallel: its passes are heavy, and beside the other tests on a loaded 2-core machine
	// they outlast the leases and schedules it checks.
	const n = 10000
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	storetest.Items(t, pool, numberedItems(n, func(int) tiers.Tier { return tiers.Hot })...)
	for {
		claims, err := catalog.ClaimDue(ctx, pool, 2000, time.Minute, "t", 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(claims) == 0 {
			break
		}
		results := make([]result, len(claims))
		for i, c := range claims {
			results[i] = result{claim: c, at: c.DBNow, outcome: "ok"}
		}
		if _, err := writeBack(ctx, pool, configured(nil, Config{}).History, results, nil); err != nil {
			t.Fatal(err)
		}
	}
	var maxPerSecond, seconds int
	var mean float64
	err := pool.QueryRow(ctx, `
		SELECT max(c), avg(c), count(*) FROM (
			SELECT count(*) AS c FROM tracked_items
			GROUP BY floor(extract(epoch FROM next_collect_at))::bigint % 60) s`).Scan(&maxPerSecond, &mean, &seconds)
	if err != nil {
		t.Fatal(err)
	}
	if seconds != 60 || float64(maxPerSecond) > 1.5*mean {
		t.Fatalf("due times use %d seconds of the minute, busiest holds %d items, mean %.1f (want 60 seconds, <= 1.5x mean)",
			seconds, maxPerSecond, mean)
	}
}

// A long pause logs one line when it starts, at most one summary a minute, and one line when
// it ends, however often the loop checks.
func TestPauseLogIsBounded(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, tiers.Hot, nil)
	ctx := context.Background()
	if _, err := provider.SetStatus(ctx, e.pool, "neople", provider.Maintenance, "weekly"); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	d := e.dispatcher(t, Config{}, zap.New(core))
	pass := func() {
		t.Helper()
		if _, err := d.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for range 30 { // thirty one-second checks
		pass()
	}
	if n := logs.Len(); n != 1 || logs.All()[0].Message != "collection paused" {
		t.Fatalf("30 paused passes logged %d lines, want the one that starts the pause: %v", n, logs.All())
	}
	if _, err := provider.SetStatus(ctx, e.pool, "neople", provider.Healthy, "back"); err != nil {
		t.Fatal(err)
	}
	pass()
	pass()
	if logs.FilterMessage("collection resumed").Len() != 1 || logs.Len() != 2 {
		t.Fatalf("want exactly paused, resumed: %v", logs.All())
	}
}

// A long pause writes one summary a minute however often it is checked, and a new status or
// a new since starts a new pause line.
func TestPauseLogSummarisesEveryMinute(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	log := zap.New(core)
	var p pauseLog
	t0 := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for s := range 150 { // a check a second for two and a half minutes
		p.paused(log, "neople", provider.Maintenance, "weekly", t0, t0.Add(time.Duration(s)*time.Second))
	}
	sums := logs.FilterMessage("collection still paused").All()
	if logs.FilterMessage("collection paused").Len() != 1 || len(sums) != 2 || sums[0].ContextMap()["paused_passes"] != int64(60) {
		t.Fatalf("150 one-second checks: want the start and two summaries of 60 passes: %v", logs.All())
	}
	p.paused(log, "neople", provider.Degraded, "errors", t0, t0.Add(151*time.Second))
	p.resumed(log, "neople", t0.Add(152*time.Second))
	p.resumed(log, "neople", t0.Add(153*time.Second))
	if logs.FilterMessage("collection paused").Len() != 2 || logs.FilterMessage("collection resumed").Len() != 1 {
		t.Fatalf("a new status starts a new pause line, and resuming logs once: %v", logs.All())
	}
	if got := logs.FilterMessage("collection resumed").All()[0].ContextMap()["paused_seconds"]; got != 152.0 {
		t.Fatalf("resumed after %v s, want 152 (from the first paused check)", got)
	}
}
