package telemetry

import (
	"math"
	"net/http"
	"runtime"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics are the daemon's Prometheus series, on a registry of their own so that several
// daemons in one test process do not collide.
type Metrics struct {
	Registry *prometheus.Registry

	ClaimLag          *prometheus.HistogramVec // tier: due → claim, seconds, by the database clock
	Claims            prometheus.Counter       // items claimed
	Collections       *prometheus.CounterVec   // outcome: collected | failed | fenced
	WriteSeconds      prometheus.Histogram     // one write-back transaction
	FetchSeconds      prometheus.Histogram     // one item's provider calls
	ProviderRequests  *prometheus.CounterVec   // endpoint, outcome
	RequestSeconds    *prometheus.HistogramVec // workload, endpoint, outcome: the HTTP call alone
	LimiterWait       *prometheus.CounterVec   // workload: seconds spent waiting on the budget
	BudgetShare       *prometheus.GaugeVec     // workload: requests/s this instance may send
	BudgetInstances   *prometheus.GaugeVec     // workload: live instances sharing the key
	PackingShadow     *prometheus.CounterVec   // endpoint, outcome: shadow verifications of packed answers
	BudgetClusterRate *prometheus.GaugeVec     // workload: requests/s the whole cluster may send (learned when adaptive)
	BudgetUsed        *prometheus.CounterVec   // workload: requests sent under the budget
	ItemsDue          *prometheus.GaugeVec     // tier
	ItemsOverdue      *prometheus.GaugeVec     // tier
	LeasesHeld        prometheus.Gauge
	ProviderStatus    *prometheus.GaugeVec // provider, status: 1 for the effective status
	StatusChanges     *prometheus.CounterVec
	OutboxBacklog     prometheus.Gauge
	OutboxFailed      prometheus.Gauge
	OutboxOldest      prometheus.Gauge       // seconds
	PublishLatency    prometheus.Histogram   // seconds from outbox insert to published
	OutboxExpired     prometheus.Counter     // unpublished events dropped past retention.outbox_unpublished
	RelayUp           prometheus.Gauge       // 1 while the outbox relay can publish, 0 once it stopped for good; ExportRelay
	ExportNewestDay   prometheus.Gauge       // the newest past day exported complete, Unix seconds; RegisterExport
	BudgetCooldown    *prometheus.GaugeVec   // workload: seconds left of the key's shared cool-down
	RelayErrors       *prometheus.CounterVec // reason: topic | authorization | broker | database | panic | rejected
	Passes            *prometheus.CounterVec // result: ok | paused | error
	LoopErrors        *prometheus.CounterVec // loop
	SalesGaps         prometheus.Counter     // collections that found sales lost since the previous one
	TierDemand        *prometheus.GaugeVec   // tier: requests/s the tier's items ask for
	BudgetRate        *prometheus.GaugeVec   // workload: the key's budget, requests/s
	CostRatio         prometheus.Gauge       // provider calls made ÷ what the plan counted them as
	SnapshotsWritten  *prometheus.CounterVec // reason: first | change | heartbeat | repeat
	Unchanged         prometheus.Counter     // collections that saw the market unchanged and wrote no snapshot
	PartitionsAhead   *Aging                 // table: seconds past now the table's partitions reach
	OldestPartition   *Aging                 // table: age of the oldest partition's lower bound
	Retention         *prometheus.GaugeVec   // table: retention.snapshots / retention.sales, tables with one only
	PartitionInterval prometheus.Gauge       // history.partition_interval
	DatabaseWritable  prometheus.Gauge       // 1 while the database takes this instance's writes
	WriteRefused      *prometheus.GaugeVec   // cause: 1 for why writes are refused (store.WriteCauses), else 0
}

// NewMetrics builds and registers every series, plus the Go runtime and process collectors.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := factory{r}
	lagBuckets := []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300}
	return &Metrics{
		Registry:     r,
		ClaimLag:     f.histogramVec("collector_claim_lag_seconds", "Time from an item's next_collect_at to its claim (database clock), by tier.", lagBuckets, "tier"),
		Claims:       f.counter("collector_claims_total", "Items claimed."),
		Collections:  f.counterVec("collector_collections_total", "Claimed items written back, by outcome (collected, failed, fenced).", "outcome"),
		WriteSeconds: f.histogram("collector_write_seconds", "Duration of one write-back transaction.", prometheus.DefBuckets),
		// Budget waits are included, and may last up to a lease (collect.lease, 2m by default).
		FetchSeconds: f.histogram("collector_fetch_seconds", "Duration of one item's provider calls, limiter waits included.", append(slices.Clone(prometheus.DefBuckets), 30, 60, 120, 300)),
		RequestSeconds: f.histogramVec("collector_provider_request_duration_seconds",
			"Duration of one provider HTTP request (response read and classified), limiter and budget waits excluded.",
			prometheus.DefBuckets, "workload", "endpoint", "outcome"),
		ProviderRequests:  f.counterVec("collector_provider_requests_total", "Provider calls by endpoint and outcome.", "endpoint", "outcome"),
		LimiterWait:       f.counterVec("collector_limiter_wait_seconds_total", "Time spent waiting for the cluster budget or the client rate limiter.", "workload"),
		BudgetShare:       f.gaugeVec("collector_budget_share_requests_per_second", "Requests per second this instance may send on the workload's key.", "workload"),
		BudgetInstances:   f.gaugeVec("collector_budget_instances", "Live instances sharing the workload's key.", "workload"),
		PackingShadow:     f.counterVec("collector_packing_shadow_total", "Packed items fetched again alone and compared, by endpoint and outcome (match, mismatch); a mismatch switches packing off for the endpoint cluster-wide.", "endpoint", "outcome"),
		BudgetClusterRate: f.gaugeVec("collector_budget_cluster_requests_per_second", "Requests per second the whole cluster may send on the workload's key: the configured ceiling, or the rate learned from the provider's rate-limit answers (daemon.budget.adaptive).", "workload"),
		BudgetUsed:        f.counterVec("collector_budget_used_total", "Requests sent under the workload's budget.", "workload"),
		ItemsDue:          f.gaugeVec("collector_items_due", "Items due now, by tier.", "tier"),
		ItemsOverdue:      f.gaugeVec("collector_items_overdue", "Items due for more than 30s and not claimed, by tier.", "tier"),
		LeasesHeld:        f.gauge("collector_leases_held", "Items under a live lease (all instances)."),
		ProviderStatus:    f.gaugeVec("collector_provider_status", "1 for the provider's effective status.", "provider", "status"),
		StatusChanges:     f.counterVec("collector_provider_status_changes_total", "Provider status changes seen by this instance.", "provider", "from", "to"),
		OutboxBacklog:     f.gauge("collector_outbox_backlog", "Outbox events not yet published."),
		OutboxFailed:      f.gauge("collector_outbox_failed", "Outbox events the broker refused for what they are (too large, invalid): unpublished until collector outbox retry sends them again."),
		OutboxOldest:      f.gauge("collector_outbox_oldest_unpublished_seconds", "Age of the oldest unpublished outbox event."),
		PublishLatency:    f.histogram("collector_outbox_publish_latency_seconds", "Time from an outbox event's insert to its acknowledged publish (database clock).", lagBuckets),
		OutboxExpired:     f.counter("collector_outbox_expired_total", "Unpublished outbox events (pending or failed) dropped because they were older than retention.outbox_unpublished; their snapshots stay in auction_snapshots."),
		RelayUp:           newRelayUp(),
		ExportNewestDay: prometheus.NewGauge(prometheus.GaugeOpts{Name: "collector_export_newest_day_timestamp_seconds",
			Help: "Start (UTC midnight, Unix seconds) of the newest past day whose export is complete: written by this instance or before it, or a day without rows. Only instances with export.enabled export it."}),
		BudgetCooldown:    f.gaugeVec("collector_budget_cooldown_seconds", "Time left in the workload key's cool-down after a rate-limit answer, shared by every instance; 0 when none.", "workload"),
		RelayErrors:       f.counterVec("collector_relay_publish_errors_total", "Failed outbox relay attempts and events the broker rejected, by reason.", "reason"),
		Passes:            f.counterVec("collector_passes_total", "Collection passes by result.", "result"),
		LoopErrors:        f.counterVec("collector_loop_errors_total", "Errors in the daemon's loops (each is retried).", "loop"),
		SalesGaps:         f.counter("collector_sales_gaps_total", "Collections whose sales page was full of sales newer than any stored: sales were lost in between."),
		TierDemand:        f.gaugeVec("collector_tier_demand_requests_per_second", "Requests per second the tier's scheduled items ask for (planned requests per collection / interval).", "tier"),
		BudgetRate:        f.gaugeVec("collector_budget_requests_per_second", "The workload key's request budget per second (the tighter of the per-second and per-minute budgets).", "workload"),
		SnapshotsWritten:  f.counterVec("collector_snapshots_written_total", "Snapshots (and events) written, by why: first, change, heartbeat, repeat.", "reason"),
		Unchanged:         f.counter("collector_collections_unchanged_total", "Collections that saw the item's market unchanged and wrote no snapshot (history.mode changes)."),
		PartitionsAhead:   f.aging("collector_history_partitions_ahead_seconds", "How far past now the history table's partitions reach: measured by each upkeep pass, and falling with the clock in between, also while upkeep fails.", "table", -1),
		OldestPartition:   f.aging("collector_history_oldest_partition_age_seconds", "Age of the lower bound of the history table's oldest partition past the archive, the history kept: measured by each upkeep pass, and growing with the clock in between, also while upkeep fails.", "table", +1),
		Retention:         f.gaugeVec("collector_history_retention_seconds", "The history table's retention (retention.snapshots, retention.sales); only tables with one export it. The oldest partition's age stays under it plus a partition interval while drops work.", "table"),
		PartitionInterval: f.gauge("collector_history_partition_interval_seconds", "The time range of one history partition (history.partition_interval)."),
		DatabaseWritable:  f.gauge("collector_database_writable", "1 while the database takes this instance's writes; 0 while it refuses them (read-only, standby, disk full, shutting down, unreachable; see collector_database_write_refused and /readyz)."),
		WriteRefused:      f.gaugeVec("collector_database_write_refused", "1 for the cause the database refuses this instance's writes for (read_only, standby, disk_full, insufficient_resources, shutting_down, unreachable), 0 for the others.", "cause"),
		CostRatio:         f.gauge("collector_collection_cost_ratio", "Provider calls this instance made ÷ what the tier plan counted its collections as costing (smoothed, at least 1); the daemon plans within the budget divided by it."),
	}
}

// newRelayUp is collector_relay_up, not registered: only an instance that runs a relay exports
// it (ExportRelay). Without one there is nothing to be up, and a 0 would read as a relay that
// stopped.
func newRelayUp() prometheus.Gauge {
	return prometheus.NewGauge(prometheus.GaugeOpts{Name: "collector_relay_up",
		Help: "1 while this instance's outbox relay can publish; 0 once it stopped on an error retrying cannot fix (see /readyz). Only instances that run a relay export it."})
}

// ExportRelay exports collector_relay_up at 1 (a relay starts able to publish): call it once, on
// an instance that runs an outbox relay.
func (m *Metrics) ExportRelay() {
	m.RelayUp.Set(1)
	m.Registry.MustRegister(m.RelayUp)
}

// RegisterExport exports collector_export_newest_day_timestamp_seconds: call it once, on an
// instance that exports days (export.enabled). Elsewhere a 0 would read as an export years
// behind.
func (m *Metrics) RegisterExport() { m.Registry.MustRegister(m.ExportNewestDay) }

// SetBuildInfo exports collector_build_info{version,commit,go_version} 1.
func (m *Metrics) SetBuildInfo(version, commit string) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "collector_build_info",
		Help: "Always 1; the labels name the running build."}, []string{"version", "commit", "go_version"})
	m.Registry.MustRegister(g)
	g.WithLabelValues(version, commit, runtime.Version()).Set(1)
}

// RegisterPool exports the pool's statistics (acquired, idle, total, waits).
func (m *Metrics) RegisterPool(pool *pgxpool.Pool) {
	m.Registry.MustRegister(&poolCollector{pool: pool})
}

// RegisterReads exports where the reads of the console, the API and history go, as state
// tells it at each scrape: collector_replica_in_use and collector_replica_lag_seconds. Only an
// instance with a replica (database.read_url) exports them: without one there is no lag.
func (m *Metrics) RegisterReads(state func() (lag time.Duration, lagKnown, inUse bool)) {
	m.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "collector_replica_in_use",
			Help: "1 while reads (console item pages, read API, history) go to the replica (database.read_url); 0 while they fall back to the primary because it lags more than the maximum, is unreachable or is no standby."},
			func() float64 {
				if _, _, on := state(); on {
					return 1
				}
				return 0
			}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "collector_replica_lag_seconds",
			Help: "How far the read replica trailed the primary at its last measurement (every second); NaN while unknown (unreachable, not a standby)."},
			func() float64 {
				if lag, known, _ := state(); known {
					return lag.Seconds()
				}
				return math.NaN()
			}))
}

// RegisterRowsRejected exports collector_provider_rows_rejected_total{reason} from a count
// kept where the rows are checked (the provider client).
func (m *Metrics) RegisterRowsRejected(reasons []string, count func(reason string) int64) {
	for _, r := range reasons {
		m.Registry.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name:        "collector_provider_rows_rejected_total",
			Help:        "Provider rows dropped at the parsing boundary, by reason (future_date, ancient_date, foreign_item, bad_amount, duplicate_listing).",
			ConstLabels: prometheus.Labels{"reason": r},
		}, func() float64 { return float64(count(r)) }))
	}
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

type factory struct{ r *prometheus.Registry }

func (f factory) counter(name, help string) prometheus.Counter {
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: name, Help: help})
	f.r.MustRegister(c)
	return c
}

func (f factory) counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	f.r.MustRegister(c)
	return c
}

func (f factory) gauge(name, help string) prometheus.Gauge {
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	f.r.MustRegister(g)
	return g
}

func (f factory) gaugeVec(name, help string, labels ...string) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	f.r.MustRegister(g)
	return g
}

func (f factory) histogramVec(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets}, labels)
	f.r.MustRegister(h)
	return h
}

func (f factory) histogram(name, help string, buckets []float64) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: name, Help: help, Buckets: buckets})
	f.r.MustRegister(h)
	return h
}

var (
	poolAcquired = prometheus.NewDesc("collector_db_pool_acquired_conns", "Connections in use.", nil, nil)
	poolIdle     = prometheus.NewDesc("collector_db_pool_idle_conns", "Idle connections.", nil, nil)
	poolTotal    = prometheus.NewDesc("collector_db_pool_total_conns", "Open connections.", nil, nil)
	poolMax      = prometheus.NewDesc("collector_db_pool_max_conns", "Pool size limit.", nil, nil)
	poolWaits    = prometheus.NewDesc("collector_db_pool_empty_acquire_total", "Acquires that had to wait for a connection.", nil, nil)
	poolWaitSec  = prometheus.NewDesc("collector_db_pool_acquire_wait_seconds_total", "Time spent waiting for a connection.", nil, nil)
)

type poolCollector struct{ pool *pgxpool.Pool }

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolAcquired, poolIdle, poolTotal, poolMax, poolWaits, poolWaitSec} {
		ch <- d
	}
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.pool.Stat()
	ch <- prometheus.MustNewConstMetric(poolAcquired, prometheus.GaugeValue, float64(s.AcquiredConns()))
	ch <- prometheus.MustNewConstMetric(poolIdle, prometheus.GaugeValue, float64(s.IdleConns()))
	ch <- prometheus.MustNewConstMetric(poolTotal, prometheus.GaugeValue, float64(s.TotalConns()))
	ch <- prometheus.MustNewConstMetric(poolMax, prometheus.GaugeValue, float64(s.MaxConns()))
	ch <- prometheus.MustNewConstMetric(poolWaits, prometheus.CounterValue, float64(s.EmptyAcquireCount()))
	ch <- prometheus.MustNewConstMetric(poolWaitSec, prometheus.CounterValue, s.EmptyAcquireWaitTime().Seconds())
}
