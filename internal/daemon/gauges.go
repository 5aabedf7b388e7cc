package daemon

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testsignal"
	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

// OverdueAfter: an item due for longer than this and still unclaimed counts as overdue.
const OverdueAfter = 30 * time.Second

// gaugeConfig configures the gauge service.
type gaugeConfig struct {
	// Interval is how often the gauges refresh (Config.GaugeInterval).
	Interval time.Duration
	// Market is the market key's configured budget, exported as collector_budget_requests_per_second.
	Market config.WorkloadLimits
	// Refreshed, when initialised (tests), hears every refresh.
	Refreshed *testsignal.Signal[gaugeResult]
}

// gaugeService refreshes the gauges only SQL can answer, and tells the cost loop how many
// items are tracked. It never plans.
type gaugeService struct {
	cfg     gaugeConfig
	pool    *pgxpool.Pool
	share   *budget.Share // nil without a cluster budget
	loop    *budget.Loop
	metrics *telemetry.Metrics
	log     *zap.Logger
	// failingSince is when the refreshes began to fail (zero: the last one worked).
	failingSince time.Time
	// refreshed: a refresh has worked since start. Until one has, the gauges' zeros are not
	// last values to keep but made up (a daemon started in a database outage read backlog 0).
	refreshed bool
	timeout   time.Duration // a refresh's bound when set (tests); else refreshTimeout's
}

func newGaugeService(cfg gaugeConfig, s *gaugeService) (*gaugeService, error) {
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("gauges: interval %s must be > 0", cfg.Interval)
	}
	s.cfg = cfg
	return s, nil
}

// gaugeResult is what one refresh read.
type gaugeResult struct {
	Tracked int64 // items tracked, fixtures left out
	Leases  int64
	Backlog int64 // outbox events not yet published
}

// Start refreshes at once and then every Interval until ctx ends.
func (s *gaugeService) Start(ctx context.Context) {
	t := time.NewTicker(s.cfg.Interval)
	defer t.Stop()
	failures := telemetry.Streak{Log: s.log, What: "refreshing the gauges failed (they keep their last values for a while, then read NaN, unknown)"}
	for {
		_, err := s.runOnce(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.metrics.LoopErrors.WithLabelValues("gauges").Inc()
			failures.Failed(time.Now(), err)
		case err == nil:
			failures.Ok(time.Now())
		}
		s.judge(time.Now(), err)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func workload() string { return string(provider.WorkloadMarket) }

// gaugeStaleAfter is how long the gauges keep their last values through failed refreshes. A
// blip (a database restart) must not reset the alerts' for: timers, which a NaN does (every
// comparison with it is false); a last value kept for long is a lie an alert acts on (one
// instance's stale backlog keeps CollectorOutboxLagging firing through max across instances,
// which passes over NaN).
const gaugeStaleAfter = 5 * time.Minute

// judge follows the refreshes' failing streak at now: once it has lasted gaugeStaleAfter (at
// once before any refresh has worked), the gauges read from the database are unknown until a
// refresh works. Used by Start's goroutine.
func (s *gaugeService) judge(now time.Time, err error) {
	switch {
	case err == nil:
		s.failingSince, s.refreshed = time.Time{}, true
	case !s.refreshed:
		s.unknown()
	case s.failingSince.IsZero():
		s.failingSince = now
	case now.Sub(s.failingSince) >= gaugeStaleAfter:
		s.unknown()
	}
}

// unknown sets the gauges read from the database to NaN.
func (s *gaugeService) unknown() {
	for _, t := range tiers.All() {
		s.metrics.ItemsDue.WithLabelValues(string(t)).Set(math.NaN())
		s.metrics.ItemsOverdue.WithLabelValues(string(t)).Set(math.NaN())
		s.metrics.TierDemand.WithLabelValues(string(t)).Set(math.NaN())
	}
	for _, g := range []prometheus.Gauge{s.metrics.LeasesHeld, s.metrics.OutboxBacklog, s.metrics.OutboxOldest, s.metrics.OutboxFailed} {
		g.Set(math.NaN())
	}
}

// refreshTimeout is how long a refresh may take: one waiting on a lock (an ALTER TABLE or
// VACUUM FULL of tracked_items or the outbox) fails, so the gauges go unknown after
// gaugeStaleAfter instead of keeping their last, healthy-looking values while it waits.
func (s *gaugeService) refreshTimeout() time.Duration {
	return cmp.Or(s.timeout, max(s.cfg.Interval, 10*time.Second))
}

// runOnce refreshes every gauge once.
func (s *gaugeService) runOnce(ctx context.Context) (res gaugeResult, err error) {
	ctx, cancel := context.WithTimeout(ctx, s.refreshTimeout())
	defer cancel()
	if s.share != nil {
		st := s.share.Stats()
		s.metrics.BudgetShare.WithLabelValues(workload()).Set(st.PerSecond)
		s.metrics.BudgetInstances.WithLabelValues(workload()).Set(float64(st.Live))
		s.metrics.BudgetClusterRate.WithLabelValues(workload()).Set(st.ClusterRate)
		s.metrics.BudgetCooldown.WithLabelValues(workload()).Set(st.Cooldown.Seconds())
	}
	counts, err := catalog.DueByTier(ctx, s.pool, OverdueAfter)
	if err != nil {
		return res, err
	}
	// Every tier is exported on every refresh, so a tier that emptied reads 0, not its last count.
	due, overdue := map[string]int64{}, map[string]int64{}
	requests := map[string]float64{}
	for _, c := range counts {
		due[string(c.Tier)], overdue[string(c.Tier)] = c.Due, c.Overdue
		requests[string(c.Tier)] = c.Requests
		res.Tracked += c.Items
		res.Leases += c.Leased // counted in the same scan: a second one cost as much again
	}
	for _, t := range tiers.All() {
		s.metrics.ItemsDue.WithLabelValues(string(t)).Set(float64(due[string(t)]))
		s.metrics.ItemsOverdue.WithLabelValues(string(t)).Set(float64(overdue[string(t)]))
		s.metrics.TierDemand.WithLabelValues(string(t)).Set(tierplan.TierDemand(t, requests[string(t)]))
	}
	s.metrics.BudgetRate.WithLabelValues(workload()).Set(budget.KeyRate(s.cfg.Market, 1))
	s.loop.SawTracked(res.Tracked)
	backlog, err := outbox.ReadBacklog(ctx, s.pool, false)
	if err != nil {
		return res, err
	}
	res.Backlog = backlog.Pending
	s.metrics.LeasesHeld.Set(float64(res.Leases))
	s.metrics.OutboxBacklog.Set(float64(backlog.Pending))
	s.metrics.OutboxOldest.Set(backlog.Oldest.Seconds())
	s.metrics.OutboxFailed.Set(float64(backlog.Failed))
	s.cfg.Refreshed.Signal(res)
	return res, nil
}
