package daemon

import (
	"sync/atomic"
	"time"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/health"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// observer fans the dispatcher's reports out to the metrics and the health monitor.
type observer struct {
	m *telemetry.Metrics
	h *health.Monitor
}

func (o *observer) Claimed(claims []catalog.Claim) {
	o.m.Claims.Add(float64(len(claims)))
	for _, c := range claims {
		o.m.ClaimLag.WithLabelValues(string(c.Tier)).Observe(max(c.DBNow.Sub(c.DueAt), 0).Seconds())
	}
}

func (o *observer) Fetched(_ catalog.Claim, took time.Duration, err error) {
	o.m.FetchSeconds.Observe(took.Seconds())
	o.h.Observe(err)
}

func (o *observer) Written(collected, failed, fenced int, took time.Duration) {
	o.m.Collections.WithLabelValues("collected").Add(float64(collected))
	o.m.Collections.WithLabelValues("failed").Add(float64(failed))
	o.m.Collections.WithLabelValues("fenced").Add(float64(fenced))
	o.m.WriteSeconds.Observe(took.Seconds())
}

func (o *observer) SalesGap(catalog.Claim) { o.m.SalesGaps.Inc() }

func (o *observer) Stored(reasons map[history.Reason]int) {
	for r, n := range reasons {
		if r == history.Skip {
			o.m.Unchanged.Add(float64(n))
		} else {
			o.m.SnapshotsWritten.WithLabelValues(string(r)).Add(float64(n))
		}
	}
}

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
	if _, answered := provider.RateLimitAnswer(err); outcome == provider.ClassRateLimited.String() && !answered {
		// The client's own limiter refused it unsent: rate_limited counts the provider's
		// refusals alone (CollectorBudgetRefusals).
		outcome = "cancelled"
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
