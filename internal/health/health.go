// Package health moves provider_status by itself, for every instance sharing the database:
//
//	HEALTHY    → DEGRADED     transient failures (5xx, timeouts) above ErrorRatio of the
//	                          outcomes in the last Window (at least MinSamples of them),
//	                          unless nearly all of this instance's calls fail while the
//	                          cluster collected at least MinSamples other items in that
//	                          Window (the fault is then on this host's path)
//	any        → MAINTENANCE  a maintenance answer (the dispatcher records it on DNF980)
//	MAINTENANCE/DEGRADED → RECOVERING
//	                          a probe succeeded; one instance at a time probes (the probe is
//	                          leased in provider_probe), after a back-off that doubles with
//	                          each failed probe of the same outage (a relapse soon after
//	                          a good probe is the same outage, that probe counting as failed)
//	RECOVERING → HEALTHY      RecoverFor has passed (this instance's clock) and at least
//	                          RecoverSuccessRatio of the outcomes in the last Window
//	                          succeeded (or there were none); a process without a
//	                          monitor (Once: collect-due from cron) goes by time alone,
//	                          RecoverFor by the database's clock
//	RECOVERING → DEGRADED     as from HEALTHY: transient failures above ErrorRatio of the
//	                          outcomes in the last Window (at least MinSamples of them)
//
// While RECOVERING the request rate follows budget.RecoveryFactor: RecoverFactor of the budget
// at the start, all of it after RecoverFor. Transitions are compare-and-set on the previous status, so
// instances racing on the same observation make one transition, not several. An active manual
// override (collector provider set … --for) wins: the monitor neither probes nor transitions
// while one is in force. Every status change an instance sees is logged with its reason and
// counted.
package health

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testsignal"
)

// Prober sends one request that tells whether the provider answers again.
type Prober func(ctx context.Context) error

// RateSetter scales the request rate (the client's limiter or the cluster budget share).
type RateSetter interface{ SetRateFactor(f float64) }

// Config is the state machine's thresholds plus who this instance is.
type Config struct {
	Thresholds
	Provider string
	Owner    string
}

// Thresholds drive the state machine. Zero fields take the …Default constants: no operator
// needs to turn them, and tests set the fields directly to run at test speed.
type Thresholds struct {
	Window          time.Duration // sliding window of outcomes
	ErrorRatio      float64       // transient share that means DEGRADED
	MinSamples      int           // fewer outcomes decide nothing
	ProbeBackoff    time.Duration // first probe after this, doubled per failure
	ProbeBackoffMax time.Duration
	RecoverFactor   float64       // rate fraction at the start of RECOVERING
	RecoverFor      time.Duration // RECOVERING's ramp-up to the full rate
	// RecoverSuccessRatio: after RecoverFor, this share of the last Window's outcomes must
	// have succeeded for RECOVERING → HEALTHY.
	RecoverSuccessRatio float64
	CheckInterval       time.Duration // status re-read / probe check
	// ProbeLease: how long one instance holds the probe (provider_probe); its request gets
	// half of it. A holder that dies leaves the probe to the others after this long.
	ProbeLease time.Duration
}

// The thresholds' defaults.
const (
	WindowDefault              = 30 * time.Second
	ErrorRatioDefault          = 0.5
	MinSamplesDefault          = 20
	ProbeBackoffDefault        = 5 * time.Second
	ProbeBackoffMaxDefault     = 5 * time.Minute
	RecoverFactorDefault       = 0.1
	RecoverForDefault          = time.Minute
	RecoverSuccessRatioDefault = 0.95
	CheckIntervalDefault       = time.Second
	ProbeLeaseDefault          = 30 * time.Second
)

// TestTimings are `collector run --test-timings`' thresholds (tools/faults): probes, takeovers
// and recovery within seconds, with no configuration key for what no operator turns.
var TestTimings = Thresholds{CheckInterval: 100 * time.Millisecond, ProbeBackoff: 200 * time.Millisecond,
	ProbeBackoffMax: time.Second, RecoverFor: time.Second, ProbeLease: 2 * time.Second}

// WithDefaults fills the zero fields with the defaults.
func (t Thresholds) WithDefaults() Thresholds {
	t.Window = cmp.Or(t.Window, WindowDefault)
	t.ErrorRatio = cmp.Or(t.ErrorRatio, ErrorRatioDefault)
	t.MinSamples = cmp.Or(t.MinSamples, MinSamplesDefault)
	t.ProbeBackoff = cmp.Or(t.ProbeBackoff, ProbeBackoffDefault)
	t.ProbeBackoffMax = cmp.Or(t.ProbeBackoffMax, ProbeBackoffMaxDefault)
	t.RecoverFactor = cmp.Or(t.RecoverFactor, RecoverFactorDefault)
	t.RecoverFor = cmp.Or(t.RecoverFor, RecoverForDefault)
	t.RecoverSuccessRatio = cmp.Or(t.RecoverSuccessRatio, RecoverSuccessRatioDefault)
	t.CheckInterval = cmp.Or(t.CheckInterval, CheckIntervalDefault)
	t.ProbeLease = cmp.Or(t.ProbeLease, ProbeLeaseDefault)
	return t
}

// mustValidate refuses what would stall the state machine. Only code sets thresholds, so a bad
// one is a programming error, as in River's maintenance services.
func (t Thresholds) mustValidate() {
	var errs []error
	if t.Window <= 0 || t.ProbeBackoff <= 0 || t.CheckInterval <= 0 || t.RecoverFor <= 0 || t.MinSamples < 1 || t.ProbeLease <= 0 {
		errs = append(errs, fmt.Errorf("window %s, probe back-off %s, check interval %s, recovery %s, probe lease %s and min samples %d must be > 0",
			t.Window, t.ProbeBackoff, t.CheckInterval, t.RecoverFor, t.ProbeLease, t.MinSamples))
	}
	if t.ProbeBackoffMax < t.ProbeBackoff {
		errs = append(errs, fmt.Errorf("probe back-off max %s must be >= the probe back-off %s", t.ProbeBackoffMax, t.ProbeBackoff))
	}
	for _, r := range []float64{t.ErrorRatio, t.RecoverFactor, t.RecoverSuccessRatio} {
		if r <= 0 || r > 1 {
			errs = append(errs, fmt.Errorf("ratio %v must be > 0 and <= 1", r))
		}
	}
	if err := errors.Join(errs...); err != nil {
		panic("provider health: " + err.Error())
	}
}

// Monitor watches outcomes and the status row; Run drives it.
type Monitor struct {
	pool  *pgxpool.Pool
	cfg   Config
	probe Prober
	rate  RateSetter
	log   *zap.Logger

	// OnChange, when set before Run, hears every status change this instance sees.
	OnChange func(from, to provider.Status, reason string)
	// Checked, when initialised before Run (tests), is signalled after every status check
	// with the effective status it read.
	Checked testsignal.Signal[provider.Status]
	// ProbeLeased, when initialised before Run (tests), is signalled when this instance has
	// taken the probe, before its request.
	ProbeLeased testsignal.Signal[struct{}]
	// KeptShared, when initialised before Run (tests), is signalled when this instance's
	// failures start to be kept from degrading the provider because other instances'
	// collections succeed (how many more items they collected in the window).
	KeptShared testsignal.Signal[int]
	keptShared bool // the last check kept the shared status; only the loop touches it
	// The cluster's recent collections as last counted (-1: the count failed) and when.
	othersN  int
	othersAt time.Time

	kick    chan struct{}
	changed chan struct{}

	mu        sync.Mutex
	window    outcomes
	effective provider.Status
	auto      provider.Status
	since     time.Time
	override  bool
	recSince  time.Time // when this instance saw RECOVERING begin
}

type sample struct {
	at  time.Time
	bad bool
}

// New builds a monitor; zero thresholds take their defaults. rate may be nil.
func New(pool *pgxpool.Pool, cfg Config, probe Prober, rate RateSetter, log *zap.Logger) *Monitor {
	if log == nil {
		log = zap.NewNop()
	}
	cfg.Thresholds = cfg.Thresholds.WithDefaults()
	cfg.Thresholds.mustValidate()
	return &Monitor{pool: pool, cfg: cfg, probe: probe, rate: rate, log: log,
		kick: make(chan struct{}, 1), changed: make(chan struct{}, 1)}
}

// Changed is signalled after the effective status changes, so a paused loop can resume at once.
func (m *Monitor) Changed() <-chan struct{} { return m.changed }

// Status is the effective status last read.
func (m *Monitor) Status() provider.Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.effective
}

// Observe records one collection outcome (err nil = success). Only transient failures count
// against the provider; item errors, rate limits and key problems say nothing about its health,
// nor do calls this process stalled through (provider.ErrStalled).
func (m *Monitor) Observe(err error) {
	class := provider.ClassOf(err)
	if err != nil && class != provider.ClassTransient {
		return
	}
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, provider.ErrStalled)) {
		return // our own shutdown, or this process stopped mid-call: not the provider
	}
	now := time.Now()
	m.mu.Lock()
	m.window.add(sample{now, err != nil})
	m.trim(now)
	act := false
	switch m.auto {
	case provider.Recovering, provider.Healthy:
		act = err != nil && m.degradedLocked()
	}
	m.mu.Unlock()
	if act {
		select {
		case m.kick <- struct{}{}:
		default:
		}
	}
}

func (m *Monitor) trim(now time.Time) { m.window.dropBefore(now.Add(-m.cfg.Window)) }

// outcomes is the window of outcomes, oldest first, with its failures counted: it takes one
// outcome per fetched item (hundreds a second), so adding does not copy it and trimming copies it only once half of it has left, and
// the ratio is not a scan.
type outcomes struct {
	s    []sample
	head int // s[:head] have left the window
	bad  int // failures in s[head:]
}

func (w *outcomes) add(x sample) {
	w.s = append(w.s, x)
	if x.bad {
		w.bad++
	}
}

// dropBefore drops the outcomes older than cut, compacting once half the slice has left.
func (w *outcomes) dropBefore(cut time.Time) {
	for w.head < len(w.s) && w.s[w.head].at.Before(cut) {
		if w.s[w.head].bad {
			w.bad--
		}
		w.head++
	}
	if w.head > 0 && w.head >= len(w.s)/2 {
		w.s = w.s[:copy(w.s, w.s[w.head:])]
		w.head = 0
	}
}

func (w *outcomes) len() int { return len(w.s) - w.head }

func (w *outcomes) reset() { w.s, w.head, w.bad = w.s[:0], 0, 0 }

func (m *Monitor) degradedLocked() bool {
	if m.window.len() < m.cfg.MinSamples {
		return false
	}
	return m.ratioLocked() > m.cfg.ErrorRatio
}

func (m *Monitor) successesLocked() int { return m.window.len() - m.window.bad }

// sickRatio is the share of this instance's outcomes that fail past which it asks whether the
// others succeed: a host cut off from the provider fails nearly every call, while a provider
// failing part of its answers fails each instance's about alike.
const sickRatio = 0.9

// othersSucceed tells whether, while nearly all of this instance's calls fail, the cluster
// collected at least MinSamples items in the window besides what this instance collected:
// another instance reaches the provider, so the fault is on this one's path (DNS, a firewall,
// a proxy), and the shared status, which pauses every instance, stays. A failed count leaves
// it to the window. The count is a scan of tracked_items, so it is kept for a check interval
// (failures kick a check each).
func (m *Monitor) othersSucceed(ctx context.Context, own int) bool {
	if time.Since(m.othersAt) >= max(m.cfg.CheckInterval, time.Second) {
		// Counted up to twice what the answer needs: own grows while the count is kept.
		n, err := catalog.CollectedWithin(ctx, m.pool, m.cfg.Window, 2*(own+m.cfg.MinSamples))
		m.othersAt, m.othersN = time.Now(), -1
		if err == nil {
			m.othersN = n
		}
	}
	n := m.othersN
	others := n >= 0 && n-own >= m.cfg.MinSamples
	if others != m.keptShared {
		m.keptShared = others
		if others {
			m.log.Warn("this instance's provider calls fail while other instances' succeed; the shared status stays as it is: "+
				"check this host's path to the provider (DNS, firewall, proxy)",
				zap.Int("collected_elsewhere_at_least", n-own), zap.Duration("window_seconds", m.cfg.Window))
			m.KeptShared.Signal(n - own)
		}
	}
	return others
}

func (m *Monitor) ratioLocked() float64 {
	return float64(m.window.bad) / float64(max(m.window.len(), 1))
}

// rampLocked sets the rate for the time spent RECOVERING.
func (m *Monitor) rampLocked(now time.Time) {
	if m.rate == nil {
		return
	}
	m.rate.SetRateFactor(budget.RecoveryFactor(m.cfg.RecoverFactor, m.cfg.RecoverFor, now.Sub(m.recSince)))
}

// Start re-reads the status every CheckInterval (or at once when an outcome calls for a
// transition), makes the transitions this instance observed reasons for and probes while the
// provider is paused. Database errors are logged and retried; Start returns when ctx ends.
func (m *Monitor) Start(ctx context.Context) {
	t := time.NewTicker(m.cfg.CheckInterval)
	defer t.Stop()
	failures := telemetry.Streak{Log: m.log, What: "provider health: reading or moving provider_status in the database failed"}
	for {
		if err := m.step(ctx); err != nil && ctx.Err() == nil {
			failures.Failed(time.Now(), err)
		} else if err == nil {
			failures.Ok(time.Now())
		}
		m.Checked.Signal(m.Status())
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.kick:
		}
	}
}

func (m *Monitor) step(ctx context.Context) error {
	row, err := provider.ReadStatus(ctx, m.pool, m.cfg.Provider)
	if err != nil {
		return err
	}
	m.see(row)
	if row.OverrideStatus != "" {
		return nil
	}
	m.mu.Lock()
	now := time.Now()
	m.trim(now)
	degraded, ratio, n := m.degradedLocked(), m.ratioLocked(), m.window.len()
	own, sick := m.successesLocked(), ratio >= sickRatio
	recovering := now.Sub(m.recSince)
	if row.Status == provider.Recovering {
		m.rampLocked(now)
	}
	m.mu.Unlock()

	switch row.Status {
	case provider.Healthy:
		if degraded && !(sick && m.othersSucceed(ctx, own)) {
			return m.transition(ctx, row, provider.Degraded,
				fmt.Sprintf("transient failures %.0f%% of %d outcomes in the last %s (threshold %.0f%%)", 100*ratio, n, m.cfg.Window, 100*m.cfg.ErrorRatio))
		}
	case provider.Recovering:
		if degraded && !(sick && m.othersSucceed(ctx, own)) {
			return m.transition(ctx, row, provider.Degraded,
				fmt.Sprintf("transient failures %.0f%% of %d outcomes while recovering (threshold %.0f%%)", 100*ratio, n, 100*m.cfg.ErrorRatio))
		}
		if recovering >= m.cfg.RecoverFor && 1-ratio >= m.cfg.RecoverSuccessRatio {
			return m.transition(ctx, row, provider.Healthy, fmt.Sprintf("recovering for %s, %.0f%% of %d outcomes in the last %s succeeded",
				recovering.Round(time.Millisecond), 100*(1-ratio), n, m.cfg.Window))
		}
	case provider.Maintenance, provider.Degraded:
		return m.tryProbe(ctx, row)
	}
	return nil
}

// see records the row read and reports every change of the effective status.
func (m *Monitor) see(row provider.StatusRow) {
	eff, reason, _ := row.Effective()
	m.mu.Lock()
	prevEff, prevAuto := m.effective, m.auto
	m.effective, m.auto, m.since, m.override = eff, row.Status, row.Since, row.OverrideStatus != ""
	if row.Status != prevAuto {
		m.recSince = time.Now()
		m.window.reset()
		if m.rate != nil {
			if row.Status == provider.Recovering {
				m.rate.SetRateFactor(budget.RecoveryFactor(m.cfg.RecoverFactor, m.cfg.RecoverFor, 0))
			} else {
				m.rate.SetRateFactor(1)
			}
		}
	}
	m.mu.Unlock()
	if eff == prevEff {
		return
	}
	if prevEff != "" {
		m.log.Warn("provider status changed", zap.String("provider", m.cfg.Provider),
			zap.String("from", string(prevEff)), zap.String("to", string(eff)), zap.String("reason", reason))
	}
	if m.OnChange != nil {
		m.OnChange(prevEff, eff, reason)
	}
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

// transition moves the automatic status from row.Status to `to`, unless someone else moved it
// first (then nothing happens and the next step sees their change).
func (m *Monitor) transition(ctx context.Context, row provider.StatusRow, to provider.Status, reason string) error {
	moved, err := provider.MoveStatus(ctx, m.pool, row, to, reason)
	if err != nil || !moved {
		return err
	}
	// see logs the change once, as it does for changes other instances make.
	if next, err := provider.ReadStatus(ctx, m.pool, m.cfg.Provider); err == nil {
		m.see(next)
	}
	return nil
}

// tryProbe leases the provider's probe when its back-off has passed and no other instance holds
// it, sends one request and records the outcome. Every write after the lease is fenced by this
// instance's name: a holder that outlived its lease (paused, or its probe's answer late) finds
// another holder there and leaves the probe to it.
func (m *Monitor) tryProbe(ctx context.Context, row provider.StatusRow) error {
	// A new outage (a new since) starts a new back-off series, unless it began within
	// RecoverFor + ProbeBackoffMax of the probe that ended the last one: a provider that fails
	// again as its traffic ramps up (DEGRADED → RECOVERING → DEGRADED …) is one outage, and
	// that probe counts as failed, so the series goes on doubling instead of probing and
	// ramping up again every ProbeBackoff.
	// The lease is taken on a context a stop ends only later: cut on its way, a lease the
	// server had committed would hold the probe from everyone until it ran out.
	lctx, lcancel := store.LetFinish(ctx)
	defer lcancel()
	const relapse = `(provider_probe.last_result = 'ok' AND EXCLUDED.episode_since < provider_probe.updated_at + $4 * interval '1 millisecond')`
	if _, err := m.pool.Exec(lctx, `
		INSERT INTO provider_probe (provider, episode_since, failures, next_probe_at)
		VALUES ($1, $2::timestamptz, 0, $2::timestamptz + $3 * interval '1 millisecond')
		ON CONFLICT (provider) DO UPDATE SET episode_since = EXCLUDED.episode_since,
			failures = CASE WHEN `+relapse+` THEN provider_probe.failures + 1 ELSE 0 END,
			next_probe_at = CASE WHEN `+relapse+`
				THEN EXCLUDED.episode_since + least($5::float8, $3::float8 * power(2, least(provider_probe.failures + 1, 30))) * interval '1 millisecond'
				ELSE EXCLUDED.next_probe_at END,
			-- The last result is the last outage's: one that ended without a probe (an
			-- override, a status set by hand) must not look like a good probe to the next.
			last_result = NULL, leased_by = NULL, lease_expires_at = NULL, updated_at = now()
		WHERE provider_probe.episode_since <> EXCLUDED.episode_since`,
		m.cfg.Provider, row.Since, m.cfg.ProbeBackoff.Milliseconds(),
		(m.cfg.RecoverFor + m.cfg.ProbeBackoffMax).Milliseconds(), m.cfg.ProbeBackoffMax.Milliseconds()); err != nil {
		return fmt.Errorf("provider %s probe schedule: %w", m.cfg.Provider, err)
	}
	var failures int
	err := m.pool.QueryRow(lctx, `
		UPDATE provider_probe SET leased_by = $2, lease_expires_at = now() + $3 * interval '1 millisecond', updated_at = now()
		WHERE provider = $1 AND episode_since = $4 AND next_probe_at <= now()
		  AND (lease_expires_at IS NULL OR lease_expires_at <= now())
		RETURNING failures`, m.cfg.Provider, m.cfg.Owner, m.cfg.ProbeLease.Milliseconds(), row.Since).Scan(&failures)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil // not yet, or another instance is probing
	}
	if err != nil {
		return fmt.Errorf("provider %s probe lease: %w", m.cfg.Provider, err)
	}
	m.ProbeLeased.Signal(struct{}{})

	pctx, cancel := context.WithTimeout(ctx, m.cfg.ProbeLease/2)
	perr := m.probe(pctx)
	cancel()
	class := provider.ClassOf(perr)
	ok := perr == nil || class == provider.ClassItem || class == provider.ClassRejected // the provider answered
	// The results are written even while shutting down: a clean stop hands the probe back
	// at once instead of leaving it to expire.
	wctx, wcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer wcancel()
	if ctx.Err() != nil {
		if _, err := m.pool.Exec(wctx, `
			UPDATE provider_probe SET leased_by = NULL, lease_expires_at = NULL, updated_at = now()
			WHERE provider = $1 AND leased_by = $2`, m.cfg.Provider, m.cfg.Owner); err != nil {
			return fmt.Errorf("provider %s probe release: %w", m.cfg.Provider, err)
		}
		return nil
	}
	if !ok {
		failures++
		wait := backoff.Policy{Min: m.cfg.ProbeBackoff, Max: m.cfg.ProbeBackoffMax}.Delay(failures + 1)
		tag, err := m.pool.Exec(wctx, `
			UPDATE provider_probe SET failures = $2, next_probe_at = now() + $3 * interval '1 millisecond',
				leased_by = NULL, lease_expires_at = NULL, last_result = $4, updated_at = now()
			WHERE provider = $1 AND episode_since = $5 AND leased_by = $6`,
			m.cfg.Provider, failures, wait.Milliseconds(), perr.Error(), row.Since, m.cfg.Owner)
		if err != nil {
			return fmt.Errorf("provider %s probe result: %w", m.cfg.Provider, err)
		}
		if tag.RowsAffected() == 0 {
			m.log.Info("provider probe failed after its lease ran out; another instance has the probe", zap.String("provider", m.cfg.Provider),
				zap.Error(perr))
			return nil
		}
		m.log.Info("provider probe failed", zap.String("provider", m.cfg.Provider), zap.String("status", string(row.Status)),
			zap.Int("failures", failures), zap.Duration("next_probe_in_seconds", wait), zap.Error(perr))
		return nil
	}
	if _, err := m.pool.Exec(wctx, `
		UPDATE provider_probe SET leased_by = NULL, lease_expires_at = NULL, last_result = 'ok', updated_at = now()
		WHERE provider = $1 AND leased_by = $2`, m.cfg.Provider, m.cfg.Owner); err != nil {
		return fmt.Errorf("provider %s probe result: %w", m.cfg.Provider, err)
	}
	// The provider answered: whoever holds the probe now, it is back.
	return m.transition(ctx, row, provider.Recovering, fmt.Sprintf("probe succeeded after %d failed probes", failures))
}

// Once is one health step for a process that runs no monitor (collect-due, collect and
// seed:real from cron or a CronJob), so a provider paused by an automatic status never waits
// for a daemon that may not exist, or that was killed mid-outage: while MAINTENANCE or
// DEGRADED it probes as a monitor does (the same lease and back-off in provider_probe, so
// overlapping runs and daemons still probe one at a time), and it ends RECOVERING once the
// status is RecoverFor old by the database's clock, having no window of outcomes to judge by.
// An active manual override is left alone.
func Once(ctx context.Context, pool *pgxpool.Pool, cfg Config, probe Prober, log *zap.Logger) error {
	m := New(pool, cfg, probe, nil, log)
	row, err := provider.ReadStatus(ctx, pool, cfg.Provider)
	if err != nil || row.OverrideStatus != "" {
		return err
	}
	m.see(row)
	switch row.Status {
	case provider.Maintenance, provider.Degraded:
		return m.tryProbe(ctx, row)
	case provider.Recovering:
		var age float64
		if err := pool.QueryRow(ctx, `SELECT extract(epoch FROM now() - $1::timestamptz)`, row.Since).Scan(&age); err != nil {
			return fmt.Errorf("provider %s: read the database clock: %w", cfg.Provider, err)
		}
		if d := time.Duration(age * float64(time.Second)); d >= m.cfg.RecoverFor {
			return m.transition(ctx, row, provider.Healthy,
				fmt.Sprintf("recovering for %s (a run without a health monitor ends RECOVERING by time)", d.Round(time.Second)))
		}
	}
	return nil
}

// AuctionProbe is the probe daemons and one-shots send: one tracked item's listings, through
// auction (the budget's fetcher, so a probe spends the key's budget like any call).
func AuctionProbe(pool *pgxpool.Pool, auction func(ctx context.Context, itemID string) (provider.Answer[provider.Listing], error)) Prober {
	return func(ctx context.Context) error {
		id, err := catalog.ProbeItem(ctx, pool, "")
		if err != nil {
			return fmt.Errorf("probe: %w", err)
		}
		_, err = auction(ctx, id)
		return err
	}
}
