// Package daemon is `collector run`: the collection loop woken by the database, the outbox
// relay in follow mode, popularity recalculation, provider health, the cluster budget share and
// an HTTP server for metrics and health checks, in one process.
//
// The collection loop runs a dispatcher pass until nothing is due, then asks the database when
// the next item becomes claimable (the earliest next_collect_at among unleased rows, or the
// earliest expiry of a lease held on an earlier row) and sleeps exactly that long, capped by
// daemon.max_sleep. A tracked_items notification (daemon.notify) or a provider status change
// may wake it earlier; nothing depends on them.
//
// Every loop logs, backs off and carries on after a database or provider error, so a
// restarted server or killed connections need no restart of the daemon.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/health"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/retention"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testkit"
)

// Config is everything the daemon runs with.
type Config struct {
	Daemon   config.DaemonConfig
	Dispatch dispatcher.Config // Grace, Observer and PrioritizeTiers are set by the daemon
	// Catalog drives popularity recalculation; Catalog.RecalcInterval 0 = never.
	Catalog config.CatalogConfig
	// Retention prunes collected history every Retention.Interval when any age is set.
	Retention config.RetentionConfig
	// Relay, when set, runs the outbox relay in follow mode (kafka.brokers configured).
	Relay *outbox.RelayConfig
	// Market is the market key's budget for the whole cluster (provider.market.*).
	Market config.WorkloadLimits
	// KeyLabel identifies the market key in collector_instances (budget.KeyLabel).
	KeyLabel string
	// Version and Commit label collector_build_info.
	Version, Commit string
	// ListenURL reaches PostgreSQL directly for LISTEN (database.direct_url); "" = a pooled
	// connection, unless the pool runs in the simple protocol (PgBouncer), which has no session.
	ListenURL string
	// SchemaHint is added to /readyz's answer when the schema must be migrated: what to run.
	SchemaHint string
	// HealthChecked, when initialised (tests), hears every provider health check.
	HealthChecked testkit.Signal[provider.Status]
}

// Daemon is one `collector run` process.
type Daemon struct {
	pool    *pgxpool.Pool
	client  *provider.Client
	cfg     Config
	log     *zap.Logger
	metrics *telemetry.Metrics
	health  *health.Monitor
	share   *budget.Share // nil when daemon.budget.enabled is false
	disp    *dispatcher.Dispatcher
	relay   *outbox.Relay
	ln      net.Listener
	wake    chan struct{}
	// replan asks the recalculation loop to plan now: the gauge refresh saw new items.
	replan chan struct{}
	// tracked is the item count the last gauge refresh saw (-1 before the first); gauge loop only.
	tracked int64
	// planned is the share of the market budget the last plan assumed (budgetFraction).
	planned atomic.Uint64           // float64 bits
	refused atomic.Pointer[refusal] // set while the provider refuses the market key
	// calls counts provider calls made; perItem is what a collection has cost lately (float64
	// bits): packed collections share calls, so a second of budget buys more than rate/2 items.
	calls   atomic.Int64
	perItem atomic.Uint64
	// costRatio is calls made ÷ what the plan counted them as (float64 bits): packed calls
	// share less well in practice (partial groups, answers cut) than the plan's model says.
	costRatio atomic.Uint64
}

// refusal is why collection stopped on a refused key, for /readyz.
type refusal struct {
	since  time.Time
	reason string
}

// New builds the daemon and binds its HTTP address (so a busy port fails at start).
func New(pool *pgxpool.Pool, client *provider.Client, cfg Config, log *zap.Logger) (*Daemon, error) {
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.Dispatch.Owner == "" {
		cfg.Dispatch.Owner = telemetry.Instance()
	}
	if cfg.Dispatch.Provider == "" {
		cfg.Dispatch.Provider = "neople"
	}
	d := &Daemon{pool: pool, client: client, cfg: cfg, log: log, metrics: telemetry.NewMetrics(), wake: make(chan struct{}, 1), replan: make(chan struct{}, 1), tracked: -1}
	d.planned.Store(math.Float64bits(1)) // the tiers as found were planned (if at all) for the configured budget
	d.perItem.Store(math.Float64bits(packing.Alone))
	d.costRatio.Store(math.Float64bits(1))
	d.metrics.CostRatio.Set(1)
	d.metrics.RegisterPool(pool)
	d.metrics.SetBuildInfo(orUnknown(cfg.Version), orUnknown(cfg.Commit))
	client.SetObserver(requestMetrics{d.metrics})
	d.metrics.RegisterRowsRejected(provider.RejectReasons, func(r string) int64 { return client.Stats().Rejected[r] })

	var rate health.RateSetter = client
	if cfg.Daemon.Budget.Enabled {
		s, err := budget.New(pool, budget.ConfigFor(cfg.Daemon.Budget, cfg.Market, cfg.KeyLabel, cfg.Dispatch.Owner), log)
		if err != nil {
			return nil, err
		}
		d.share, rate = s, s
	}
	f := &budget.Fetcher{Next: client, Share: d.share, Observer: fetchMetrics{d.metrics, &d.calls}}
	d.health = health.New(pool, health.Config{HealthConfig: cfg.Daemon.Health, Provider: cfg.Dispatch.Provider, Owner: cfg.Dispatch.Owner},
		d.probe(f), rate, log)
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
	dc.PrioritizeTiers = true
	dc.Gather = d.gathers()
	dc.Ahead = d.ahead()
	dc.ClaimLimit = d.claimLimit
	dc.Observer = &observer{m: d.metrics, h: d.health}
	disp, err := dispatcher.New(pool, f, dc, log)
	if err != nil {
		return nil, err
	}
	d.disp = disp

	if cfg.Relay != nil {
		rc := *cfg.Relay
		rc.OnPublished = func(ages []float64) {
			for _, a := range ages {
				d.metrics.PublishLatency.Observe(a)
			}
		}
		rc.OnError = func(reason string) { d.metrics.RelayErrors.WithLabelValues(reason).Inc() }
		if d.relay, err = outbox.NewRelay(pool, rc, log); err != nil {
			return nil, err
		}
	}
	if cfg.Daemon.HTTPAddr != "" {
		if d.ln, err = net.Listen("tcp", cfg.Daemon.HTTPAddr); err != nil {
			return nil, fmt.Errorf("daemon.http_addr %s: %w", cfg.Daemon.HTTPAddr, err)
		}
	}
	return d, nil
}

// Addr is the HTTP server's address ("" without one).
func (d *Daemon) Addr() string {
	if d.ln == nil {
		return ""
	}
	return d.ln.Addr().String()
}

// Metrics exposes the registry (tests, benchmarks).
func (d *Daemon) Metrics() *telemetry.Metrics { return d.metrics }

// ProviderStatus is the provider's effective status as this daemon last read it.
func (d *Daemon) ProviderStatus() provider.Status { return d.health.Status() }

// Share is the budget share (nil when disabled).
func (d *Daemon) Share() *budget.Share { return d.share }

// Run runs until ctx ends, then shuts down gracefully: claiming stops, in-flight calls get
// daemon.shutdown_grace, their results are written, unfinished leases released, the relay
// publishes what the last write-backs produced, and Run returns nil.
func (d *Daemon) Run(ctx context.Context) error {
	// Background services outlive the collection loop by a little: heartbeats must go on while
	// in-flight calls finish, and the relay flushes after the last write-back.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	var wg sync.WaitGroup
	spawn := func(name string, fn func(context.Context) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := fn(bg); err != nil {
				d.log.Error("daemon component stopped", zap.String("component", name), zap.Error(err))
			}
		}()
	}
	if d.share != nil {
		spawn("budget", d.share.Run)
	}
	spawn("health", d.health.Run)
	spawn("gauges", d.gaugeLoop)
	if d.cfg.Daemon.Notify {
		spawn("listen", d.listen)
	}
	if d.cfg.Catalog.RecalcInterval > 0 {
		spawn("recalc", d.recalcLoop)
	}
	if d.cfg.Retention.Enabled() {
		spawn("retention", d.retentionLoop)
	}
	var srv *http.Server
	if d.ln != nil {
		srv = &http.Server{Handler: d.handler(), ReadHeaderTimeout: 10 * time.Second}
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
		d.metrics.RelayUp.Set(1)
		go func() {
			defer close(relayDone)
			if err := d.relay.Run(ctx); err != nil {
				d.metrics.RelayUp.Set(0) // the relay logged why; /readyz says it too
			}
		}()
	}
	d.log.Info("collector running", zap.String("owner", d.cfg.Dispatch.Owner), zap.String("http", d.Addr()),
		zap.Bool("relay", d.relay != nil), zap.Bool("budget", d.share != nil))

	d.collectLoop(ctx)

	d.log.Info("collection stopped; flushing")
	if d.relay != nil {
		<-relayDone
		if up, _ := d.relay.Health(); up { // one stopped for good has nothing to flush with
			fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(d.cfg.Daemon.ShutdownGrace, 5*time.Second))
			if res, err := d.relay.RunOnce(fctx); err != nil {
				d.log.Warn("final outbox flush incomplete; the rest is published by the next relay", zap.Error(err))
			} else {
				d.log.Info("outbox flushed", zap.Int64("published", res.Published))
			}
			cancel()
		}
		_ = d.relay.Close()
	}
	stopBG()
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	wg.Wait()
	d.log.Info("collector stopped")
	return nil
}

// collectLoop: pass, ask the database when the next item is claimable, sleep until then. The
// sleeps after a failure or a rate limit are not cut short by notifications (the pass's own
// lease releases send some): they are what keeps a failing loop from hammering the provider.
func (d *Daemon) collectLoop(ctx context.Context) {
	failures := 0
	for ctx.Err() == nil {
		passStart, calls := time.Now(), d.calls.Load()
		sum, err := d.disp.RunOnce(ctx)
		d.learnCost(sum, d.calls.Load()-calls)
		if ctx.Err() != nil {
			d.logPass(sum)
			return
		}
		if err != nil {
			d.metrics.Passes.WithLabelValues("error").Inc()
			d.metrics.LoopErrors.WithLabelValues("collect").Inc()
			var pe *provider.Error
			if errors.As(err, &pe) && pe.Class == provider.ClassConfig {
				d.keyRefused(ctx, pe)
				continue
			}
			failures++
			b := retryBackoff.Delay(failures)
			d.log.Warn("collection pass failed; backing off", zap.Error(store.ExplainPooler(err)), zap.Int("failures", failures), zap.Duration("backoff_seconds", b))
			backoff.Sleep(ctx, b)
			continue
		}
		failures = 0
		d.logPass(sum)
		if sum.Paused {
			d.metrics.Passes.WithLabelValues("paused").Inc()
			d.sleep(ctx, min(d.cfg.Daemon.MaxSleep, d.cfg.Daemon.Health.CheckInterval))
			continue
		}
		d.metrics.Passes.WithLabelValues("ok").Inc()
		if sum.Stop == dispatcher.StopRateLimited {
			cd := max(time.Until(sum.CooldownUntil), d.cfg.Daemon.Budget.Cooldown)
			if d.share == nil { // with a share, the fetcher has recorded it already
				if err := budget.RecordCooldown(ctx, d.pool, d.cfg.KeyLabel, cd, "provider rate limit: "+sum.StopAnswer); err != nil {
					d.log.Warn("could not record the cool-down", zap.Error(err))
				}
			}
			backoff.Sleep(ctx, cd)
			continue
		}
		if d.share != nil {
			if cd := d.share.CooldownRemaining(); cd > 0 {
				backoff.Sleep(ctx, cd)
				continue
			}
		}
		if g := d.cfg.Daemon.PackWait - time.Since(passStart); d.gathers() && g > 0 {
			// What falls due meanwhile gathers for the next pass and shares its packed calls.
			backoff.Sleep(ctx, g)
		}
		wait, err := nextWake(ctx, d.pool, d.ahead())
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			failures++
			d.metrics.LoopErrors.WithLabelValues("wake").Inc()
			d.log.Warn("could not ask the database for the next due item; backing off", zap.Error(err))
			backoff.Sleep(ctx, retryBackoff.Delay(failures))
			continue
		}
		if wait > 0 {
			d.sleep(ctx, min(wait, d.cfg.Daemon.MaxSleep))
		}
	}
}

// claimLimit caps a claim at half a second of budget: when more is due than the budget allows,
// a HOT item that falls due just after a claim waits for the next one, which comes when this
// batch has drained. At least a full packed call's worth: a smaller claim could never fill one.
func (d *Daemon) claimLimit() int {
	perSec := d.cfg.Market.Rate
	if d.share != nil {
		perSec = d.share.Stats().PerSecond
	}
	return max(int(perSec/2/math.Float64frombits(d.perItem.Load())), d.cfg.Dispatch.PackSize)
}

// learnCost follows what a collection costs (calls per collected item, retries and shadow
// checks included), smoothed over passes; passes with too few items to tell are skipped.
func (d *Daemon) learnCost(sum dispatcher.Summary, calls int64) {
	n := sum.Collected + sum.Failed
	if n < 10 {
		return
	}
	r := min(max(float64(calls)/float64(n), 0.1), 2*packing.Alone)
	d.perItem.Store(math.Float64bits(ewma(d.perItem.Load(), r)))
	if sum.PlannedRequests >= 5 {
		// Never below 1: a plan may under-use the budget when its costs were too high, but
		// must not over-commit it.
		r := ewma(d.costRatio.Load(), min(max(float64(calls)/sum.PlannedRequests, 1), 10))
		d.costRatio.Store(math.Float64bits(r))
		d.metrics.CostRatio.Set(r)
	}
}

// ewma moves a smoothed value (float64 bits) 30 % of the way towards x.
func ewma(bits uint64, x float64) float64 { return 0.7*math.Float64frombits(bits) + 0.3*x }

// gathers reports whether passes are spaced by daemon.pack_wait: only when items can share calls.
func (d *Daemon) gathers() bool { return d.ahead() > 0 }

// ahead is how long before their due time the daemon claims items. With packing on it is
// daemon.pack_wait: passes start that far apart so items gather and share calls, and claiming
// that far ahead keeps each item collected at its due time instead of up to a pack_wait late.
func (d *Daemon) ahead() time.Duration {
	if d.cfg.Dispatch.PackSize <= 1 {
		return 0
	}
	return d.cfg.Daemon.PackWait
}

// keyRefused holds collection while the provider refuses the market key (a configuration
// error, not an outage): /readyz says why, the key's cool-down in the database shows it to
// `collector status` and pauses the other instances, the error is logged at most once a
// minute, and one call every daemon.key_recheck tells when the key works again.
func (d *Daemon) keyRefused(ctx context.Context, pe *provider.Error) {
	since := time.Now()
	var logged time.Time
	for {
		d.refused.Store(&refusal{since: since, reason: pe.Error()})
		if time.Since(logged) >= time.Minute {
			logged = time.Now()
			d.log.Error("the provider refuses the market key: collection stopped until it works again",
				zap.String("key_env", provider.WorkloadMarket.KeyEnv()), zap.Duration("recheck_every_seconds", d.cfg.Daemon.KeyRecheck), zap.Error(pe))
		}
		if err := budget.RecordCooldown(ctx, d.pool, d.cfg.KeyLabel, d.cfg.Daemon.KeyRecheck, "key refused: "+pe.Error()); err != nil && ctx.Err() == nil {
			d.log.Warn("could not record the refused key's cool-down", zap.Error(err))
		}
		if !backoff.Sleep(ctx, d.cfg.Daemon.KeyRecheck) {
			return
		}
		err := d.probeKey(ctx)
		if !errors.As(err, &pe) || pe.Class != provider.ClassConfig {
			d.refused.Store(nil)
			d.log.Info("the provider accepts the market key again; collection resumes", zap.Duration("refused_for_seconds", time.Since(since).Round(time.Second)))
			return
		}
	}
}

// probeItemSQL picks the item a probe asks for: a real one when there is any ($1: fixture
// id patterns), the soonest due first.
const probeItemSQL = `SELECT item_id FROM tracked_items
ORDER BY item_id LIKE ANY($1::text[]), next_collect_at NULLS LAST LIMIT 1`

// probeKey makes one call with the market key, past the budget (whose cool-down the refusal
// itself set).
func (d *Daemon) probeKey(ctx context.Context) error {
	var id string
	err := d.pool.QueryRow(ctx, probeItemSQL, catalog.SyntheticPatterns()).Scan(&id)
	if err != nil {
		return fmt.Errorf("key re-check: pick a tracked item: %w", err)
	}
	_, _, err = d.client.Auction(ctx, id)
	return err
}

func (d *Daemon) logPass(sum dispatcher.Summary) {
	if sum.Claimed == 0 {
		return
	}
	d.log.Info("collection pass", zap.Int("claimed", sum.Claimed), zap.Int("collected", sum.Collected),
		zap.Int("failed", sum.Failed), zap.Int("fenced_out", sum.Fenced), zap.Int("released", sum.Released),
		zap.Stringer("stop", sum.Stop), zap.Duration("duration_seconds", sum.Duration),
		zap.Duration("claim_p50_seconds", sum.Claim.P50), zap.Duration("claim_p95_seconds", sum.Claim.P95),
		zap.Duration("fetch_p50_seconds", sum.Fetch.P50), zap.Duration("fetch_p95_seconds", sum.Fetch.P95),
		zap.Duration("persist_p50_seconds", sum.Persist.P50), zap.Duration("persist_p95_seconds", sum.Persist.P95))
}

// sleep waits d, or until ctx ends, a notification arrives, or the provider status changes.
func (d *Daemon) sleep(ctx context.Context, dur time.Duration) {
	t := time.NewTimer(dur)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-d.wake:
	case <-d.health.Changed():
	}
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}

// retryBackoff spaces the daemon's retries after database errors.
var retryBackoff = backoff.Policy{Min: 100 * time.Millisecond, Max: 10 * time.Second}

// nextWake is how long until the next item is claimable, claiming ahead by ahead; an hour when
// nothing is scheduled.
func nextWake(ctx context.Context, pool *pgxpool.Pool, ahead time.Duration) (time.Duration, error) {
	wait, ok, err := dispatcher.NextClaimable(ctx, pool, ahead)
	if !ok && err == nil {
		return time.Hour, nil
	}
	return wait, err
}

// listen turns tracked_items notifications into wake-ups, reconnecting after errors. Without
// a session for LISTEN (behind PgBouncer in transaction mode and no database.direct_url) it
// logs that once and leaves the wake-ups to the database-timed sleep.
func (d *Daemon) listen(ctx context.Context) error {
	if d.cfg.ListenURL == "" && d.pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol {
		d.log.Warn("no session for LISTEN; falling back to timed wake-ups",
			zap.String("reason", "the pool uses the simple protocol (a transaction-pooling PgBouncer) and database.direct_url is not set"),
			zap.Duration("max_sleep_seconds", d.cfg.Daemon.MaxSleep))
		return nil
	}
	cfg := store.ListenConfig{Pool: d.pool, DirectURL: d.cfg.ListenURL, Channel: "tracked_items_due", Retry: retryBackoff}
	store.Listen(ctx, cfg, d.wake, func(err error, failures int) {
		d.metrics.LoopErrors.WithLabelValues("listen").Inc()
		if failures == 1 {
			d.log.Warn("tracked_items notifications interrupted; falling back to timed wake-ups until LISTEN works again", zap.Error(err))
		} else {
			d.log.Debug("LISTEN retry failed", zap.Int("failures", failures), zap.Error(err))
		}
	})
	return nil
}

// retentionStatements bounds one turn of pruning, so a large first backlog (retention turned
// on for an old database) is worked off in short turns a second apart rather than in one long
// run of deletes.
const retentionStatements = 20

func (d *Daemon) retentionLoop(ctx context.Context) error {
	wait := d.cfg.Retention.Interval
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
		res, err := retention.Prune(ctx, d.pool, d.cfg.Retention, retentionStatements)
		wait = d.cfg.Retention.Interval
		switch {
		case err != nil && ctx.Err() == nil:
			d.metrics.LoopErrors.WithLabelValues("retention").Inc()
			d.log.Warn("pruning collected history failed; next run in retention.interval", zap.Error(err))
		case err == nil && res.Total() > 0:
			d.log.Info("pruned collected history", zap.Int64("snapshots", res.Snapshots), zap.Int64("sales", res.Sales),
				zap.Int64("interest", res.Interest), zap.Bool("more", res.More))
			if res.More {
				wait = time.Second
			}
		}
	}
}

// minReplanGap spaces the plans that new items or a falling learned budget ask for.
const minReplanGap = 15 * time.Second

// planBudget is the market budget the tier plan assumes: the configured one scaled by
// budgetFraction, so that a provider whose real limit is lower, or collections dearer than the
// plan's cost model, get a plan the budget can serve (HOT first) instead of a standing backlog.
func (d *Daemon) planBudget() (config.WorkloadLimits, float64) {
	f := d.budgetFraction()
	return budget.Scale(d.cfg.Market, f), f
}

// budgetFraction is the share of the configured budget the plan may count on: what the
// adaptive budget learned the provider allows (1 without a cluster budget), divided by how
// much more collections have really cost than the plan counted (costRatio).
func (d *Daemon) budgetFraction() float64 {
	f := 1 / math.Float64frombits(d.costRatio.Load())
	if d.share == nil {
		return f
	}
	return d.share.LearnedShare() * f
}

func (d *Daemon) recalcLoop(ctx context.Context) error {
	t := time.NewTicker(d.cfg.Catalog.RecalcInterval)
	defer t.Stop()
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-d.replan:
			// A budget that keeps falling (cut after cut) asks again and again: one plan per gap.
			if wait := time.Until(last.Add(minReplanGap)); wait > 0 && !backoff.Sleep(ctx, wait) {
				return nil
			}
		}
		last = time.Now()
		market, f := d.planBudget()
		d.planned.Store(math.Float64bits(f))
		pm, err := dispatcher.PackingModelNow(ctx, d.pool, d.cfg.Dispatch, d.client.AuctionLimit())
		var res catalog.Result
		if err == nil {
			res, err = catalog.RecalculatePopularity(ctx, d.pool, catalog.PolicyFromConfig(d.cfg.Catalog, market, pm))
		}
		switch {
		case err != nil && ctx.Err() == nil:
			d.metrics.LoopErrors.WithLabelValues("recalc").Inc()
			d.log.Warn("popularity recalculation failed; next run in catalog.recalc_interval", zap.Error(err))
		case err == nil && !res.Skipped:
			d.log.Info("popularity recalculated", zap.Int("scored", res.Scored), zap.Int("promoted", res.Promoted),
				zap.Int("demoted", res.Demoted), zap.Int("dormant", res.Dormant), zap.Int("reactivated", res.Reactivated),
				zap.Float64("budget_share", f), zap.Float64("cost_ratio", math.Float64frombits(d.costRatio.Load())))
			select { // promotions may have made items due sooner
			case d.wake <- struct{}{}:
			default:
			}
		}
	}
}

func (d *Daemon) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", d.metrics.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := d.pool.Ping(ctx); err != nil {
			http.Error(w, "database unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if err := store.CheckCurrent(ctx, d.pool); err != nil {
			msg := err.Error()
			if store.NeedsMigration(err) && d.cfg.SchemaHint != "" {
				msg += "; " + d.cfg.SchemaHint
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		if d.relay != nil {
			if up, reason := d.relay.Health(); !up {
				http.Error(w, "outbox relay stopped: "+reason, http.StatusServiceUnavailable)
				return
			}
		}
		if r := d.refused.Load(); r != nil {
			http.Error(w, fmt.Sprintf("collection stopped: the provider refuses the market key (%s) since %s, re-checked every %s: %s",
				provider.WorkloadMarket.KeyEnv(), r.since.UTC().Format(time.RFC3339), d.cfg.Daemon.KeyRecheck, r.reason), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// probe asks the provider for one tracked item's listings, through the budget.
func (d *Daemon) probe(f *budget.Fetcher) health.Prober {
	return func(ctx context.Context) error {
		var id string
		err := d.pool.QueryRow(ctx, probeItemSQL, catalog.SyntheticPatterns()).Scan(&id)
		if err != nil {
			return fmt.Errorf("probe: pick a tracked item: %w", err)
		}
		_, _, err = f.Auction(ctx, id)
		return err
	}
}
