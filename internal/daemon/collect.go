package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testsignal"
)

// collectConfig configures the collection service.
type collectConfig struct {
	// MaxSleep caps the database-computed sleep between passes (daemon.max_sleep).
	MaxSleep time.Duration
	// PausedSleep is how long to wait after a pass the provider's status paused: the status is
	// re-read that often (the shorter of daemon.max_sleep and health's check interval).
	PausedSleep time.Duration
	// Ahead is how long before their due time items are claimed; passes then start at least
	// that far apart, so items gather and share packed calls (daemon.pack_wait with packing
	// on). 0 = claim each item as soon as it is due.
	Ahead time.Duration
	// Cooldown is the least pause after a rate-limit answer (budget.CooldownDefault).
	Cooldown time.Duration
	// KeyRecheck: while the provider refuses the key, one call this often (Config.KeyRecheck).
	KeyRecheck time.Duration
	// KeyLabel names the market key's cool-down row (budget.KeyLabel).
	KeyLabel string
	// Passed, when initialised (tests), hears every pass.
	Passed *testsignal.Signal[passResult]
}

func (c collectConfig) validate() error {
	var errs []error
	for _, d := range []struct {
		key string
		v   time.Duration
	}{{"daemon.max_sleep", c.MaxSleep}, {"health check interval", c.PausedSleep}, {"budget cooldown", c.Cooldown}, {"key re-check", c.KeyRecheck}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s %s must be > 0", d.key, d.v))
		}
	}
	if c.Ahead < 0 {
		errs = append(errs, fmt.Errorf("daemon.pack_wait %s must be >= 0", c.Ahead))
	}
	if c.KeyLabel == "" {
		errs = append(errs, errors.New("the market key's label is required"))
	}
	return errors.Join(errs...)
}

// collectService is the collection loop: a dispatcher pass, then ask the database when the next
// item is claimable and sleep until then. The sleeps after a failure or a rate limit are not
// cut short by notifications (the pass's own lease releases send some): they are what keeps a
// failing loop from hammering the provider.
type collectService struct {
	cfg     collectConfig
	pool    *pgxpool.Pool
	disp    *dispatcher.Dispatcher
	client  *provider.Client // the key re-check's calls, past the budget
	share   *budget.Share    // nil without a cluster budget
	loop    *budget.Loop
	calls   *atomic.Int64 // provider calls made, counted by the fetcher
	metrics *telemetry.Metrics
	log     *zap.Logger
	passes  passLog // logPass's, one goroutine's
	// wake and changed cut a sleep between passes short: a tracked_items notification, a
	// provider status change.
	wake    <-chan struct{}
	changed func() <-chan struct{}
	// writes, when set, tells whether the database takes writes: a pass that failed because it
	// does not waits for that, not for the back-off.
	writes *store.WriteHealth

	failures int                     // consecutive failed passes; Start's goroutine only
	failing  telemetry.Streak        // their log: once a streak, then once a minute; Start's goroutine only
	refused  atomic.Pointer[refusal] // set while the provider refuses the market key
	// misdirected is set while passes end on an address that is not the API (a wrong
	// provider.base_url), until a pass runs without error.
	misdirected atomic.Pointer[refusal]
}

// refusal is why collection stopped on a refused key, for /readyz.
type refusal struct {
	since  time.Time
	reason string
}

func newCollectService(cfg collectConfig, s *collectService) (*collectService, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("collection: %w", err)
	}
	s.cfg = cfg
	s.failing = telemetry.Streak{Log: s.log, What: "collection pass failed"}
	return s, nil
}

// passResult is what one pass did and what the loop does next.
type passResult struct {
	Summary dispatcher.Summary
	Calls   int64 // provider calls the pass made
	Err     error
	// Refused is set when the provider refused the key: collection holds until it works.
	Refused *provider.Error
	// WritesRefused: the pass failed because the database refuses writes (store.RefusedCause);
	// the loop waits until it takes them again, at most Pause.
	WritesRefused bool
	// Pause is a sleep nothing cuts short (a back-off, a cool-down). Otherwise Gather is how
	// long items gather before the loop asks the database for the next wake-up (Next), a sleep
	// a notification or a status change may cut short; without Next the provider's status
	// paused the pass and the loop re-reads it after PausedSleep.
	Pause, Gather time.Duration
	Next          bool
}

// Start runs passes until ctx ends.
func (s *collectService) Start(ctx context.Context) {
	for ctx.Err() == nil {
		res := s.runOnce(ctx)
		s.cfg.Passed.Signal(res)
		switch {
		case ctx.Err() != nil:
			return
		case res.Refused != nil:
			s.keyRefused(ctx, res.Refused)
			continue
		case res.WritesRefused && s.writes != nil:
			// No pass can claim before writes come back; start one as soon as they do.
			if backoff.Sleep(ctx, retryBackoff.Min) {
				wctx, cancel := context.WithTimeout(ctx, max(res.Pause-retryBackoff.Min, 0))
				s.writes.Wait(wctx)
				cancel()
			}
			continue
		case res.Pause > 0:
			backoff.Sleep(ctx, res.Pause)
			continue
		}
		if res.Gather > 0 {
			backoff.Sleep(ctx, res.Gather)
		}
		if !res.Next {
			s.sleep(ctx, s.cfg.PausedSleep)
			continue
		}
		wait, err := s.nextWake(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			s.failures++
			s.metrics.LoopErrors.WithLabelValues("wake").Inc()
			s.log.Warn("could not ask the database for the next due item; backing off", zap.Error(err))
			backoff.Sleep(ctx, retryBackoff.Delay(s.failures))
			continue
		}
		if wait > 0 {
			s.sleep(ctx, min(wait, s.cfg.MaxSleep))
		}
	}
}

// runOnce runs one pass, teaches the cost loop what it cost, and decides how the loop waits.
func (s *collectService) runOnce(ctx context.Context) passResult {
	passStart, calls := time.Now(), s.calls.Load()
	sum, err := s.disp.RunOnce(ctx)
	res := passResult{Summary: sum, Calls: s.calls.Load() - calls, Err: err}
	s.metrics.CostRatio.Set(s.loop.Learn(budget.PassCost{Collections: sum.Collected + sum.Failed, Calls: res.Calls, Planned: sum.PlannedRequests}))
	if ctx.Err() != nil {
		s.logPass(sum)
		s.passes.flush(s.log, time.Now()) // the passes summed since the last line, at the stop
		return res
	}
	if err != nil {
		s.metrics.Passes.WithLabelValues("error").Inc()
		s.metrics.LoopErrors.WithLabelValues("collect").Inc()
		var pe *provider.Error
		if errors.As(err, &pe) && pe.Class == provider.ClassConfig {
			res.Refused = pe
			return res
		}
		if errors.As(err, &pe) && pe.Class == provider.ClassEndpoint {
			since := time.Now()
			if m := s.misdirected.Load(); m != nil {
				since = m.since
			}
			s.misdirected.Store(&refusal{since: since, reason: pe.Error()})
		}
		s.failures++
		res.Pause = retryBackoff.Delay(s.failures)
		res.WritesRefused = store.RefusedCause(err) != ""
		s.failing.Failed(time.Now(), store.ExplainPooler(err), zap.Duration("backoff_seconds", res.Pause))
		return res
	}
	s.failures = 0
	s.failing.Ok(time.Now())
	s.logPass(sum)
	if sum.Paused {
		// A paused pass called nothing: whether the address answers is still unknown.
		s.metrics.Passes.WithLabelValues("paused").Inc()
		return res
	}
	s.metrics.Passes.WithLabelValues("ok").Inc()
	if sum.Collected+sum.Failed > 0 {
		// Calls were answered, and none as by something other than the API (that pass would
		// have ended in an error): a proxy's 404 has passed.
		s.misdirected.Store(nil)
	}
	if sum.Stop == dispatcher.StopRateLimited {
		res.Pause = max(time.Until(sum.CooldownUntil), s.cfg.Cooldown)
		if s.share == nil { // with a share, the fetcher has recorded it already
			if err := budget.RecordCooldown(ctx, s.pool, s.cfg.KeyLabel, res.Pause, "provider rate limit: "+sum.StopAnswer); err != nil {
				s.log.Warn("could not record the cool-down", zap.Error(err))
			}
		}
		return res
	}
	if s.share != nil {
		if res.Pause = s.share.CooldownRemaining(); res.Pause > 0 {
			return res
		}
	}
	if s.cfg.Ahead > 0 {
		// What falls due meanwhile gathers for the next pass and shares its packed calls.
		res.Gather = max(s.cfg.Ahead-time.Since(passStart), 0)
	}
	res.Next = true
	return res
}

// nextWake is how long until the next item is claimable, claiming ahead by Ahead; an hour when
// nothing is scheduled.
func (s *collectService) nextWake(ctx context.Context) (time.Duration, error) {
	wait, ok, err := catalog.NextClaimable(ctx, s.pool, s.cfg.Ahead)
	if !ok && err == nil {
		return time.Hour, nil
	}
	return wait, err
}

// sleep waits d, or until ctx ends, a notification arrives, or the provider status changes.
func (s *collectService) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	case <-s.wake:
	case <-s.changed():
	}
}

// keyRefused holds collection while the provider refuses the market key (a configuration
// error, not an outage): /readyz says why, the key's cool-down in the database shows it to
// `collector status` and pauses the other instances, the error is logged at most once a
// minute, and one call every Config.KeyRecheck tells when the key works again.
func (s *collectService) keyRefused(ctx context.Context, pe *provider.Error) {
	since := time.Now()
	var logged time.Time
	for {
		s.refused.Store(&refusal{since: since, reason: pe.Error()})
		if time.Since(logged) >= time.Minute {
			logged = time.Now()
			s.log.Error("the provider refuses the market key: collection stopped until it works again",
				zap.String("key_env", provider.WorkloadMarket.KeyEnv()), zap.Duration("recheck_every_seconds", s.cfg.KeyRecheck), zap.Error(pe))
		}
		if err := budget.RecordCooldown(ctx, s.pool, s.cfg.KeyLabel, s.cfg.KeyRecheck, "key refused: "+pe.Error()); err != nil && ctx.Err() == nil {
			s.log.Warn("could not record the refused key's cool-down", zap.Error(err))
		}
		if !backoff.Sleep(ctx, s.cfg.KeyRecheck) {
			return
		}
		err := s.probeKey(ctx)
		if !errors.As(err, &pe) || pe.Class != provider.ClassConfig {
			s.refused.Store(nil)
			if err != nil {
				// Not refused, but not answered either (an outage, an address that is not the
				// API): the passes find out which, and say so.
				s.log.Info("the key re-check was not refused; collection resumes", zap.Error(err),
					zap.Duration("refused_for_seconds", time.Since(since).Round(time.Second)))
				return
			}
			s.log.Info("the provider accepts the market key again; collection resumes", zap.Duration("refused_for_seconds", time.Since(since).Round(time.Second)))
			return
		}
	}
}

// probeKey makes one call with the market key, past the budget (whose cool-down the refusal
// itself set).
func (s *collectService) probeKey(ctx context.Context) error {
	id, err := catalog.ProbeItem(ctx, s.pool, "")
	if err != nil {
		return fmt.Errorf("key re-check: %w", err)
	}
	_, err = s.client.Auction(ctx, id)
	return err
}

func (s *collectService) logPass(sum dispatcher.Summary) {
	if sum.Claimed == 0 {
		return
	}
	s.passes.add(s.log, sum, time.Now())
	s.log.Debug("collection pass", zap.Int("claimed", sum.Claimed), zap.Int("collected", sum.Collected),
		zap.Int("failed", sum.Failed), zap.Int("fenced_out", sum.Fenced), zap.Int("released", sum.Released),
		zap.Stringer("stop", sum.Stop), zap.Duration("duration_seconds", sum.Duration),
		zap.Duration("claim_p50_seconds", sum.Claim.P50), zap.Duration("claim_p95_seconds", sum.Claim.P95),
		zap.Duration("fetch_p50_seconds", sum.Fetch.P50), zap.Duration("fetch_p95_seconds", sum.Fetch.P95),
		zap.Duration("persist_p50_seconds", sum.Persist.P50), zap.Duration("persist_p95_seconds", sum.Persist.P95))
}

// passLogEvery is how often the daemon sums its passes up in one line: with packing on a
// healthy daemon runs a pass every second or so, and a line each was 60 a minute.
const passLogEvery = time.Minute

// passLog sums the passes that claimed something since its last line; the first is logged at
// once, so a starting daemon shows it collects.
type passLog struct {
	last, since                                          time.Time // the last line; the first pass summed
	passes, claimed, collected, failed, fenced, released int
	longest                                              time.Duration
}

func (p *passLog) add(log *zap.Logger, sum dispatcher.Summary, now time.Time) {
	if p.passes == 0 {
		p.since = now.Add(-sum.Duration)
	}
	p.passes++
	p.claimed += sum.Claimed
	p.collected += sum.Collected
	p.failed += sum.Failed
	p.fenced += sum.Fenced
	p.released += sum.Released
	p.longest = max(p.longest, sum.Duration)
	if !p.last.IsZero() && now.Sub(p.last) < passLogEvery {
		return
	}
	p.flush(log, now)
}

// flush writes the passes summed so far, if any.
func (p *passLog) flush(log *zap.Logger, now time.Time) {
	if p.passes == 0 {
		return
	}
	log.Info("collection passes", zap.Int("passes", p.passes), zap.Int("claimed", p.claimed), zap.Int("collected", p.collected),
		zap.Int("failed", p.failed), zap.Int("fenced_out", p.fenced), zap.Int("released", p.released),
		zap.Duration("longest_pass_seconds", p.longest), zap.Duration("over_seconds", now.Sub(p.since)))
	*p = passLog{last: now}
}

// retryBackoff spaces the daemon's retries after database errors.
var retryBackoff = backoff.Policy{Min: 100 * time.Millisecond, Max: 10 * time.Second}
