// Package daemon is `collector run`: the collection loop woken by the database, the outbox
// relay in follow mode, popularity recalculation, provider health, the cluster budget share and
// an HTTP server for metrics and health checks, in one process.
//
// Daemon only wires services, each a small type with a config validated once by its
// constructor, a Start loop and a runOnce a test can call: collectService (collect.go),
// planService (planner.go), gaugeService (gauges.go), retentionService (retention.go), and the
// notification listener (listen.go). The budget feedback loop they share — what a collection
// costs, the share of the budget the plan may assume, the claim size, when to plan again — is
// budget.Loop, which has no database and no clock.
//
// The collection loop runs a dispatcher pass until nothing is due (or for a minute,
// dispatcher.Config.Span, then the next at once), then asks the database when the next item
// becomes claimable (the earliest next_collect_at among unleased rows, or the
// earliest expiry of a lease held on an earlier row) and sleeps exactly that long, capped by
// daemon.max_sleep. A tracked_items notification (daemon.notify) or a provider status change
// may wake it earlier; nothing depends on them.
//
// Every loop logs, backs off and carries on after a database or provider error, so a
// restarted server or killed connections need no restart of the daemon.
package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/export"
	"github.com/duecollector/duecollector/internal/health"
	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/httpserve"
	"github.com/duecollector/duecollector/internal/maintenance"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/retention"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testsignal"
)

// Config is everything the daemon runs with.
type Config struct {
	Daemon config.DaemonConfig
	// Dispatch configures the dispatcher; Provider (provider.name) is required, and Grace,
	// Observer, Gather, Ahead, ClaimLimit, ClaimRequests and TopAhead are set by the daemon.
	Dispatch dispatcher.Config
	// Catalog drives popularity recalculation every Catalog.RecalcInterval; 0 = never, which
	// only tests use (the configuration requires at least 10s).
	Catalog config.CatalogConfig
	// Retention deletes outbox rows, and interest events and candles when an age is set, every
	// Retention.Interval (retention.FromConfig): the one pruner.
	Retention retention.Config
	// Partitions is the process's one partition keeper (required), built by the caller and
	// shared by upkeep and the write path.
	Partitions *partition.Partitions
	// PartitionInterval is how often partitions are kept; 0 = partition.KeepIntervalDefault.
	PartitionInterval time.Duration
	// DirectPool reaches PostgreSQL itself (database.direct_url) for partition DDL (upkeep and
	// the write path's); nil = the pool.
	DirectPool *pgxpool.Pool
	// Health is the provider health thresholds; zero fields take health's defaults.
	Health health.Thresholds
	// GaugeInterval is how often the SQL gauges refresh and the planner asks whether to plan
	// sooner; 0 = GaugeIntervalDefault.
	GaugeInterval time.Duration
	// KeyRecheck: while the provider refuses the market key, one call this often tells whether
	// it works again; 0 = KeyRecheckDefault.
	KeyRecheck time.Duration
	// ClaimHorizon: how much of this process's budget one claim takes, and how little provider
	// work still queued lets the next claim in. When more is due than the budget serves, an
	// item falling due (HOT first) is claimed within about this long instead of behind a batch
	// that takes seconds to drain; shorter means more claim statements a second. 0 =
	// ClaimHorizonDefault.
	ClaimHorizon time.Duration
	// Export, when set (export.enabled), writes each past day's files once it settles.
	Export *export.Config
	// Relay, when set, runs the outbox relay in follow mode (kafka.brokers configured).
	Relay *outbox.RelayConfig
	// RelayRestart: a relay stopped on an error retrying cannot fix is run again this long
	// after; 0 = RelayRestartDefault.
	RelayRestart time.Duration
	// Market is the market key's budget for the whole cluster (provider.market.*).
	Market config.WorkloadLimits
	// KeyLabel identifies the market key in collector_instances (budget.KeyLabel).
	KeyLabel string
	// Version and Commit label collector_build_info.
	Version, Commit string
	// ListenURL reaches PostgreSQL directly for LISTEN (database.direct_url); "" = a pooled
	// connection, unless the pool runs in the simple protocol (PgBouncer), which has no session.
	ListenURL string
	// SchemaHint is added to /readyz's answer when migrations are pending: what to run.
	SchemaHint string
	// Console, when set, is served at / on daemon.http_addr beside /metrics: the console
	// (internal/console) and the read API at /api/v1/ (internal/api).
	Console http.Handler
	// Reads routes the console's reads to a replica (database.read_url); when it has one, its
	// state is exported as collector_replica_*. Its caller runs its measurements (Start).
	Reads *store.Reads
	// Collectors are registered on /metrics beside the daemon's own (the read API's).
	Collectors []prometheus.Collector
	// HealthChecked, when initialised (tests), hears every provider health check.
	HealthChecked testsignal.Signal[provider.Status]
	// signals, when initialised (tests), hear what the services did.
	signals signals
}

// Timings no operator needs to turn (configuration keys before issue 37); tests set Config's
// fields instead.
const (
	GaugeIntervalDefault = 15 * time.Second
	KeyRecheckDefault    = 5 * time.Minute
	ClaimHorizonDefault  = 250 * time.Millisecond
	RelayRestartDefault  = time.Minute
)

// withDefaults fills the zero timings.
func (c Config) withDefaults() Config {
	c.Health = c.Health.WithDefaults()
	c.GaugeInterval = cmp.Or(c.GaugeInterval, GaugeIntervalDefault)
	c.KeyRecheck = cmp.Or(c.KeyRecheck, KeyRecheckDefault)
	c.ClaimHorizon = cmp.Or(c.ClaimHorizon, ClaimHorizonDefault)
	c.RelayRestart = cmp.Or(c.RelayRestart, RelayRestartDefault)
	c.PartitionInterval = cmp.Or(c.PartitionInterval, partition.KeepIntervalDefault)
	return c
}

// service is a periodic job in River's maintenance shape: a config validated once by its
// constructor, a runOnce tests call, and Start, its loop until ctx ends.
type service interface{ Start(ctx context.Context) }

// signals let tests wait on what the services did instead of polling; off in production.
type signals struct {
	passed    testsignal.Signal[passResult]
	planned   testsignal.Signal[planResult]
	pruned    testsignal.Signal[retention.Result]
	kept      testsignal.Signal[[]partition.TableState]
	refreshed testsignal.Signal[gaugeResult]
}

// Daemon is one `collector run` process: it wires the services and runs them.
type Daemon struct {
	pool    *pgxpool.Pool
	cfg     Config
	log     *zap.Logger
	metrics *telemetry.Metrics
	health  *health.Monitor
	share   *budget.Share // nil when daemon.budget.enabled is false
	loop    *budget.Loop
	relay   *outbox.Relay
	ln      net.Listener
	wake    chan struct{}
	writes  *store.WriteHealth // whether the database takes our writes: /readyz, metrics
	// refusedBy is the cause of the last write state writesChanged heard (its calls are
	// serialised by writes).
	refusedBy store.WriteCause
	// refusedSince is when the database began refusing writes (zero while it takes them),
	// for the line that tells it takes them again; serialised as refusedBy is.
	refusedSince time.Time
	// spaceProbeWarned: the space probe's odd failure is logged (probeSpace's goroutine only).
	spaceProbeWarned bool
	// space is the space probe's hysteresis (probeSpace's goroutine only): in a spell of
	// lacking space, the successes in a row so far and how many end it; when the last ended.
	space struct {
		spell    bool
		ok, need int
		ended    time.Time
		// blind: since when the probe has failed for another reason than a refusal (zero:
		// it ran). blindFor ends the lack after that long anyway; the probe and its wait are
		// fields so tests can make them fail and shorten it.
		blind    time.Time
		blindFor time.Duration
		probe    func(ctx context.Context) error
	}

	collect *collectService
	// The periodic jobs beside collection, started together by Run (maintenance).
	gauges    *gaugeService
	plan      *planService // nil when catalog.recalc_interval is 0
	retention *retentionService
	parts     *partitionService
	export    *exportService // nil unless export.enabled
	extra     []service      // more maintenance jobs, for tests
}

// maintenance lists the periodic jobs beside collection: the gauges, the planner, the one
// pruner, the one partition keeper and the exporter.
func (d *Daemon) maintenance() []service {
	s := []service{d.gauges, d.retention, d.parts}
	if d.plan != nil {
		s = append(s, d.plan)
	}
	if d.export != nil {
		s = append(s, d.export)
	}
	return append(s, d.extra...)
}

// jobName is a maintenance job's name in logs and collector_loop_errors_total.
func jobName(s service) string {
	switch s.(type) {
	case *gaugeService:
		return "gauges"
	case *planService:
		return "recalc"
	case *retentionService:
		return "retention"
	case *partitionService:
		return "partitions"
	case *exportService:
		return "export"
	}
	return "maintenance"
}

// passSpan ends a pass through a backlog once a minute: the cost loop learns from each pass
// (budget.Loop.Learn), and the pass's log line and collector_passes_total come at its end.
// The next pass starts at once; what it costs is the tail of the last batch.
const passSpan = time.Minute

// New builds the daemon and binds its HTTP address (so a busy port fails at start).
func New(pool *pgxpool.Pool, client *provider.Client, cfg Config, log *zap.Logger) (*Daemon, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.Dispatch.Owner == "" {
		cfg.Dispatch.Owner = telemetry.Instance()
	}
	if cfg.Dispatch.Provider == "" {
		return nil, errors.New("daemon: provider.name is required")
	}
	cfg = cfg.withDefaults()
	loop, err := budget.NewLoop(budget.LoopConfig{PackSize: max(cfg.Dispatch.PackSize, 1), Market: cfg.Market, Headroom: cfg.Daemon.Budget.Headroom})
	if err != nil {
		return nil, err
	}
	d := &Daemon{pool: pool, cfg: cfg, log: log, metrics: telemetry.NewMetrics(), loop: loop, wake: make(chan struct{}, 1),
		writes: store.NewWriteHealth()}
	d.writes.OnChange = d.writesChanged
	d.writesChanged(d.writes.State())
	d.metrics.CostRatio.Set(loop.CostRatio())
	d.metrics.RegisterPool(pool)
	if cfg.Reads != nil && cfg.Reads.State().Replica {
		d.metrics.RegisterReads(func() (time.Duration, bool, bool) {
			st := cfg.Reads.State()
			return st.Lag, st.LagKnown, st.Source == store.SourceReplica
		})
	}
	for _, c := range cfg.Collectors {
		if err := d.metrics.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("register metrics: %w", err)
		}
	}
	d.metrics.SetBuildInfo(orUnknown(cfg.Version), orUnknown(cfg.Commit))
	client.SetObserver(requestMetrics{d.metrics})
	client.SetHold(d.writes.Hold)
	d.metrics.RegisterRowsRejected(provider.RejectReasons[:], func(r string) int64 { return client.Stats().Rejected[r] })

	var rate health.RateSetter = client
	if cfg.Daemon.Budget.Enabled {
		bc := budget.ConfigFor(cfg.Daemon.Budget, cfg.Market, cfg.KeyLabel, cfg.Dispatch.Owner)
		bc.WriteHealth = d.writes
		s, err := budget.New(pool, bc, log)
		if err != nil {
			return nil, err
		}
		d.share, rate = s, s
	}
	calls := new(atomic.Int64)
	f := &budget.Fetcher{Next: client, Share: d.share, Observer: fetchMetrics{d.metrics, calls}}
	d.health = health.New(pool, health.Config{Thresholds: cfg.Health, Provider: cfg.Dispatch.Provider, Owner: cfg.Dispatch.Owner},
		health.AuctionProbe(pool, f.Auction), rate, log)
	d.health.Checked = cfg.HealthChecked
	d.health.OnChange = func(from, to provider.Status, _ string) {
		for _, st := range []provider.Status{provider.Healthy, provider.Degraded, provider.Maintenance, provider.Recovering} {
			v := 0.0
			if st == to {
				v = 1
			}
			d.metrics.ProviderStatus.WithLabelValues(cfg.Dispatch.Provider, string(st)).Set(v)
		}
		if from != "" {
			d.metrics.StatusChanges.WithLabelValues(cfg.Dispatch.Provider, string(from), string(to)).Inc()
		}
	}

	dc := cfg.Dispatch
	dc.Grace = cfg.Daemon.ShutdownGrace
	dc.Ahead = d.ahead()
	dc.Gather = dc.Ahead > 0
	dc.ClaimLimit = func() int { return loop.ClaimLimit(d.perSecond()) }
	dc.ClaimRequests = func() float64 { return loop.ClaimRequests(d.perSecond(), cfg.ClaimHorizon) }
	dc.TopAhead = min(cfg.ClaimHorizon, catalog.MaxAhead-time.Millisecond)
	dc.Span = passSpan
	dc.Observer = &observer{m: d.metrics, h: d.health}
	dc.WriteHealth = d.writes
	dc.Partitions = cfg.Partitions
	disp, err := dispatcher.New(pool, f, dc, log)
	if err != nil {
		return nil, err
	}
	d.collect, err = newCollectService(collectConfig{
		MaxSleep: cfg.Daemon.MaxSleep, PausedSleep: min(cfg.Daemon.MaxSleep, cfg.Health.CheckInterval), Ahead: d.ahead(),
		Cooldown: budget.Tuned(cfg.Daemon.Budget).Cooldown, KeyRecheck: cfg.KeyRecheck, KeyLabel: cfg.KeyLabel, Passed: &d.cfg.signals.passed,
	}, &collectService{pool: pool, disp: disp, client: client, share: d.share, loop: loop, calls: calls, metrics: d.metrics, log: log,
		wake: d.wake, changed: d.health.Changed, writes: d.writes})
	if err != nil {
		return nil, err
	}
	if d.gauges, err = newGaugeService(gaugeConfig{Interval: cfg.GaugeInterval, Market: cfg.Market, Refreshed: &d.cfg.signals.refreshed},
		&gaugeService{pool: pool, share: d.share, loop: loop, metrics: d.metrics, log: log}); err != nil {
		return nil, err
	}
	if cfg.Catalog.RecalcInterval > 0 {
		learned := func() float64 { return 1 }
		if d.share != nil {
			learned = d.share.LearnedShare
		}
		if d.plan, err = newPlanService(planConfig{Catalog: cfg.Catalog, Dispatch: cfg.Dispatch, AuctionLimit: client.AuctionLimit(),
			CheckEvery: cfg.GaugeInterval, Planned: &d.cfg.signals.planned},
			&planService{pool: pool, loop: loop, learned: learned, metrics: d.metrics, log: log, wake: d.wake, writes: writeReports{d.writes}}); err != nil {
			return nil, err
		}
	}
	// Always: the outbox grows by an event per snapshot whether or not a relay publishes it.
	if d.retention, err = newRetentionService(retentionConfig{Retention: cfg.Retention, Pruned: &d.cfg.signals.pruned}, pool, d.metrics, log); err != nil {
		return nil, err
	}
	d.retention.writes = writeReports{d.writes}
	if d.parts, err = newPartitionService(partitionConfig{Interval: cfg.PartitionInterval, Maintained: &d.cfg.signals.kept}, cfg.Partitions, d.metrics, log); err != nil {
		return nil, err
	}
	d.parts.writes = writeReports{d.writes}
	if cfg.Export != nil {
		d.metrics.RegisterExport()
		if d.export, err = newExportService(*cfg.Export, pool, d.metrics, log); err != nil {
			return nil, err
		}
	}

	if cfg.Relay != nil {
		rc := *cfg.Relay
		rc.OnPublished = func(ages []float64) {
			for _, a := range ages {
				d.metrics.PublishLatency.Observe(a)
			}
		}
		rc.OnError = func(reason string) { d.metrics.RelayErrors.WithLabelValues(reason).Inc() }
		rc.OnHealth = func(up bool) {
			if up {
				d.metrics.RelayUp.Set(1)
			} else {
				d.metrics.RelayUp.Set(0)
			}
		}
		rc.WriteHealth = d.writes
		if d.relay, err = outbox.NewRelay(pool, rc, log); err != nil {
			return nil, err
		}
		d.metrics.ExportRelay()
	}
	if cfg.Daemon.HTTPAddr != "" {
		if d.ln, err = net.Listen("tcp", cfg.Daemon.HTTPAddr); err != nil {
			return nil, fmt.Errorf("daemon.http_addr %s: %w", cfg.Daemon.HTTPAddr, err)
		}
	}
	return d, nil
}

// perSecond is the requests per second this process may send on the market key: its share,
// or without sharing what the client's own limiter lets through (the tighter of rate and
// per_minute; claims sized to the rate alone, under a tighter per_minute, held items their
// calls could not reach within the claim's horizon).
func (d *Daemon) perSecond() float64 {
	if d.share != nil {
		return d.share.Stats().PerSecond
	}
	return budget.Ceiling(d.cfg.Market, 0)
}

// ahead is how long before their due time the daemon claims items. With packing on it is
// daemon.pack_wait: passes start that far apart so items gather and share calls, and claiming
// that far ahead keeps each item collected at its due time instead of up to a pack_wait late.
func (d *Daemon) ahead() time.Duration {
	if d.cfg.Dispatch.PackSize <= 1 {
		return 0
	}
	return d.cfg.Daemon.PackWait
}

// Addr is the HTTP server's address ("" without one).
func (d *Daemon) Addr() string {
	if d.ln == nil {
		return ""
	}
	return d.ln.Addr().String()
}

// Run runs until ctx ends, then shuts down gracefully: claiming stops, in-flight calls get
// daemon.shutdown_grace, their results are written, unfinished leases released, the relay
// publishes what the last write-backs produced, and Run returns nil.
func (d *Daemon) Run(ctx context.Context) error {
	// Background services outlive the collection loop by a little: heartbeats must go on while
	// in-flight calls finish, and the relay flushes after the last write-back.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	var wg sync.WaitGroup
	start := func(fn func(context.Context)) { wg.Go(func() { fn(bg) }) }
	// The background jobs run under the one lifecycle: a panic is logged, counted under the
	// job's name, and the job started again, the process living on. Not the collect loop
	// (which hands a panicking item back itself), the relay (which restarts itself), nor the
	// health monitor and the budget share: a panic in them can leave a lock held or this
	// instance's share given up, so it ends the process, and its leases are taken over.
	jobs := maintenance.Runner{Restart: d.cfg.RelayRestart, Panics: d.metrics.LoopErrors, Log: d.log}
	job := func(name string, fn func(context.Context)) {
		start(func(ctx context.Context) { jobs.Run(ctx, name, fn) })
	}
	// Every loop's error series exists before any loop runs, so a first error is an increase.
	loops := []string{"collect", "wake", "writes"}
	if d.cfg.Daemon.Notify {
		loops = append(loops, "listen")
	}
	for _, s := range d.maintenance() {
		loops = append(loops, jobName(s))
	}
	for _, l := range loops {
		d.metrics.LoopErrors.WithLabelValues(l)
	}
	if d.share != nil {
		start(d.share.Start)
	}
	start(d.health.Start)
	job("writes", d.probeWrites)
	if d.cfg.Daemon.Notify {
		job("listen", func(ctx context.Context) {
			listenNotifications(ctx, d.pool, d.cfg.ListenURL, d.wake, d.metrics, d.log, d.cfg.Daemon.MaxSleep)
		})
	}
	for _, s := range d.maintenance() {
		job(jobName(s), s.Start)
	}
	var srv *http.Server
	if d.ln != nil {
		srv = httpserve.New(d.handler())
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := srv.Serve(d.ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				d.log.Error("http server stopped", zap.Error(err))
			}
		}()
	}
	var relayDone chan struct{}
	if d.relay != nil {
		relayDone = make(chan struct{})
		go func() {
			defer close(relayDone)
			d.runRelay(ctx)
		}()
	}
	d.log.Info("collector running", zap.String("owner", d.cfg.Dispatch.Owner), zap.String("http", d.Addr()),
		zap.Bool("relay", d.relay != nil), zap.Bool("budget", d.share != nil))
	if d.relay == nil && !d.cfg.Dispatch.History.NoOutbox {
		// Right where a relay runs elsewhere; where none does, the outbox grows for good and only
		// the lag alert would say so.
		d.log.Info("no relay in this process: events wait in the outbox for a relay-outbox elsewhere",
			zap.String("relay_key", "kafka.brokers"), zap.String("publish_nowhere_key", "outbox.enabled=false"))
	}

	d.collect.Start(ctx)

	d.log.Info("collection stopped; flushing")
	if d.relay != nil {
		<-relayDone
		if up, _ := d.relay.Health(); up { // one stopped for good has nothing to flush with
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(d.cfg.Daemon.ShutdownGrace, 5*time.Second))
			d.flushOutbox(fctx)
			cancel()
		}
		_ = d.relay.Close()
	}
	stopBG()
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if srv.Shutdown(sctx) != nil {
			// Requests still running (a slow /timeseries) would hold their pool connections,
			// and closing the pool waits for them: closing their connections cancels them.
			_ = srv.Close()
		}
		cancel()
	}
	wg.Wait()
	d.log.Info("collector stopped")
	return nil
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
