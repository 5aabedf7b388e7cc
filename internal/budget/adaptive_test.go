package budget

import (
	"context"
	"math"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// adaptive is a process's configuration with an adaptive share under ceiling.
func adaptive(name string, ceiling float64) Config {
	cfg := procConfig(name, ceiling)
	cfg.Adaptive = true
	return cfg
}

// newLimitedCluster is a database and a simulator that allows limit requests/s per key (0:
// no limit) and answers the rate limit with status (0: 429).
func newLimitedCluster(t *testing.T, limit float64, status int) *cluster {
	t.Helper()
	pool, _ := storetest.NewPool(t)
	sim := neoplesim.New(neoplesim.Options{Items: 5, Seed: 3, MarketKey: marketKey, Rate: limit, RateLimitStatus: status})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	client, err := provider.NewClient(provider.ClientConfig{
		Workload: provider.WorkloadMarket, BaseURL: srv.URL, Key: marketKey,
		Rate: 100000, Burst: 10000, PerMinute: 100000000, AuctionLimit: 1,
	})
	if err != nil {
		t.Fatal(err)
	}
	return &cluster{pool: pool, sim: sim, client: client, item: sim.Catalog()[0].ItemID, label: KeyLabel("market", marketKey)}
}

// Two processes configured for 500/s against a provider that allows 40/s: the shared rate is
// cut on the provider's answers and settles near its real limit, which the cluster then uses
// without being refused more than rarely. (The figures against 5, 50 and 400/s are in
// BENCHMARKS.md.)
func TestAdaptiveRateConvergesOnTheProvidersRealLimit(t *testing.T) {
	const limit, ceiling = 40.0, 500.0
	c := newCluster(t)
	r := c.fakeRun(t, limit)
	a := r.join(adaptive("a", ceiling), 8)
	b := r.join(adaptive("b", ceiling), 8)
	r.until(60*time.Second, "the learned rate to come down near the limit", func() bool {
		return a.share.Stats().ClusterRate < 1.5*limit && b.share.Stats().ClusterRate < 1.5*limit
	})
	var learned float64
	if err := c.pool.QueryRow(context.Background(), `SELECT rate FROM budget_rates WHERE key_label = $1`, c.label).Scan(&learned); err != nil {
		t.Fatal(err)
	}
	if learned >= ceiling*0.97 || learned < 1 {
		t.Fatalf("budget_rates holds %v, want a learned rate under the ceiling", learned)
	}
	r.runFor(3 * time.Second)
	start := r.toSecond()
	r.prov.reset()
	r.runFor(10 * time.Second)
	served := float64(r.prov.total-r.prov.refused) / r.clk.Now().Sub(start).Seconds()
	refused := float64(r.prov.refused) / float64(max(r.prov.total, 1))
	t.Logf("served %.1f/s of %v (%.0f%%), %.1f%% refused, learned %.1f/s, cuts %d+%d",
		served, limit, 100*served/limit, 100*refused, a.share.Stats().ClusterRate, a.share.Stats().Cuts, b.share.Stats().Cuts)
	if served < 0.7*limit {
		t.Errorf("served %.1f/s, want at least 70%% of the real limit %v/s", served, limit)
	}
	if refused > 0.05 {
		t.Errorf("%.1f%% of requests refused after convergence, want at most 5%%", 100*refused)
	}
}

// Without rate-limit answers the rate stays at the ceiling; one answer cuts it for every
// process, and further answers within the hold do not cut again.
func TestOneCutPerHoldForTheWholeCluster(t *testing.T) {
	r := newCluster(t).fakeRun(t, 0)
	a := r.join(adaptive("a", 100), 0)
	b := r.join(adaptive("b", 100), 0)
	r.until(15*time.Second, "both live", func() bool { return a.share.Stats().Live == 2 && b.share.Stats().Live == 2 })
	if r := a.share.Stats().ClusterRate; r < 96 || r > 97.01 {
		t.Fatalf("cluster rate %v before any answer, want the ceiling 97", r)
	}
	ctx := context.Background()
	a.share.RateLimited(ctx, 0, "test: API002")
	a.share.RateLimited(ctx, 0, "test: API002")
	b.share.RateLimited(ctx, 0, "test: API002")
	cut := DefaultDecrease * 97
	if got := a.share.Stats().ClusterRate; got < cut-1 || got > cut+0.5 {
		t.Fatalf("after one cut: %v, want %v × 97", got, DefaultDecrease)
	}
	b.share.heartbeat(ctx)
	if got := b.share.Stats().ClusterRate; got >= cut+1 {
		t.Fatalf("the other process reads %v after its heartbeat, want the cut %v", got, cut)
	}
	if a.share.CooldownRemaining() != 0 {
		t.Fatal("without Retry-After the cut is the back-off; no cool-down expected")
	}
	if a.share.Stats().Cuts+b.share.Stats().Cuts != 1 {
		t.Fatalf("cuts %d + %d, want one for the cluster", a.share.Stats().Cuts, b.share.Stats().Cuts)
	}
	b.share.RateLimited(ctx, 2*time.Second, "test: API002 with Retry-After")
	if b.share.CooldownRemaining() == 0 {
		t.Fatal("a Retry-After must still be honoured")
	}
}

// A process whose shared cut the database refuses (here its table is gone) still cuts its own
// rate by the same factor: the provider's answer is heeded whether or not the others hear of it.
func TestACutTheDatabaseRefusesIsMadeLocally(t *testing.T) {
	c := newCluster(t)
	r := c.fakeRun(t, 0)
	a := r.join(adaptive("a", 100), 0)
	r.until(15*time.Second, "the process live", func() bool { return a.share.Stats().Live == 1 })
	before := a.share.Stats().ClusterRate
	if _, err := c.pool.Exec(context.Background(), `ALTER TABLE budget_rates RENAME TO budget_rates_gone`); err != nil {
		t.Fatal(err)
	}
	a.share.RateLimited(context.Background(), 0, "test: API002")
	st := a.share.Stats()
	if want := before * DefaultDecrease; st.Cuts != 1 || math.Abs(st.ClusterRate-want) > 0.01 {
		t.Fatalf("after a cut the database refused: rate %v, %d cuts; want %v × %v = %v, one cut",
			st.ClusterRate, st.Cuts, before, DefaultDecrease, want)
	}
}

// aheadClock is a host's wall clock an hour fast.
type aheadClock struct{}

func (aheadClock) Now() time.Time                         { return time.Now().Add(time.Hour) }
func (aheadClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// A process whose clock runs an hour fast stamps the key's shared rate with the database's
// time, not its own: a stamp in the others' future would keep every other process from
// raising the rate (stuck in slow start) or cutting it for that hour, even after it died.
func TestASkewedClockDoesNotStampTheSharedRateInTheFuture(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	cfg := adaptive("skewed", 100)
	cfg.KeyLabel, cfg.Clock, cfg.SlowStart, cfg.SlowStartShare = c.label, aheadClock{}, true, SlowStartShareDefault
	s, err := New(c.pool, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	future := func(what string) {
		t.Helper()
		var ahead bool
		if err := c.pool.QueryRow(ctx, `SELECT changed_at > now() + interval '1 minute' OR coalesce(cut_at > now() + interval '1 minute', false)
			FROM budget_rates WHERE key_label = $1`, c.label).Scan(&ahead); err != nil {
			t.Fatal(err)
		}
		if ahead {
			t.Fatalf("after the skewed process's %s the shared rate is stamped in the future", what)
		}
	}
	if _, _, err := s.probe(ctx, s.clock.Now(), true, true); err != nil {
		t.Fatal(err)
	}
	future("first heartbeat")
	s.cut(ctx, "test")
	future("cut")
	// Another process on the database's time takes the next step: the slow start's cut leaves a
	// recovery it may ramp once a heartbeat has passed by the database's clock.
	var before float64
	if err := c.pool.QueryRow(ctx, `SELECT rate FROM budget_rates WHERE key_label = $1`, c.label).Scan(&before); err != nil {
		t.Fatal(err)
	}
	if _, err := c.pool.Exec(ctx, `SELECT pg_sleep($1::float8)`, cfg.Heartbeat.Seconds()); err != nil {
		t.Fatal(err)
	}
	other := adaptive("other", 100)
	other.KeyLabel = c.label
	o, err := New(c.pool, other, nil)
	if err != nil {
		t.Fatal(err)
	}
	rate, _, err := o.probe(ctx, o.clock.Now(), true, true)
	if err != nil || rate <= before {
		t.Fatalf("the other process's step: rate %v (was %v), %v; want it raised", rate, before, err)
	}
}

func (aheadClock) realTime() {}

// A process whose clock runs an hour and a half second fast counts its quota in the database's
// seconds, as every other process of the key does: counted in its own, it would spend its share
// of second s in parts of s and s+1 that the others spend too.
func TestASkewedClockCountsTheDatabasesSeconds(t *testing.T) {
	c := newCluster(t)
	ctx := context.Background()
	cfg := adaptive("skewed-seconds", 100)
	cfg.KeyLabel = c.label
	cfg.Clock = halfAhead{}
	s, err := New(c.pool, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.beat(ctx); err != nil {
		t.Fatal(err)
	}
	var db time.Time
	before := s.clock.Now()
	if err := c.pool.QueryRow(ctx, `SELECT clock_timestamp()`).Scan(&db); err != nil {
		t.Fatal(err)
	}
	after := s.clock.Now()
	s.mu.Lock()
	at := before.Add(after.Sub(before) / 2).Add(s.offset)
	s.mu.Unlock()
	// A round trip on a loaded machine is well under the 400 ms this allows; the skew is 90 min.
	if d := at.Sub(db); d < -400*time.Millisecond || d > 400*time.Millisecond {
		t.Fatalf("the share's view of the database's clock is %s off it, want within a round trip", d)
	}
}

// halfAhead is a host's wall clock an hour and a half second fast.
type halfAhead struct{}

func (halfAhead) Now() time.Time                         { return time.Now().Add(time.Hour + 500*time.Millisecond) }
func (halfAhead) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (halfAhead) realTime()                              {}

// A second already counted is never counted again when a new measure of the offset moves the
// share's view of the database's clock back: its quota would be granted twice.
func TestTheQuotasSecondNeverGoesBack(t *testing.T) {
	s := &Share{clock: halfAhead{}, milli: 10_000, live: 1}
	now := time.Date(2026, 12, 5, 12, 0, 0, 100e6, time.UTC) // early in its second: not the quiet tenth
	if d := s.grant(now); d != 0 {
		t.Fatalf("first grant waited %s", d)
	}
	first := s.qSec
	s.offset = -time.Second // the next heartbeat measured the clock a second further back
	s.rollover(now.Add(10 * time.Millisecond))
	if s.qSec != first || s.qUsed != 1 {
		t.Fatalf("after the offset moved back: counting second %d with %d used; want second %d still, its 1 grant kept", s.qSec, s.qUsed, first)
	}
}

// A step back of seconds (the host's clock set back, before a heartbeat has measured it) starts
// the count over instead of waiting it out, and no wait the share asks for is longer than a
// second: the caller sleeps on its own clock, which the step moved.
func TestAClockSetBackNeitherStallsNorWaitsLong(t *testing.T) {
	s := &Share{clock: halfAhead{}, milli: 1_000, live: 1} // one request a second
	now := time.Date(2026, 12, 5, 12, 0, 0, 100e6, time.UTC)
	if d := s.grant(now); d != 0 {
		t.Fatalf("first grant waited %s", d)
	}
	if d := s.grant(now.Add(10 * time.Millisecond)); d <= 0 || d > time.Second {
		t.Fatalf("the second's quota used up: wait %s, want at most a second", d)
	}
	s.inflight = 0 // both answered
	s.offset = -5 * time.Second
	if d := s.grant(now.Add(20 * time.Millisecond)); d != 0 || s.qSec != now.Add(-5*time.Second).Unix() {
		t.Fatalf("after the clock went 5 s back: wait %s counting second %d; want a grant in the new second", d, s.qSec)
	}
}

// Rate-limit answers are told sparingly: every call in flight when a cool-down starts is
// refused too, so the cool-down is one line a minute counting the answers, and a cut that
// leaves the rate where it was (at the floor) says nothing.
func TestRateLimitAnswersAreLoggedSparingly(t *testing.T) {
	c := newCluster(t)
	clk := newFakeClock()
	core, logs := observer.New(zapcore.InfoLevel)
	cfg := procConfig("a", 100)
	cfg.KeyLabel, cfg.Clock = c.label, clk
	s, err := New(c.pool, cfg, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cooling := func() []observer.LoggedEntry { return logs.FilterMessageSnippet("cooling down").All() }
	for range 10 {
		s.RateLimited(ctx, time.Second, "test: API002")
	}
	if n := len(cooling()); n != 1 {
		t.Fatalf("%d cool-down lines for 10 answers within a second, want 1", n)
	}
	clk.Advance(time.Minute)
	s.RateLimited(ctx, time.Second, "test: API002")
	if lines := cooling(); len(lines) != 2 || lines[1].ContextMap()["answers"] != int64(10) {
		t.Fatalf("cool-down lines a minute later: %v; want a second one counting 10 answers", lines)
	}

	floor := adaptive("b", 100)
	floor.KeyLabel, floor.Clock, floor.MinRate = c.label+"-floor", clk, 97 // the ceiling: every cut stays there
	f, err := New(c.pool, floor, zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	f.RateLimited(ctx, 0, "test: API002")
	if n := logs.FilterMessageSnippet("rate cut").Len(); n != 0 || f.Stats().Cuts != 1 {
		t.Fatalf("%d cut lines for a cut at the floor (cuts %d), want none", n, f.Stats().Cuts)
	}
}
