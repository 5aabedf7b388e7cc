package daemon

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/health"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/retention"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

const (
	itemKey   = "test-item-key"
	marketKey = "test-market-key"
)

type env struct {
	pool  *pgxpool.Pool
	url   string
	sim   *neoplesim.Server
	srv   *httptest.Server
	items []provider.Item
	// ownPools: each daemon gets a pool of its own (application_name daemonApp).
	ownPools bool
	// fullPages: the client asks for the product's page sizes (provider.auction_limit,
	// sold_limit) instead of 5 rows, as packing needs.
	fullPages bool
}

const daemonApp = "duecollector-daemon-test"

// newEnv gives a fresh database and a simulator with n catalog items behind HTTP; nothing is
// tracked yet.
func newEnv(t testing.TB, n int, opts neoplesim.Options) *env {
	t.Helper()
	pool, url := storetest.NewPool(t)
	opts.Items, opts.Seed, opts.ItemKey, opts.MarketKey = n, 7, itemKey, marketKey
	sim := neoplesim.New(opts)
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return &env{pool: pool, url: url, sim: sim, srv: srv, items: sim.Catalog()[:n]}
}

// track inserts items [from, to) of the catalog in tier, due at now() + dueIn (database clock).
func (e *env) track(t testing.TB, from, to int, tier tiers.Tier, dueIn time.Duration) {
	t.Helper()
	var rows []storetest.Item
	for _, it := range e.items[from:to] {
		rows = append(rows, storetest.Item{ID: it.ItemID, Name: it.ItemName, Tier: tier, NextCollectAt: storetest.In(dueIn)})
	}
	storetest.Items(t, e.pool, rows...)
}

// trackObserved inserts every catalog item as HOT_1M, due in an hour, with change estimates
// from 100 collections (so the budget policy plans it), and returns the ids.
func (e *env) trackObserved(t testing.TB) []string {
	t.Helper()
	var ids []string
	var rows []storetest.Item
	for _, it := range e.items {
		ids = append(ids, it.ItemID)
		rows = append(rows, storetest.Item{ID: it.ItemID, Name: it.ItemName, Tier: tiers.Hot, NextCollectAt: storetest.In(time.Hour),
			EstCollections: 100, EstChanges: 50, EstChangedSeconds: 3000, EstUnchangedSeconds: 3000})
	}
	storetest.Items(t, e.pool, rows...)
	return ids
}

var owners atomic.Int64

// testConfig is a daemon config sized for tests: no HTTP server unless asked, no recalculation.
func testConfig() Config {
	d := config.Default().Daemon
	d.HTTPAddr = ""
	d.Notify = false
	d.Budget.Enabled = false
	return Config{
		Daemon:        d,
		GaugeInterval: 200 * time.Millisecond,
		Health:        health.Thresholds{CheckInterval: 50 * time.Millisecond, ProbeBackoff: 100 * time.Millisecond, ProbeBackoffMax: 400 * time.Millisecond},
		Dispatch: dispatcher.Config{
			BatchSize: 50, Lease: 30 * time.Second, Concurrency: 8, FlushSize: 20, EstimateWindow: config.Default().Catalog.EstimateWindow,
			Owner:    fmt.Sprintf("test-daemon-%d", owners.Add(1)),
			Provider: config.Default().Provider.Name,
			History:  history.FromConfig(config.Default()),
		},
		Retention: retention.FromConfig(config.Default()),
		Market:    config.WorkloadLimits{Rate: 100000, Burst: 10000, PerMinute: 100000000},
		KeyLabel:  budget.KeyLabel("market", marketKey),
	}
}

type running struct {
	d    *Daemon
	stop context.CancelFunc
	done chan error
}

// build builds a daemon without running it, for tests that call its services' runOnce.
func (e *env) build(t testing.TB, cfg Config, log *zap.Logger) *Daemon {
	t.Helper()
	if log == nil {
		log = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	}
	// Small pages keep each call cheap.
	auctionLimit, soldLimit := 5, 5
	if e.fullPages {
		def := config.Default().Provider
		auctionLimit, soldLimit = def.AuctionLimit, def.SoldLimit
	}
	client, err := provider.NewClient(provider.ClientConfig{
		Workload: provider.WorkloadMarket, BaseURL: e.srv.URL, Key: marketKey,
		Rate: cfg.Market.Rate, Burst: max(cfg.Market.Burst, 1), PerMinute: cfg.Market.PerMinute,
		AuctionLimit: auctionLimit, SoldLimit: soldLimit,
	})
	if err != nil {
		t.Fatal(err)
	}
	pool := e.pool
	if e.ownPools {
		// The daemon's own connections, told apart by application_name.
		pool, err = store.Open(context.Background(), store.PoolConfig{URL: e.url, MaxConns: 10, ApplicationName: daemonApp})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(pool.Close)
	}
	if cfg.Partitions == nil { // the process's one keeper, as internal/cli builds it
		if cfg.Partitions, err = partition.New(pool, cfg.DirectPool, partition.FromConfig(config.Default())); err != nil {
			t.Fatal(err)
		}
	}
	d, err := New(pool, client, cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// start builds and runs a daemon; it is stopped (and must return nil) at cleanup at the latest.
func (e *env) start(t testing.TB, cfg Config, log *zap.Logger) *running {
	t.Helper()
	d := e.build(t, cfg, log)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{d: d, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(ctx) }()
	t.Cleanup(func() { r.shutdown(t) })
	return r
}

// shutdown cancels the daemon (SIGTERM) and waits for Run to return.
func (r *running) shutdown(t testing.TB) error {
	t.Helper()
	r.stop()
	select {
	case err, ok := <-r.done:
		if ok {
			close(r.done)
			if err != nil {
				t.Errorf("Run returned %v, want nil", err)
			}
		}
		return err
	case <-time.After(time.Minute):
		t.Fatal("daemon did not stop within a minute of cancellation")
		return nil
	}
}

func count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// collected counts the items collected at least once.
func collected(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	return count(t, pool, `SELECT count(*) FROM tracked_items WHERE last_collected_at IS NOT NULL`)
}

// waitPasses waits on the passes of a daemon started with cfg (its passed signal initialised)
// until cond holds.
func waitPasses(t testing.TB, cfg Config, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testkit.Timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s after %s of passes", what, testkit.Timeout)
		}
		cfg.signals.passed.Wait(t)
	}
}

// waitCollected waits on the passes of a daemon started with cfg until at least n items have
// been collected.
func waitCollected(t testing.TB, cfg Config, pool *pgxpool.Pool, n int) {
	t.Helper()
	waitPasses(t, cfg, fmt.Sprintf("%d items collected", n), func() bool { return collected(t, pool) >= n })
}

// pass runs one collection pass of d, failing the test on an error.
func pass(t testing.TB, d *Daemon) passResult {
	t.Helper()
	res := d.collect.runOnce(context.Background())
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	return res
}
