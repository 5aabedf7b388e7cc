package budget

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/testsignal"
)

// slowStarter is an adaptive share with slow start on (the daemon's defaults: 1 % of the
// ceiling), heartbeating every 100 ms; probed, when initialised, hears its heartbeats.
func (r *fakeRun) slowStarter(name string, ceiling float64, workers int, probed *testsignal.Signal[Probe]) *proc {
	cfg := adaptive(name, ceiling)
	cfg.Heartbeat, cfg.SlowStart, cfg.SlowStartShare, cfg.Probed = 100*time.Millisecond, true, 0.01, probed
	return r.join(cfg, workers)
}

// beat is one heartbeat of p now, then a heartbeat's time passes.
func (r *fakeRun) beat(p *proc) {
	p.share.heartbeat(context.Background())
	r.clk.Advance(p.share.cfg.Heartbeat)
}

func newProbed(t *testing.T) *testsignal.Signal[Probe] {
	probed := &testsignal.Signal[Probe]{}
	probed.Init(t)
	return probed
}

// row is the key's budget_rates row.
func (c *cluster) row(t *testing.T) (rate float64, cutFrom *float64, slow bool) {
	t.Helper()
	err := c.pool.QueryRow(context.Background(), `SELECT rate, cut_from, slow_start FROM budget_rates WHERE key_label = $1`,
		c.label).Scan(&rate, &cutFrom, &slow)
	if err != nil {
		t.Fatal(err)
	}
	return rate, cutFrom, slow
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6*max(1, math.Abs(b)) }

func TestStartRateIsTheShareOfTheCeilingAtLeastMinRate(t *testing.T) {
	for _, tc := range []struct{ rate, share, want float64 }{
		{500, 0.01, 4.85},  // the defaults: 1 % of 500/s after 3 % headroom
		{20, 0.01, 0.5},    // never under MinRate
		{0.4, 0.01, 0.388}, // nor over the ceiling
		{100, 1, 97},       // share 1: slow start from the ceiling, i.e. none
	} {
		s, err := New(nil, Config{KeyLabel: "k", Instance: "i", Rate: tc.rate, Headroom: 0.03, Heartbeat: time.Second,
			Cooldown: time.Second, Adaptive: true, SlowStart: true, SlowStartShare: tc.share}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.startRate(); !near(got, tc.want) {
			t.Errorf("rate %v, share %v: start %v, want %v", tc.rate, tc.share, got, tc.want)
		}
		if st := s.Stats(); !st.SlowStart || !near(st.ClusterRate, tc.want) {
			t.Errorf("rate %v, share %v: before the first heartbeat %+v, want the start rate in slow start", tc.rate, tc.share, st)
		}
	}
}

// With nothing learned for the key a share starts at the conservative rate, which is no finding
// about the provider (the plan still assumes the whole budget), and does not raise it while
// nothing uses it.
func TestSlowStartBeginsLowAndDoesNotRaiseAnUnusedRate(t *testing.T) {
	c := newCluster(t)
	r := c.fakeRun(t, 0)
	probed := newProbed(t)
	a := r.slowStarter("a", 500, 0, probed)
	for i := range 10 {
		r.beat(a)
		if p := probed.Wait(t); !p.SlowStart || !near(p.Rate, 4.85) || p.Busy {
			t.Fatalf("heartbeat %d read %+v, want slow start at 4.85/s, unused", i, p)
		}
	}
	if rate, _, slow := c.row(t); !slow || !near(rate, 4.85) {
		t.Fatalf("budget_rates holds %v (slow start %v), want slow start at 4.85", rate, slow)
	}
	if f := a.share.LearnedShare(); f != 1 {
		t.Fatalf("learned share %v during slow start, want 1: nothing is learned yet", f)
	}
	if f, err := ReadLearnedShare(context.Background(), c.pool, Config{KeyLabel: c.label, Rate: 500, Headroom: 0.03, Adaptive: true}); err != nil || f != 1 {
		t.Fatalf("ReadLearnedShare %v, %v during slow start, want 1", f, err)
	}
	use, err := LiveUse(context.Background(), c.pool, time.Minute)
	if err != nil || len(use) != 1 || use[0].LearnedRate != nil || use[0].SlowStartRate == nil || !near(*use[0].SlowStartRate, 4.85) {
		t.Fatalf("status %+v, %v: want a slow start at 4.85/s and no learned rate", use, err)
	}
}

// rampBound fails the test when p's rate has more than doubled per second since began.
func (r *fakeRun) rampBound(p *proc, from float64, began time.Time) {
	r.t.Helper()
	st := p.share.Stats()
	if bound := from * math.Pow(2, r.clk.Now().Sub(began).Seconds()); st.ClusterRate > bound*1.001 {
		r.t.Fatalf("%s read %v %s after the start: more than doubled each second (%v)", p.name, st.ClusterRate, r.clk.Now().Sub(began), bound)
	}
}

// Served without refusal and used, the ramp grows (never by more than doubling per second since
// the row was written) up to the ceiling, where the slow start ends with nothing learned.
func TestSlowStartRampsWhileServedUpToTheCeiling(t *testing.T) {
	c := newCluster(t)
	r := c.fakeRun(t, 0)
	began := r.clk.Now()
	a := r.slowStarter("a", 500, 8, nil)
	last := 0.0
	r.onBeat = func(p *proc) {
		r.rampBound(p, 4.85, began)
		rate := p.share.Stats().ClusterRate
		if rate < last {
			t.Fatalf("rate fell from %v to %v with no refusal", last, rate)
		}
		last = rate
	}
	r.until(time.Minute, "the slow start to end", func() bool { return !a.share.Stats().SlowStart })
	if !near(last, 485) {
		t.Fatalf("slow start ended at %v without a refusal, want the ceiling 485", last)
	}
	if rate, cutFrom, slow := c.row(t); slow || !near(rate, 485) || cutFrom != nil {
		t.Fatalf("budget_rates holds %v (cut from %v, slow start %v), want the ceiling, no cut, slow start over", rate, cutFrom, slow)
	}
	if r.prov.refused != 0 || r.prov.total == 0 {
		t.Fatalf("provider answered %d, refused %d: want requests and no refusal", r.prov.total, r.prov.refused)
	}
}

// The first rate-limit answer ends the slow start: the ramp stops and the rate is cut to
// SlowStartCut of where it was; AIMD goes on from there.
func TestSlowStartStopsAndCutsAtTheFirstRefusal(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	r := c.fakeRun(t, 0)
	// A ramp that got to 80/s before this process joined.
	if _, err := c.pool.Exec(ctx, `INSERT INTO budget_rates (key_label, rate, slow_start, changed_at) VALUES ($1, 80, true, $2)`, c.label, r.clk.Now()); err != nil {
		t.Fatal(err)
	}
	probed := newProbed(t)
	a := r.slowStarter("a", 500, 0, probed)
	r.beat(a)
	if p := probed.Wait(t); !p.SlowStart || p.Rate != 80 {
		t.Fatalf("first heartbeat read %+v, want the shared ramp at 80", p)
	}
	a.share.RateLimited(ctx, 0, "test: API002")
	if st := a.share.Stats(); st.SlowStart || !near(st.ClusterRate, 80*SlowStartCut) || st.Cuts != 1 {
		t.Fatalf("after the first refusal %+v, want %v and slow start over", st, 80*SlowStartCut)
	}
	rate, cutFrom, slow := c.row(t)
	if slow || !near(rate, 80*SlowStartCut) || cutFrom == nil || *cutFrom != 80 {
		t.Fatalf("budget_rates holds %v (cut from %v, slow start %v), want %v cut from 80", rate, cutFrom, slow, 80*SlowStartCut)
	}
	for range 5 {
		r.beat(a)
		if p := probed.Wait(t); p.SlowStart || !near(p.Rate, 80*SlowStartCut) {
			t.Fatalf("heartbeat after the cut read %+v: the ramp must not resume", p)
		}
	}
	if f := a.share.LearnedShare(); !near(f, 80*SlowStartCut/485) {
		t.Fatalf("learned share %v, want %v", f, 80*SlowStartCut/485)
	}
}

// Against a provider allowing 40/s, a cold start ramps from 4.85/s and ends its slow start on
// the provider's answer, below the ceiling, with a cut recorded.
func TestColdStartAgainstALimitedProviderEndsItsSlowStart(t *testing.T) {
	c := newCluster(t)
	r := c.fakeRun(t, 40)
	a := r.slowStarter("a", 500, 8, nil)
	r.until(time.Minute, "the slow start to end", func() bool { return !a.share.Stats().SlowStart })
	rate, cutFrom, _ := c.row(t)
	if cutFrom == nil || *cutFrom <= 4.85 || rate >= 485 || a.share.Stats().Cuts == 0 {
		t.Fatalf("budget_rates holds %v cut from %v: want a ramp above the start cut on a refusal", rate, cutFrom)
	}
	t.Logf("slow start ended: %v cut from %v; %d of %d answers refused", rate, *cutFrom, r.prov.refused, r.prov.total)
	if r.prov.refused == 0 {
		t.Fatal("the slow start ended with no refusal from the provider")
	}
}

// A restart with a learned rate stored does not slow-start: it resumes at that rate.
func TestRestartWithALearnedRateSkipsSlowStart(t *testing.T) {
	c := newCluster(t)
	if _, err := c.pool.Exec(context.Background(), `INSERT INTO budget_rates (key_label, rate, cut_from, cut_at) VALUES ($1, 40, 57, now())`, c.label); err != nil {
		t.Fatal(err)
	}
	r := c.fakeRun(t, 0)
	probed := newProbed(t)
	a := r.slowStarter("a", 500, 0, probed)
	r.beat(a)
	if p := probed.Wait(t); p.SlowStart || p.Rate != 40 {
		t.Fatalf("first heartbeat read %+v, want the learned 40/s and no slow start", p)
	}
	if st := a.share.Stats(); st.SlowStart || st.ClusterRate != 40 {
		t.Fatalf("stats %+v, want the learned rate", st)
	}
}

// With slow start off, a key with nothing learned starts at the ceiling, as before.
func TestSlowStartOffStartsAtTheCeiling(t *testing.T) {
	r := newCluster(t).fakeRun(t, 0)
	probed := newProbed(t)
	cfg := adaptive("a", 500)
	cfg.Probed = probed
	r.beat(r.join(cfg, 0))
	if p := probed.Wait(t); p.SlowStart || !near(p.Rate, 485) {
		t.Fatalf("first heartbeat read %+v, want the ceiling", p)
	}
}

// Two processes starting together share one ramp: the cluster's rate grows no faster than one
// process's would (at most doubling per second), not once per process.
func TestTwoSharesOnOneKeyShareOneRamp(t *testing.T) {
	r := newCluster(t).fakeRun(t, 0)
	began := r.clk.Now()
	a := r.slowStarter("a", 500, 8, nil)
	b := r.slowStarter("b", 500, 8, nil)
	r.onBeat = func(p *proc) { r.rampBound(p, 4.85, began) }
	r.until(time.Minute, "both shares to end their slow start", func() bool {
		return !a.share.Stats().SlowStart && !b.share.Stats().SlowStart
	})
	if ra, rb := a.share.Stats().ClusterRate, b.share.Stats().ClusterRate; !near(ra, 485) || !near(rb, 485) {
		t.Fatalf("cluster rates %v and %v after the ramp, want both at the ceiling", ra, rb)
	}
	if a.share.Stats().Live != 2 || b.share.Stats().Live != 2 {
		t.Fatal("both shares must have counted each other")
	}
}

// After the cut that ends a slow start, a process held back by the budget doubles the rate back
// (at most per second) to half the refused rate, the rate the ramp had passed, and no further:
// from there AIMD's additive steps go on. The cut's quarter alone would take AIMD ~25 s to climb.
func TestAfterTheSlowStartCutTheRateDoublesBackToHalfTheRefusedRate(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	r := c.fakeRun(t, 0)
	if _, err := c.pool.Exec(ctx, `INSERT INTO budget_rates (key_label, rate, slow_start, changed_at) VALUES ($1, 80, true, $2)`, c.label, r.clk.Now()); err != nil {
		t.Fatal(err)
	}
	a := r.slowStarter("a", 500, 8, nil) // 8 workers: always held back at 20-40/s
	r.step()
	if st := a.share.Stats(); !st.SlowStart || st.ClusterRate != 80 {
		t.Fatalf("first heartbeat read %+v, want the shared ramp at 80", st)
	}
	cutAt := r.clk.Now()
	a.share.RateLimited(ctx, 0, "test: API002")
	if st := a.share.Stats(); st.SlowStart || !near(st.ClusterRate, 80*SlowStartCut) {
		t.Fatalf("after the first refusal %+v, want %v", st, 80*SlowStartCut)
	}
	last, above := 0.0, -1
	r.onBeat = func(p *proc) {
		rate := p.share.Stats().ClusterRate
		if above < 0 {
			r.rampBound(p, 20, cutAt)
			if rate > 40*1.000001 && last < 40*0.999999 {
				t.Fatalf("rate jumped from %v past half the refused rate to %v", last, rate)
			}
		} else if rate < last || rate > last+DefaultIncrease*80*0.2+1e-9 {
			// From half the refused rate on, AIMD: one step of Increase × 80 per heartbeat second at most.
			t.Fatalf("rate went from %v to %v: want additive steps of at most %v per heartbeat above half the refused rate", last, rate, DefaultIncrease*80*0.2)
		}
		last = rate
		if near(rate, 40) || above >= 0 {
			above++
		}
	}
	r.until(time.Minute, "half the refused rate and four heartbeats more", func() bool { return above >= 4 })
	if rate, cutFrom, slow := c.row(t); slow || cutFrom == nil || *cutFrom != 80 || rate < 40 {
		t.Fatalf("budget_rates holds %v cut from %v (slow start %v)", rate, cutFrom, slow)
	}
}
