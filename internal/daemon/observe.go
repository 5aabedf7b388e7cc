package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/budgetplan"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/health"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/seed"
	"github.com/duecollector/duecollector/internal/telemetry"
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

// fetcher puts the cluster budget in front of the client and counts every call by endpoint
// and outcome. A rate-limit answer from the provider starts the key's shared cool-down.
type fetcher struct {
	next     dispatcher.Fetcher
	share    *budget.Share
	m        *telemetry.Metrics
	workload string
}

func (f *fetcher) Auction(ctx context.Context, itemID string) ([]provider.Listing, error) {
	return call(ctx, f, provider.EndpointAuction, func(ctx context.Context) ([]provider.Listing, error) {
		return f.next.Auction(ctx, itemID)
	})
}

func (f *fetcher) AuctionSold(ctx context.Context, itemID string) ([]provider.Sale, error) {
	return call(ctx, f, provider.EndpointAuctionSold, func(ctx context.Context) ([]provider.Sale, error) {
		return f.next.AuctionSold(ctx, itemID)
	})
}

func (f *fetcher) AuctionMany(ctx context.Context, ids []string) ([]provider.Listing, int, error) {
	return packedCall(ctx, f, provider.EndpointAuction, func(ctx context.Context) ([]provider.Listing, int, error) {
		return f.next.(dispatcher.PackedFetcher).AuctionMany(ctx, ids)
	})
}

func (f *fetcher) AuctionSoldMany(ctx context.Context, ids []string) ([]provider.Sale, int, error) {
	return packedCall(ctx, f, provider.EndpointAuctionSold, func(ctx context.Context) ([]provider.Sale, int, error) {
		return f.next.(dispatcher.PackedFetcher).AuctionSoldMany(ctx, ids)
	})
}

func packedCall[T any](ctx context.Context, f *fetcher, endpoint string, fn func(context.Context) ([]T, int, error)) ([]T, int, error) {
	type answer struct {
		rows []T
		sent int
	}
	a, err := call(ctx, f, endpoint, func(ctx context.Context) (answer, error) {
		rows, sent, err := fn(ctx)
		return answer{rows, sent}, err
	})
	return a.rows, a.sent, err
}

// Shadowed counts shadow verifications of packed answers.
func (o *observer) Shadowed(endpoint string, mismatch bool) {
	outcome := "match"
	if mismatch {
		outcome = "mismatch"
	}
	o.m.PackingShadow.WithLabelValues(endpoint, outcome).Inc()
}

func call[T any](ctx context.Context, f *fetcher, endpoint string, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	if f.share != nil {
		t0 := time.Now()
		done, err := f.share.Wait(ctx)
		f.m.LimiterWait.WithLabelValues(f.workload).Add(time.Since(t0).Seconds())
		if err != nil {
			f.m.ProviderRequests.WithLabelValues(endpoint, "cancelled").Inc()
			return zero, &provider.Error{Class: provider.ClassTransient, Endpoint: endpoint,
				Err: fmt.Errorf("waiting for the cluster budget: %w", err)}
		}
		f.m.BudgetUsed.WithLabelValues(f.workload).Inc()
		defer done()
	}
	v, err := fn(ctx)
	outcome := "ok"
	if err != nil {
		outcome = provider.ClassOf(err).String()
		var pe *provider.Error
		// Only the provider's own answer (Status set) means the key is over its budget; the
		// client's local limiter running out before a deadline does not.
		if f.share != nil && errors.As(err, &pe) && pe.Class == provider.ClassRateLimited && pe.Status != 0 {
			f.share.RateLimited(ctx, pe.RetryAfter, pe.Error())
		}
	}
	f.m.ProviderRequests.WithLabelValues(endpoint, outcome).Inc()
	return v, err
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
	counts, err := dispatcher.DueByTier(ctx, d.pool, OverdueAfter, seed.SyntheticPatterns())
	if err != nil {
		return err
	}
	// Every tier is exported on every refresh, so a tier that emptied reads 0, not its last count.
	all, due, overdue := map[string]int64{}, map[string]int64{}, map[string]int64{}
	for _, c := range counts {
		all[string(c.Tier)], due[string(c.Tier)], overdue[string(c.Tier)] = c.Items, c.Due, c.Overdue
	}
	for _, t := range tiers.All() {
		d.metrics.ItemsDue.WithLabelValues(string(t)).Set(float64(due[string(t)]))
		d.metrics.ItemsOverdue.WithLabelValues(string(t)).Set(float64(overdue[string(t)]))
		d.metrics.TierDemand.WithLabelValues(string(t)).Set(budgetplan.TierDemand(t, all[string(t)], seed.RequestsPerCollection))
	}
	d.metrics.BudgetRate.WithLabelValues(d.workload()).Set(min(d.cfg.Market.Rate, float64(d.cfg.Market.PerMinute)/60))
	var total int64
	for _, n := range all {
		total += n
	}
	if d.tracked >= 0 && total > d.tracked {
		// New items (an import) add demand: plan now rather than at the next recalc_interval.
		select {
		case d.replan <- struct{}{}:
		default:
		}
	}
	d.tracked = total
	var leases, backlog int64
	var oldest float64
	err = d.pool.QueryRow(ctx, `
		WITH pending AS (SELECT count(*) AS n, min(id) AS oldest FROM outbox_pending)
		SELECT (SELECT count(*) FROM tracked_items WHERE lease_expires_at > now()),
		       pending.n,
		       coalesce(extract(epoch FROM now() - (SELECT o.created_at FROM outbox o WHERE o.id = pending.oldest)), 0)
		FROM pending`).Scan(&leases, &backlog, &oldest)
	if err != nil {
		return fmt.Errorf("leases and outbox backlog: %w", err)
	}
	d.metrics.LeasesHeld.Set(float64(leases))
	d.metrics.OutboxBacklog.Set(float64(backlog))
	d.metrics.OutboxOldest.Set(oldest)
	return nil
}
