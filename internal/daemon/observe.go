package daemon

import (
	"context"
	"math"
	"sync/atomic"
	"time"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/health"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

// observer fans the dispatcher's reports out to the metrics and the health monitor.
type observer struct {
	m *telemetry.Metrics
	h *health.Monitor
}

func (o *observer) Claimed(claims []dispatcher.Claim) {
	o.m.Claims.Add(float64(len(claims)))
	for _, c := range claims {
		o.m.ClaimLag.WithLabelValues(string(c.Tier)).Observe(max(c.DBNow.Sub(c.DueAt), 0).Seconds())
	}
}

func (o *observer) Fetched(_ dispatcher.Claim, took time.Duration, err error) {
	o.m.FetchSeconds.Observe(took.Seconds())
	o.h.Observe(err)
}

func (o *observer) Written(collected, failed, fenced int, took time.Duration) {
	o.m.Collections.WithLabelValues("collected").Add(float64(collected))
	o.m.Collections.WithLabelValues("failed").Add(float64(failed))
	o.m.Collections.WithLabelValues("fenced").Add(float64(fenced))
	o.m.WriteSeconds.Observe(took.Seconds())
}

func (o *observer) SalesGap(dispatcher.Claim) { o.m.SalesGaps.Inc() }

// requestMetrics times the client's HTTP requests and its limiter waits, each in its own series.
type requestMetrics struct{ m *telemetry.Metrics }

func (r requestMetrics) Request(w provider.Workload, endpoint, outcome string, took time.Duration) {
	r.m.RequestSeconds.WithLabelValues(string(w), endpoint, outcome).Observe(took.Seconds())
}

func (r requestMetrics) Waited(w provider.Workload, took time.Duration) {
	r.m.LimiterWait.WithLabelValues(string(w)).Add(took.Seconds())
}

// fetchMetrics counts every call of the daemon's budget.Fetcher by endpoint and outcome, and
// the time spent waiting for the cluster budget.
type fetchMetrics struct {
	m     *telemetry.Metrics
	calls *atomic.Int64
}

func (f fetchMetrics) Waited(endpoint string, d time.Duration, err error) {
	w := string(provider.WorkloadMarket)
	f.m.LimiterWait.WithLabelValues(w).Add(d.Seconds())
	if err != nil {
		f.m.ProviderRequests.WithLabelValues(endpoint, "cancelled").Inc()
		return
	}
	f.m.BudgetUsed.WithLabelValues(w).Inc()
}

func (f fetchMetrics) Called(endpoint string, err error) {
	outcome := "ok"
	if err != nil {
		outcome = provider.ClassOf(err).String()
	}
	f.m.ProviderRequests.WithLabelValues(endpoint, outcome).Inc()
	f.calls.Add(1)
}

// Shadowed counts shadow verifications of packed answers.
func (o *observer) Shadowed(endpoint string, mismatch bool) {
	outcome := "match"
	if mismatch {
		outcome = "mismatch"
	}
	o.m.PackingShadow.WithLabelValues(endpoint, outcome).Inc()
}

// OverdueAfter: an item due for longer than this and still unclaimed counts as overdue.
const OverdueAfter = 30 * time.Second

// gaugeLoop refreshes the gauges that only SQL can answer, every daemon.gauge_interval.
func (d *Daemon) gaugeLoop(ctx context.Context) error {
	t := time.NewTicker(d.cfg.Daemon.GaugeInterval)
	defer t.Stop()
	for {
		if err := d.refreshGauges(ctx); err != nil && ctx.Err() == nil {
			d.metrics.LoopErrors.WithLabelValues("gauges").Inc()
		}
		if d.share != nil {
			st := d.share.Stats()
			d.metrics.BudgetShare.WithLabelValues(d.workload()).Set(st.PerSecond)
			d.metrics.BudgetInstances.WithLabelValues(d.workload()).Set(float64(st.Live))
			d.metrics.BudgetClusterRate.WithLabelValues(d.workload()).Set(st.ClusterRate)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (d *Daemon) workload() string { return string(provider.WorkloadMarket) }

func (d *Daemon) refreshGauges(ctx context.Context) error {
	counts, err := dispatcher.DueByTier(ctx, d.pool, OverdueAfter, catalog.SyntheticPatterns())
	if err != nil {
		return err
	}
	// Every tier is exported on every refresh, so a tier that emptied reads 0, not its last count.
	all, due, overdue := map[string]int64{}, map[string]int64{}, map[string]int64{}
	requests := map[string]float64{}
	for _, c := range counts {
		all[string(c.Tier)], due[string(c.Tier)], overdue[string(c.Tier)] = c.Items, c.Due, c.Overdue
		requests[string(c.Tier)] = c.Requests
	}
	for _, t := range tiers.All() {
		d.metrics.ItemsDue.WithLabelValues(string(t)).Set(float64(due[string(t)]))
		d.metrics.ItemsOverdue.WithLabelValues(string(t)).Set(float64(overdue[string(t)]))
		d.metrics.TierDemand.WithLabelValues(string(t)).Set(tierplan.TierDemand(t, requests[string(t)]))
	}
	d.metrics.BudgetRate.WithLabelValues(d.workload()).Set(min(d.cfg.Market.Rate, float64(d.cfg.Market.PerMinute)/60))
	var total int64
	for _, n := range all {
		total += n
	}
	// New items (an import) add demand, and a budget well below the one planned for (the
	// provider's real limit, or collections dearer than planned) leaves demand unserved: plan
	// now, not at the next recalc_interval.
	if (d.tracked >= 0 && total > d.tracked) || d.budgetFraction() < replanBelow*math.Float64frombits(d.planned.Load()) {
		select {
		case d.replan <- struct{}{}:
		default:
		}
	}
	d.tracked = total
	leases, err := dispatcher.LeasesHeld(ctx, d.pool)
	if err != nil {
		return err
	}
	backlog, err := outbox.ReadBacklog(ctx, d.pool, false)
	if err != nil {
		return err
	}
	d.metrics.LeasesHeld.Set(float64(leases))
	d.metrics.OutboxBacklog.Set(float64(backlog.Pending))
	d.metrics.OutboxOldest.Set(backlog.Oldest.Seconds())
	return nil
}

// replanBelow: a learned budget under this share of the one the plan assumed triggers a new plan.
const replanBelow = 0.8
