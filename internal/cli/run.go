package cli

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/daemon"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/export"
	"github.com/duecollector/duecollector/internal/health"
	"github.com/duecollector/duecollector/internal/httpserve"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/retention"
	"github.com/duecollector/duecollector/internal/store"
)

func newRunCmd(a *app) *cobra.Command {
	var testTimings bool
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the collector daemon: database-timed collection, relay, recalculation, metrics",
		Long: `run keeps collecting until SIGTERM/SIGINT. After each pass it asks the database when the next
item becomes claimable and sleeps exactly that long (at most daemon.max_sleep); with
daemon.notify it also wakes when items are imported, touched or promoted. It relays the outbox
to Kafka when kafka.brokers is set, recalculates popularity every catalog.recalc_interval,
moves the provider status by itself (internal/health), shares each API key's budget with every
other running instance (daemon.budget.*), and serves /metrics, /healthz, /readyz and the
operator console (/, docs/console.md) on daemon.http_addr. Any number of instances may run side by side, next to one-shot collect-due
and relay-outbox runs.

On SIGTERM/SIGINT it stops claiming, lets calls in flight finish within daemon.shutdown_grace,
writes their results, hands unfinished items back at once, flushes the relay and exits 0.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			d, err := a.newDaemon(ctx, testTimings)
			if err != nil && ctx.Err() != nil {
				// Stopped before it started (its database still down, say): a stop asked for,
				// not a failure, which systemd's Restart=on-failure would answer by restarting it.
				a.log.Info("stopped before starting", zap.NamedError("while", err))
				return nil
			}
			if err != nil {
				return err
			}
			return d.Run(ctx)
		}),
	}
	f := cmd.Flags()
	f.BoolVar(&testTimings, "test-timings", false, "react at test speed: health probes and recovery within about a second (tools/faults)")
	_ = f.MarkHidden("test-timings")
	f.String("http-addr", "", "serve /metrics, /healthz and /readyz on `HOST:PORT` (daemon.http_addr)")
	f.Duration("max-sleep", 0, "longest sleep between passes (daemon.max_sleep)")
	f.Bool("notify", true, "wake on tracked_items notifications (daemon.notify)")
	a.bindFlag("daemon.http_addr", f.Lookup("http-addr"))
	a.bindFlag("daemon.max_sleep", f.Lookup("max-sleep"))
	a.bindFlag("daemon.notify", f.Lookup("notify"))
	return cmd
}

// newDaemon builds the daemon from the validated config: the market workload's own client, the
// relay when kafka.brokers is set.
func (a *app) newDaemon(ctx context.Context, testTimings bool) (*daemon.Daemon, error) {
	client, err := provider.FromConfig(a.cfg.Provider, provider.WorkloadMarket, a.log)
	if err != nil {
		return nil, err
	}
	var relay *outbox.RelayConfig
	if len(a.cfg.Kafka.Brokers) > 0 {
		relay = &outbox.RelayConfig{KafkaConfig: a.cfg.Kafka, DirectURL: a.cfg.Database.DirectURL}
	}
	pool, err := a.waitForDB(ctx) // after the configuration checks, so all of them show in one round
	if err != nil {
		return nil, err
	}
	direct, err := a.directPool(ctx, pool)
	if err != nil {
		return nil, err
	}
	parts, err := a.keeper(ctx, pool)
	if err != nil {
		return nil, err
	}
	var h health.Thresholds
	if testTimings {
		h = health.TestTimings
	}
	reads, err := a.reads(ctx)
	if err != nil {
		return nil, err
	}
	a.background(ctx, "replica", reads.Start)
	var con http.Handler
	var apiMetrics []prometheus.Collector
	if a.cfg.Console.Enabled && a.cfg.Daemon.HTTPAddr != "" {
		c, err := a.newConsole(ctx, pool, reads)
		if err != nil {
			return nil, err
		}
		con = c.Handler()
	}
	if a.cfg.Daemon.HTTPAddr != "" {
		if con, apiMetrics, err = a.withAPI(ctx, reads, con); err != nil {
			return nil, err
		}
	}
	ver, rev, _ := buildInfo()
	var exp *export.Config
	if a.cfg.Export.Enabled {
		exp = &export.Config{Dir: a.cfg.Export.Dir, Format: a.cfg.Export.Format, Version: ver, Retention: a.cfg.Retention}
	}
	return daemon.New(pool, client, daemon.Config{
		Daemon:     a.cfg.Daemon,
		Dispatch:   dispatcher.FromConfig(a.cfg),
		Catalog:    a.cfg.Catalog,
		Retention:  retention.FromConfig(a.cfg),
		Partitions: parts,
		Health:     h,
		DirectPool: direct,
		Relay:      relay,
		Market:     a.cfg.Provider.Market,
		KeyLabel:   marketKeyLabel(a),
		Version:    ver,
		Commit:     rev,
		ListenURL:  a.cfg.Database.DirectURL,
		SchemaHint: migrateHint,
		Console:    con,
		Reads:      reads,
		Collectors: apiMetrics,
		Export:     exp,
	}, a.log)
}

func marketKeyLabel(a *app) string {
	return budget.KeyLabel(string(provider.WorkloadMarket), a.cfg.Provider.MarketKey.Reveal())
}

// waitForDB opens the pool like every command, but a daemon may start before its database:
// it retries with back-off (1s doubling to 30s), logging each attempt, while /healthz answers
// and /readyz says why it is not ready. One-shots keep failing fast through a.db.
func (a *app) waitForDB(ctx context.Context) (*pgxpool.Pool, error) {
	pool, err := a.db(ctx)
	if err == nil || ctx.Err() != nil {
		return pool, err
	}
	var why atomic.Pointer[string]
	setWhy := func(err error) { msg := "database not ready: " + err.Error(); why.Store(&msg) }
	setWhy(err)
	stop := a.serveNotReady(&why)
	defer stop()
	retry := backoff.Policy{Min: time.Second, Max: 30 * time.Second}
	for attempt := 1; ; attempt++ {
		setWhy(err)
		wait := retry.Delay(attempt)
		if store.NeedsMigration(err) {
			// Reachable, but behind (or made by another schema text): only a migration helps.
			a.log.Warn("database schema not current; waiting for `collector migrate up`", zap.Int("attempt", attempt),
				zap.Duration("retry_in_seconds", wait), zap.Error(err))
		} else {
			a.log.Warn("database not reachable yet; retrying", zap.Int("attempt", attempt),
				zap.Duration("retry_in_seconds", wait), zap.Error(err))
		}
		if !backoff.Sleep(ctx, wait) {
			return nil, fmt.Errorf("stopped while waiting for the database: %w", err)
		}
		if pool, err = a.db(ctx); err == nil {
			a.log.Info("database ready; starting", zap.Int("attempts", attempt+1))
			return pool, nil
		}
	}
}

// serveNotReady answers /healthz (up) and /readyz (503 with why) on daemon.http_addr until the
// daemon takes the address over; stop frees it.
func (a *app) serveNotReady(why *atomic.Pointer[string]) (stop func()) {
	if a.cfg.Daemon.HTTPAddr == "" {
		return func() {}
	}
	ln, err := net.Listen("tcp", a.cfg.Daemon.HTTPAddr)
	if err != nil {
		a.log.Warn("cannot serve /healthz while waiting for the database", zap.Error(err))
		return func() {}
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, *why.Load(), http.StatusServiceUnavailable)
	})
	srv := httpserve.New(mux)
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	return func() {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		<-done
	}
}
