// Package budget is the provider budget's feedback loop, in one place: the ceiling (Ceiling,
// the one headroom), the rate sharer below, what collections cost and the one number the tier
// plan receives (Loop, PlanLimit), and the recovery ramp (RecoveryFactor). Package tierplan,
// the tier optimiser, decides how often each item may be collected within that number.
//
// The rate sharer (Share) divides one API key's budget among every process that spends it,
// through PostgreSQL, so that together they never exceed it. Its rate arithmetic and waits run
// on Config.Clock (the wall clock, or a test's); liveness and cool-downs on the database's.
//
// Design: each process heartbeats a row in collector_instances for the key (key_label is a
// hash of the key) every Heartbeat. A row whose heartbeat is older than 3 × Heartbeat is dead.
// Each heartbeat returns N, the number of live rows, and the process takes
//
//	q = min(rate, per_minute/60) × (1 − Headroom) × factor / N   requests per second
//
// as its share. Within a process two things hold it to q:
//   - a quota per second of the database's clock (each heartbeat measures how far this host's
//     clock is from it): in second s it may send ⌊q·(s+1) + r/N⌋ − ⌊q·s + r/N⌋
//     requests, r being its rank among the live processes, and only in the first 90 % of the
//     second. Fractions are carried (q on average), and the ranks stagger the seconds that
//     carry them, so by Hermite's identity (Σ_r ⌊x + r/N⌋ = ⌊N·x⌋) the whole cluster sends
//     exactly ⌊T·(s+1)⌋ − ⌊T·s⌋ ≤ ⌈T⌉ in second s, T = N·q being the cluster rate;
//   - an x/time/rate limiter at q/0.8 with burst 1 that spreads those requests over the first
//     80 % of the second instead of firing them at once.
//
// A request still in flight when a second begins may reach the provider in that second, so it
// counts against that second's quota too (Wait returns a done func to call when the answer is
// in). Counting in whole seconds this way, rather than only pacing a rate, is what keeps
// the sum under the budget on a loaded machine, where goroutine scheduling can delay a paced
// request past a second boundary by any amount: every request that can arrive in second s was
// either granted in s or in flight when s began, and both count against s. N processes
// together therefore send at most ⌈T⌉ ≤ budget in any second, and since every second stays
// under per_minute/60, never more than per_minute in a rolling minute either (±1 second at the
// window's edges, which the headroom covers). The price is utilisation when calls are slow: a
// call in flight across a boundary uses a slot in both seconds, hence the spread and cutoff
// that keep the end of each second quiet. The quiet 10 % also absorbs what the processes' views
// of the database's second disagree by (each within half a heartbeat's round trip: 50 ms for a
// database within offsetTrip) and how far the provider's clock is from the database's.
//
// Why the sum stays under the budget while N changes:
//   - a joining process counts itself at once but sends nothing for 2 × Heartbeat, by when
//     every other process has heartbeated, seen N+1 and lowered its share;
//   - a leaving process deletes its row (others raise their share on their next heartbeat),
//     a crashed one is dropped after 3 × Heartbeat: both only leave budget unused for a while;
//   - a process whose own heartbeat has not succeeded for 2 × Heartbeat stops sending until it
//     does, because the others may already count it dead and have raised their shares; one
//     whose row was 3 × Heartbeat old by the database's clock (it was frozen, or cut off from
//     the database) then waits 2 × Heartbeat more, as a joining process does, while they lower
//     them again; so does every request it had reserved a limiter token for before.
//
// While N or the ranks change, processes may briefly disagree on them; the headroom (3 % by
// default, so a busy cluster uses about 97 % of the budget) absorbs that.
//
// A rate-limit answer from the provider (HTTP 429, API002, API008) writes a cool-down for the
// key into budget_cooldowns (Retry-After, or Cooldown when absent); every process learns it
// on its next heartbeat (the one that got the answer at once) and sends nothing until it ends.
//
// Adaptive (AIMD, as TCP congestion control): the configured rate is only a ceiling, since the
// provider's real limit is unpublished. The cluster rate per key lives in budget_rates. A
// rate-limit answer cuts it to Decrease × itself, at most once per hold (answers to requests
// sent before the cut must not cut again); Retry-After, when sent, is still honoured as a
// cool-down, but without one the cut is the whole back-off. While no cut happened for an
// interval and a process had to wait for budget, a heartbeat raises the rate by Increase × the
// rate the last cut started from per second (a fixed step per cycle), up to the ceiling. Every process
// reads the rate on its heartbeat, so all converge on the provider's real limit.
//
// Slow start (SlowStart, as TCP's): with nothing learned for the key (no budget_rates row, or
// one still marked slow_start) the cluster does not start at the ceiling, which against a
// provider allowing a tenth of it gets a third of the first answers refused, but at
// SlowStartShare of it. Each heartbeat of a process that used at least half its share doubles
// the rate per second elapsed since the last step (once across the cluster, so instances
// starting together ramp once); a rate nobody fills is not raised. The first rate-limit answer
// ends the slow start with a cut to SlowStartCut × the rate, which ends the refusals; while held
// back the rate doubles back to half the refused rate (TCP's ssthresh) and AIMD takes over; reaching the
// ceiling ends it too. Planning treats a slow start's rate as nothing learned (LearnedShare 1).
package budget

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"golang.org/x/time/rate"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testsignal"
)

// Config is one key's budget and this process's identity.
type Config struct {
	KeyLabel  string        // KeyLabel(workload, key); never the key
	Rate      float64       // requests per second for the whole cluster
	PerMinute int           // requests per rolling minute for the whole cluster; 0 = none
	Headroom  float64       // fraction left unused as margin
	Heartbeat time.Duration // instance heartbeat and share refresh (HeartbeatDefault)
	Cooldown  time.Duration // cool-down when Retry-After is absent, when not adaptive (CooldownDefault)
	// Adaptive learns the provider's real limit below Rate (AIMD, see the package doc).
	Adaptive bool
	Decrease float64 // adaptive: a cut multiplies the rate by this; default DefaultDecrease
	Increase float64 // adaptive: the step per second, as a fraction of the rate the last cut started from; default DefaultIncrease
	MinRate  float64 // adaptive: the rate never goes below this; default DefaultMinRate
	// SlowStart (adaptive): with nothing learned for the key, start the cluster at
	// SlowStartShare of the ceiling and double while used, until the first rate-limit answer.
	SlowStart      bool
	SlowStartShare float64 // in (0, 1]; SlowStartShareDefault
	// Probed, when initialised (tests), hears the rate each adaptive heartbeat read.
	Probed   *testsignal.Signal[Probe]
	Instance string // unique per process (and per daemon in tests)
	Host     string
	PID      int
	// WriteHealth, when set, hears every heartbeat's outcome: it is a write.
	WriteHealth *store.WriteHealth
	// Clock is what the share's rate arithmetic and waits run on; nil is Wall.
	Clock Clock
}

// ConfigFor is the share's configuration from daemon.budget.* and the market key's limits,
// for this process as instance. The daemon and the one-shots build it here, so they agree.
func ConfigFor(b config.BudgetConfig, market config.WorkloadLimits, keyLabel, instance string) Config {
	b = Tuned(b)
	host, _ := os.Hostname()
	return Config{
		KeyLabel: keyLabel, Rate: market.Rate, PerMinute: market.PerMinute,
		Headroom: b.Headroom, Heartbeat: b.Heartbeat, Cooldown: b.Cooldown, Adaptive: b.Adaptive,
		SlowStart: b.SlowStart, SlowStartShare: b.SlowStartShare, Instance: instance, Host: host, PID: os.Getpid(),
	}
}

// What daemon.budget.* no longer sets (they were keys until issue 37; nobody turned them).
const (
	// HeartbeatDefault: an instance's share is handed on 3 heartbeats after it dies, and a
	// cut reaches every process within one.
	HeartbeatDefault = time.Second
	// CooldownDefault is the cluster-wide pause after a rate-limit answer without Retry-After
	// when not adaptive.
	CooldownDefault = time.Second
	// SlowStartShareDefault is where a slow start begins: 4.85 req/s of the default 500/s
	// ceiling, which doubling reaches in about 7 s of use.
	SlowStartShareDefault = 0.01
)

// Tuned fills the budget settings that are not keys with their defaults, keeping what a test
// set.
func Tuned(b config.BudgetConfig) config.BudgetConfig {
	if b.Heartbeat == 0 {
		b.Heartbeat = HeartbeatDefault
	}
	if b.Cooldown == 0 {
		b.Cooldown = CooldownDefault
	}
	if b.SlowStartShare == 0 {
		b.SlowStartShare = SlowStartShareDefault
	}
	return b
}

// Adaptive defaults.
const (
	DefaultDecrease = 0.8
	DefaultIncrease = 0.01
	DefaultMinRate  = 0.5
	// SlowStartCut is the first cut, ending a slow start at rate R: the rate before the last
	// doubling, R/2, was served in full for a second, which even a provider whose bucket holds
	// a second's worth (a second's refill plus the bucket) does only if it allows R/4. Cutting
	// to that floor ends the refusals at once; the rate then doubles back to R/2 within a second
	// (TCP's slow start up to ssthresh) and AIMD's steps (1 % of R a second) carry on from there.
	SlowStartCut = 0.25
)

// KeyLabel names a key in the database and in metrics without revealing it.
func KeyLabel(workload, key string) string {
	sum := sha256.Sum256([]byte(key))
	return workload + ":" + hex.EncodeToString(sum[:4])
}

// Share is this process's part of a key's budget.
type Share struct {
	pool *pgxpool.Pool
	cfg  Config
	log  *zap.Logger
	// beatFailures logs failed heartbeats once a streak (and a minute), from the heartbeat's goroutine.
	beatFailures telemetry.Streak
	coolLines    sparse
	lim          *rate.Limiter
	clock        Clock

	ready    chan struct{} // closed once the join delay has passed
	joined   time.Time     // local clock of the first successful heartbeat
	mu       sync.Mutex
	live     int
	factor   float64
	lastBeat time.Time // local clock of the last successful heartbeat
	// rejoinAt (local clock): a heartbeat that succeeded after the others may have counted
	// this process out holds its requests until then, as a join does.
	rejoinAt time.Time
	coolTill time.Time // local clock
	perSec   float64
	qSec     int64 // the database's second qUsed counts
	// The database's clock minus this one, measured by each heartbeat: the processes of a key
	// split each second's requests by rank, which holds only if they agree which second it is.
	// Counted on each host's own clock, one a second or minutes off spent its quota in the
	// others' seconds, bursts passed the key's limit, and the 429s cooled the key down for all.
	offset    time.Duration
	offsetSet bool
	minTrip   time.Duration // the fastest heartbeat round trip seen
	qUsed     int           // granted in qSec, plus those in flight when it began
	inflight  int
	rank      int       // live processes on the key whose instance name sorts before ours
	milli     int64     // the cluster's rate in requests per 1000 s
	learned   float64   // adaptive: the cluster rate learned from the provider's answers
	slowStart bool      // adaptive: learned is still a slow start's ramp, not a finding
	beatUsed  int64     // used at the last heartbeat
	beatAt    time.Time // local clock of the last heartbeat that counted beatUsed
	lastCut   time.Time // adaptive: local clock of the last cut this process made or saw
	cuts      int64     // adaptive: cuts this process made
	waitedAt  int64     // waited (ns) at the last heartbeat: has this process been held back since?

	used   atomic.Int64
	waited atomic.Int64 // ns
}

// New builds a share; it sends nothing until Run has registered it. A value out of range is
// refused with the configuration key it comes from, never replaced: the defaults are
// internal/config's (daemon.budget.*, provider.market.*). Decrease, Increase and MinRate, which
// no key sets, take the package's defaults when 0.
func New(pool *pgxpool.Pool, cfg Config, log *zap.Logger) (*Share, error) {
	if cfg.KeyLabel == "" || cfg.Instance == "" {
		return nil, fmt.Errorf("budget: key label and instance are required")
	}
	if cfg.Decrease == 0 {
		cfg.Decrease = DefaultDecrease
	}
	if cfg.Increase == 0 {
		cfg.Increase = DefaultIncrease
	}
	if cfg.MinRate == 0 {
		cfg.MinRate = DefaultMinRate
	}
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("budget %s: %w", cfg.KeyLabel, err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.Clock == nil {
		cfg.Clock = Wall
	}
	s := &Share{pool: pool, cfg: cfg, log: log, lim: rate.NewLimiter(0, 1), clock: cfg.Clock, ready: make(chan struct{}), factor: 1, live: 1,
		beatFailures: telemetry.Streak{Log: log, What: "budget heartbeat failed"}}
	s.learned = s.total()
	if cfg.Adaptive && cfg.SlowStart {
		// Until the first heartbeat reads the key's row (nothing is sent before it).
		s.learned, s.slowStart = s.startRate(), true
	}
	return s, nil
}

func (c Config) validate() error {
	var errs []error
	bad := func(key string, v any, allowed string) {
		errs = append(errs, fmt.Errorf("%s = %v: %s", key, v, allowed))
	}
	if !(c.Rate > 0) {
		bad("provider.market.rate", c.Rate, "must be > 0")
	}
	if c.Heartbeat <= 0 {
		bad("budget Config.Heartbeat", c.Heartbeat, "must be > 0")
	}
	if c.Cooldown <= 0 {
		bad("budget Config.Cooldown", c.Cooldown, "must be > 0")
	}
	if !(c.Decrease > 0 && c.Decrease < 1) {
		bad("budget Config.Decrease", c.Decrease, "must be in (0, 1)")
	}
	if !(c.Increase > 0) {
		bad("budget Config.Increase", c.Increase, "must be > 0")
	}
	if !(c.MinRate > 0) {
		bad("budget Config.MinRate", c.MinRate, "must be > 0")
	}
	if c.SlowStart && !(c.SlowStartShare > 0 && c.SlowStartShare <= 1) {
		bad("budget Config.SlowStartShare", c.SlowStartShare, "must be > 0 and <= 1")
	}
	return errors.Join(errs...)
}

// hold is how long after a cut further rate-limit answers do not cut again: they answer
// requests sent before the cut, which every process learns within a heartbeat.
func (s *Share) hold() time.Duration { return max(2*s.cfg.Heartbeat, 250*time.Millisecond) }

// total is the cluster's per-second budget after headroom.
func (s *Share) total() float64 { return s.cfg.ceiling() }

func (c Config) ceiling() float64 {
	return Ceiling(config.WorkloadLimits{Rate: c.Rate, PerMinute: c.PerMinute}, c.Headroom)
}

// Pacing spreads a second's quota over its first 80 %; nothing is granted in its last 10 %.
const (
	spread = 0.8
	cutoff = 900 * time.Millisecond
)

// rate is the cluster's rate before the recovery factor: the ceiling, or what was learned.
func (s *Share) rate() float64 {
	if s.cfg.Adaptive {
		return min(s.total(), s.learned)
	}
	return s.total()
}

func (s *Share) apply() {
	s.milli = int64(s.rate() * s.factor * 1000)
	perSec := float64(s.milli) / 1000 / float64(max(s.live, 1))
	if perSec != s.perSec {
		s.perSec = perSec
		s.lim.SetLimitAt(s.clock.Now(), rate.Limit(perSec/spread))
	}
}

// quota is how many requests second sec carries for the process of rank r among n, the
// cluster sending milli/1000 requests per second: ⌊q·(sec+1) + r/n⌋ − ⌊q·sec + r/n⌋ with
// q = milli/(1000·n), in integers so that the ranks' shares add up exactly.
func quota(milli int64, n int, sec int64, r int) int {
	d := 1000 * int64(n)
	return int((milli*(sec+1)+1000*int64(r))/d - (milli*sec+1000*int64(r))/d)
}

// offsetTrip is a heartbeat round trip that always measures the offset: the error is half of
// it, well inside the quiet tenth of each second. Slower ones measure it only when no more than
// twice the fastest seen (a distant database).
const offsetTrip = 100 * time.Millisecond

// rollover starts a new second's count with the requests in flight at its start. Every grant
// and every completion calls it first, so the first event of a second sees exactly the
// requests that were in flight when the second began. Callers hold s.mu.
func (s *Share) rollover(now time.Time) int64 {
	sec := now.Add(s.offset).Unix()
	if sec < s.qSec && s.qSec-sec <= 1 {
		// A new measure of the offset moved the clock back a little: the second already
		// counted goes on, or its quota would be granted twice. (A step back of seconds, the
		// host's clock set back, starts over: waiting it out would stall every call.)
		return s.qSec
	}
	if sec != s.qSec {
		s.qSec, s.qUsed = sec, s.inflight
	}
	return sec
}

// grant takes one request from the current second's quota, or says how long until the next
// second begins.
func (s *Share) grant(now time.Time) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := s.rollover(now)
	now = now.Add(s.offset)
	if now.Sub(time.Unix(sec, 0)) < cutoff && s.qUsed < quota(s.milli, max(s.live, 1), sec, s.rank) {
		s.qUsed++
		s.inflight++
		return 0
	}
	// At most a second: the caller sleeps it on its own clock, which a step of the host's
	// clock may have moved from the database's until the next heartbeat says so.
	return min(time.Unix(sec+1, 0).Sub(now), time.Second)
}

func (s *Share) done() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.rollover(s.clock.Now())
	s.inflight--
}

// SetRateFactor scales this process's share (the provider is recovering), f in [0.01, 1].
func (s *Share) SetRateFactor(f float64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.factor = min(max(f, 0.01), 1)
	s.apply()
}

// Stats is what the share looks like now.
type Stats struct {
	PerSecond float64
	Live      int
	Used      int64
	Waited    time.Duration
	Cooldown  time.Duration // remaining
	// ClusterRate is the rate the whole cluster may send now (learned when adaptive), Ceiling
	// the configured one after headroom; Cuts counts this process's rate cuts.
	ClusterRate, Ceiling float64
	Cuts                 int64
	// SlowStart: ClusterRate is still a slow start's ramp (nothing learned for the key yet).
	SlowStart bool
}

// Stats reports the current share.
func (s *Share) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Stats{PerSecond: s.perSec, Live: s.live, Used: s.used.Load(), Waited: time.Duration(s.waited.Load()),
		Cooldown: max(s.coolTill.Sub(s.clock.Now()), 0), ClusterRate: s.rate(), Ceiling: s.total(), Cuts: s.cuts,
		SlowStart: s.slowStart}
}

// CooldownRemaining is how long the key's shared cool-down still lasts (0 = none).
func (s *Share) CooldownRemaining() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return max(s.coolTill.Sub(s.clock.Now()), 0)
}

// CooldownError: the key's cool-down, or any wait for the share, lasts past the caller's
// window.
type CooldownError struct {
	Until time.Time
	In    time.Duration // Until less the share's clock when it was said (Config.Clock)
	Why   string        // what is waited for, when not the key's cool-down
}

func (e *CooldownError) Error() string {
	if e.Why != "" {
		return e.Why
	}
	return "the key cools down until " + e.Until.UTC().Format(time.RFC3339)
}

// WaitWithin blocks until this process may send one request on the key; call done once its
// answer (or error) is in. A caller whose work is only worth doing for window more (a one-shot
// whose leases end) gets a *CooldownError at once for a cool-down that outlasts it instead of
// sleeping through it; window 0 means no limit.
func (s *Share) WaitWithin(ctx context.Context, window time.Duration) (done func(), err error) {
	start := s.clock.Now()
	defer func() { s.waited.Add(int64(s.clock.Now().Sub(start))) }()
	// The window bounds the whole wait, not only a cool-down: a one-shot whose budget
	// heartbeats keep failing never joins, or waits a quarter heartbeat at a time, for good.
	select {
	case <-s.ready:
	default:
		// Joining takes two heartbeats after the first that succeeds, which a short window
		// (collect.lease 1s) may not cover: the bound is the window past that.
		var late <-chan time.Time
		if window > 0 {
			late = s.clock.After(window + 3*s.cfg.Heartbeat)
		}
		select {
		case <-s.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-late:
			return nil, &CooldownError{Until: s.clock.Now(), Why: "this process has not joined the key's shared budget within " +
				(window + 3*s.cfg.Heartbeat).String() + " (are its budget heartbeats failing?)"}
		}
	}
	var a attempt
	for {
		now := s.clock.Now()
		d, err := s.admit(&a, now, window)
		if err != nil {
			return nil, err
		}
		if d == 0 {
			break
		}
		// Bounded: the wait on our own failing heartbeat, which may never end. A cool-down is
		// bounded by admit; the limiter's waits are this process's rate, which the others and
		// the caller's concurrency set.
		if window > 0 && a.res == nil && s.heartbeatStale(now) && now.Add(d).Sub(start) > window {
			return nil, &CooldownError{Until: now.Add(d), In: d, Why: "this process's budget heartbeat is failing (it may be counted out of the key's shared budget), " +
				"and the wait for the budget outlasts " + window.String()}
		}
		if !s.sleep(ctx, d) {
			a.abandon(s.clock.Now())
			return nil, ctx.Err()
		}
	}
	s.used.Add(1)
	var once sync.Once
	return func() { once.Do(s.done) }, nil
}

// heartbeatStale: our last heartbeat is more than two heartbeats old, so the others may count
// this process out of the key's budget.
func (s *Share) heartbeatStale(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return now.Sub(s.lastBeat)-2*s.cfg.Heartbeat > 0
}

// attempt is one caller's wait for a request, taken step by step (admit).
type attempt struct {
	res *rate.Reservation // the spread limiter's token, held across its delay
}

// abandon hands back the limiter's token of an attempt given up.
func (a *attempt) abandon(now time.Time) {
	if a.res != nil {
		a.res.CancelAt(now)
		a.res = nil
	}
}

// admit is one step of attempt a at now: 0 when the request is granted, else how long to wait
// before the next step; a *CooldownError when a cool-down outlasts window (0: no limit). The
// spread limiter's token, once reserved, is kept across its delay (as rate.Limiter.Wait
// does), so that callers queue on it instead of all waking for each token.
func (s *Share) admit(a *attempt, now time.Time, window time.Duration) (time.Duration, error) {
	// Every hold applies also to an attempt that reserved its token before: this process may
	// have been stopped since (a paused VM, SIGSTOP), and the others may have counted it out.
	s.mu.Lock()
	d := max(s.coolTill.Sub(now), s.rejoinAt.Sub(now))
	if stale := now.Sub(s.lastBeat) - 2*s.cfg.Heartbeat; stale > 0 {
		d = max(d, s.cfg.Heartbeat/4) // our heartbeat is failing: others may count us dead
	}
	s.mu.Unlock()
	if window > 0 && d > window {
		a.abandon(now)
		return 0, &CooldownError{Until: now.Add(d), In: d}
	}
	if d > 0 {
		return d, nil
	}
	if a.res == nil {
		r := s.lim.ReserveN(now, 1)
		if !r.OK() {
			return s.cfg.Heartbeat / 4, nil
		}
		if wait := r.DelayFrom(now); wait > 0 {
			a.res = r
			return wait, nil
		}
	}
	a.res = nil
	return s.grant(now), nil
}

// Start registers the process, heartbeats until ctx ends, then deregisters so the others take
// over its share at once. Database errors are logged and retried.
func (s *Share) Start(ctx context.Context) {
	defer s.leave(ctx)
	for next := s.clock.Now(); ; {
		s.heartbeat(ctx)
		if ctx.Err() != nil {
			return
		}
		// A heartbeat's pace, as a ticker's: a slow one does not push the next ones back.
		now := s.clock.Now()
		if next = next.Add(s.cfg.Heartbeat); next.Before(now) {
			next = now
		}
		if !s.sleep(ctx, next.Sub(now)) {
			return
		}
	}
}

// leave deregisters the process, so that the others take over its share on their next
// heartbeat.
func (s *Share) leave(ctx context.Context) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := s.pool.Exec(dctx, `DELETE FROM collector_instances WHERE key_label = $1 AND instance = $2`,
		s.cfg.KeyLabel, s.cfg.Instance); err != nil {
		s.log.Warn("could not deregister from the budget; the row expires by itself", zap.Error(err))
	}
}

// heartbeat is one pass of Run: it heartbeats once, and lets requests go once the others have
// had 2 × Heartbeat to count this process.
//
// A beat is not cut short when ctx ends: a statement cancelled mid-flight can still commit on
// the server after leave's DELETE, bringing the row back until it expires. It has the same 5 s
// bound as leave.
func (s *Share) heartbeat(ctx context.Context) {
	bctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	err := s.beat(bctx)
	cancel()
	if ctx.Err() != nil {
		return
	}
	s.cfg.WriteHealth.ObserveAnswer(err)
	now := s.clock.Now()
	if err != nil {
		s.beatFailures.Failed(now, err, zap.String("key", s.cfg.KeyLabel))
	} else {
		s.beatFailures.Ok(now, zap.String("key", s.cfg.KeyLabel))
		if s.joined.IsZero() {
			s.joined = now
		}
	}
	if !s.joined.IsZero() && now.Sub(s.joined) >= 2*s.cfg.Heartbeat {
		select {
		case <-s.ready:
		default:
			close(s.ready)
		}
	}
}

func (s *Share) beat(ctx context.Context) error {
	s.mu.Lock()
	perSec := s.perSec
	s.mu.Unlock()
	ttl := 3 * s.cfg.Heartbeat
	var others, rank int
	var coolMS float64
	var dbNow time.Time
	var prevAgeMS *float64 // how old our row was, by the database's clock (nil: gone)
	sent := s.clock.Now()
	err := s.pool.QueryRow(ctx, `
		WITH prev AS (
			SELECT extract(epoch FROM now() - heartbeat_at) * 1000 AS age_ms FROM collector_instances
			WHERE key_label = $1 AND instance = $2
		), me AS (
			INSERT INTO collector_instances (key_label, instance, host, pid, used, share)
			VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT (key_label, instance) DO UPDATE
			SET heartbeat_at = now(), used = EXCLUDED.used, share = EXCLUDED.share
			RETURNING 1
		), gone AS (
			DELETE FROM collector_instances
			WHERE key_label = $1 AND instance <> $2 AND heartbeat_at < now() - interval '1 hour'
		)
		SELECT (SELECT count(*) FROM collector_instances
		        WHERE key_label = $1 AND instance <> $2 AND heartbeat_at > now() - $7 * interval '1 millisecond'),
		       (SELECT count(*) FROM collector_instances
		        WHERE key_label = $1 AND instance < $2 AND heartbeat_at > now() - $7 * interval '1 millisecond'),
		       coalesce((SELECT extract(epoch FROM until - now()) * 1000 FROM budget_cooldowns
		                 WHERE key_label = $1 AND until > now()), 0),
		       clock_timestamp(),
		       (SELECT age_ms FROM prev)
		FROM me`,
		s.cfg.KeyLabel, s.cfg.Instance, s.cfg.Host, s.cfg.PID, s.used.Load(), perSec, ttl.Milliseconds()).Scan(&others, &rank, &coolMS, &dbNow, &prevAgeMS)
	if err != nil {
		return fmt.Errorf("budget heartbeat for %s: %w", s.cfg.KeyLabel, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.clock.Now()
	if !s.lastBeat.IsZero() && (prevAgeMS == nil || *prevAgeMS >= float64(ttl.Milliseconds())) {
		// Our row was ttl old (or gone), by the clock the others count it on: frozen (a paused
		// VM, SIGSTOP) or cut off from the database, this process may have been counted out,
		// and the others keep their raised shares until their next heartbeat. Sending at once
		// would put both on the key.
		s.rejoinAt = now.Add(2 * s.cfg.Heartbeat)
		stopped := zap.Skip()
		if prevAgeMS != nil {
			stopped = zap.Duration("stopped_for_seconds", time.Duration(*prevAgeMS*float64(time.Millisecond)))
		}
		s.log.Info("budget share rejoining after its heartbeat stopped", zap.String("key", s.cfg.KeyLabel),
			stopped, zap.Duration("holds_requests_for_seconds", 2*s.cfg.Heartbeat))
	}
	s.lastBeat = now
	if _, ok := s.clock.(realTime); ok {
		// The database's reading lies between sent and now: within half the round trip of the
		// midpoint. A trip much slower than the fastest seen (a lock wait, a commit's flush)
		// says too little to move it by; one within offsetTrip always measures.
		trip := now.Sub(sent)
		if !s.offsetSet || trip < s.minTrip {
			s.minTrip = trip
		}
		if !s.offsetSet || trip <= max(offsetTrip, 2*s.minTrip) {
			s.offset, s.offsetSet = dbNow.Sub(sent.Add(trip/2)), true
		}
	}
	if s.live != others+1 {
		s.log.Info("budget share changed", zap.String("key", s.cfg.KeyLabel), zap.Int("instances", others+1),
			zap.Float64("per_second", s.total()*s.factor/float64(others+1)))
	}
	s.live, s.rank = others+1, rank
	if coolMS > 0 {
		// Capped at a day: a cool-down set for year 9999 would overflow time.Duration into the
		// past and be ignored; the next heartbeat reads it again.
		if until := now.Add(time.Duration(min(coolMS, float64(24*time.Hour/time.Millisecond)) * float64(time.Millisecond))); until.After(s.coolTill) {
			s.coolTill = until
		}
	}
	s.apply()
	if !s.cfg.Adaptive {
		return nil
	}
	waited := s.waited.Load()
	held := waited > s.waitedAt
	s.waitedAt = waited
	used := s.used.Load()
	busy := !s.beatAt.IsZero() && float64(used-s.beatUsed) >= busyShare*s.perSec*now.Sub(s.beatAt).Seconds()
	s.beatUsed, s.beatAt = used, now
	cuts := s.cuts
	s.mu.Unlock()
	rate, slow, err := s.probe(ctx, now, held, busy)
	s.mu.Lock()
	if err != nil {
		return err
	}
	if s.cuts != cuts {
		return nil // a cut made while the probe ran is newer than what it read
	}
	s.learned, s.slowStart = rate, slow
	s.apply()
	s.cfg.Probed.Signal(Probe{Rate: rate, SlowStart: slow, Busy: busy})
	return nil
}
