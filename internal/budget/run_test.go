package budget

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"golang.org/x/time/rate"
)

// fakeProvider answers requests on the fake clock: it counts them per second, the unit a
// provider counts in, and, with a limit, refuses those its token bucket (burst one second's
// worth, as neoplesim's) has no token for.
type fakeProvider struct {
	lim            *rate.Limiter // nil: no limit
	perSec         map[int64]int
	total, refused int
}

func newFakeProvider(limit float64) *fakeProvider {
	p := &fakeProvider{perSec: map[int64]int{}}
	if limit > 0 {
		p.lim = rate.NewLimiter(rate.Limit(limit), max(1, int(math.Ceil(limit))))
	}
	return p
}

// answer is one request arriving at now; false: refused as over the limit.
func (p *fakeProvider) answer(now time.Time) bool {
	p.total++
	p.perSec[now.Unix()]++
	if p.lim != nil && !p.lim.AllowN(now, 1) {
		p.refused++
		return false
	}
	return true
}

func (p *fakeProvider) reset() { p.perSec, p.total, p.refused = map[int64]int{}, 0, 0 }

func (p *fakeProvider) busiest() int {
	most := 0
	for _, n := range p.perSec {
		most = max(most, n)
	}
	return most
}

// fakeRun runs processes sharing one key on a fake clock, as discrete events: every Heartbeat
// a process's share heartbeats (Run's pass); each of its workers asks the share for a request
// (admit), and a granted request reaches the provider after half its latency and is answered
// after all of it, a refusal reported to the share as the daemon's Fetcher does. Latencies are
// drawn from a seeded source, a few of them long, as on a loaded machine: what the wall clock
// does to a real run, without its waiting or its luck.
type fakeRun struct {
	t     *testing.T
	c     *cluster
	clk   *fakeClock
	prov  *fakeProvider
	rng   *rand.Rand
	procs []*proc
	// onBeat, when set, hears each heartbeat after it (the test's checks).
	onBeat func(*proc)
}

type proc struct {
	name    string
	share   *Share
	workers []worker
	beatAt  time.Time
	gone    bool
}

// worker is one caller: idle since `since`, asking again at tryAt; or with a request in flight
// (done set) that arrives at arriveAt and is answered at doneAt.
type worker struct {
	since, tryAt     time.Time
	arriveAt, doneAt time.Time
	arrived, refused bool
	done             func()
	attempt          attempt // WaitWithin's, step by step
}

const runStep = time.Millisecond

func (c *cluster) fakeRun(t *testing.T, limit float64) *fakeRun {
	return &fakeRun{t: t, c: c, clk: newFakeClock(), prov: newFakeProvider(limit), rng: rand.New(rand.NewPCG(1, 2))}
}

// join starts a process with cfg (its clock the run's) and workers callers; it heartbeats at
// once.
func (r *fakeRun) join(cfg Config, workers int) *proc {
	r.t.Helper()
	cfg.KeyLabel, cfg.Clock = r.c.label, r.clk
	s, err := New(r.c.pool, cfg, zaptest.NewLogger(r.t, zaptest.Level(zap.ErrorLevel)))
	if err != nil {
		r.t.Fatal(err)
	}
	p := &proc{name: cfg.Instance, share: s, beatAt: r.clk.Now(), workers: make([]worker, workers)}
	for i := range p.workers {
		p.workers[i].since = r.clk.Now()
	}
	r.procs = append(r.procs, p)
	return p
}

// leave stops a process as Run's end does: its row goes, its requests in flight are answered.
func (r *fakeRun) leave(p *proc) {
	p.gone = true
	p.share.leave(context.Background())
}

func (r *fakeRun) latency() time.Duration {
	if r.rng.IntN(50) == 0 {
		return time.Duration(500+r.rng.IntN(1000)) * time.Millisecond // scheduled late, or slow
	}
	return time.Duration(2+r.rng.IntN(40)) * time.Millisecond
}

// until runs until cond holds (checked after every step), failing the test after within.
func (r *fakeRun) until(within time.Duration, what string, cond func() bool) {
	r.t.Helper()
	end := r.clk.Now().Add(within)
	for !cond() {
		if !r.clk.Now().Before(end) {
			r.t.Fatalf("%s not reached within %s of the fake clock", what, within)
		}
		r.step()
	}
}

// runFor runs for d of the fake clock.
func (r *fakeRun) runFor(d time.Duration) {
	end := r.clk.Now().Add(d)
	for r.clk.Now().Before(end) {
		r.step()
	}
}

// toSecond runs until the start of the next second, the unit the provider counts in.
func (r *fakeRun) toSecond() time.Time {
	at := r.clk.Now().Truncate(time.Second).Add(time.Second)
	r.runFor(at.Sub(r.clk.Now()))
	return at
}

// step handles what is due now, then moves the clock on by runStep.
func (r *fakeRun) step() {
	ctx := context.Background()
	now := r.clk.Now()
	for _, p := range r.procs {
		if p.gone {
			continue
		}
		if !now.Before(p.beatAt) {
			p.share.heartbeat(ctx)
			p.beatAt = p.beatAt.Add(p.share.cfg.Heartbeat)
			if r.onBeat != nil {
				r.onBeat(p)
			}
		}
		for i := range p.workers {
			r.work(ctx, p.share, &p.workers[i], now)
		}
	}
	r.clk.Advance(runStep)
}

func (r *fakeRun) work(ctx context.Context, s *Share, w *worker, now time.Time) {
	if w.done != nil {
		if !w.arrived && !now.Before(w.arriveAt) {
			w.arrived, w.refused = true, !r.prov.answer(now)
		}
		if now.Before(w.doneAt) {
			return
		}
		w.done()
		w.done = nil
		if w.refused {
			s.RateLimited(ctx, 0, "fake provider: API002")
		}
		w.since, w.tryAt = now, now
	}
	select {
	case <-s.ready:
	default:
		return
	}
	if now.Before(w.tryAt) {
		return
	}
	d, err := s.admit(&w.attempt, now, 0)
	if err != nil {
		r.t.Fatalf("admit: %v", err)
	}
	if d > 0 {
		w.tryAt = now.Add(d)
		return
	}
	// What WaitWithin counts for a grant.
	s.waited.Add(int64(now.Sub(w.since)))
	s.used.Add(1)
	lat := r.latency()
	w.done, w.arrived, w.refused = s.done, false, false
	w.arriveAt, w.doneAt = now.Add(lat/2), now.Add(lat)
}
