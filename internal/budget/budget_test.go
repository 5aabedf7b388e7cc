package budget

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap/zaptest"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

const marketKey = "budget-test-market-key"

type cluster struct {
	pool   *pgxpool.Pool
	sim    *neoplesim.Server
	client *provider.Client
	item   string
	label  string
}

func newCluster(t *testing.T) *cluster { return newLimitedCluster(t, 0, 0) }

// hb is the heartbeat of the tests' processes.
const hb = 500 * time.Millisecond

// procConfig is a process's configuration sharing a budget of rate per second.
func procConfig(name string, rate float64) Config {
	return Config{Rate: rate, Headroom: 0.03, Heartbeat: hb, Cooldown: time.Second, Instance: name}
}

// Three processes on one key with a budget of 100/s: the provider never serves more than 100
// in any second, and the shares add up to more than any one process's share could (how close
// to the budget they get is a speed figure: make bench's budget-fidelity row).
func TestThreeProcessesShareOneKeyBudget(t *testing.T) {
	const budget = 100.0
	r := newCluster(t).fakeRun(t, 0)
	var ps []*proc
	for i := range 3 {
		ps = append(ps, r.join(procConfig(fmt.Sprintf("p%d", i), budget), 16))
	}
	r.until(15*time.Second, "all three live and sending", func() bool {
		for _, p := range ps {
			if p.share.Stats().Live != 3 {
				return false
			}
		}
		return r.prov.total > 0
	})
	start := r.toSecond()
	r.prov.reset()
	r.runFor(8 * time.Second)
	rate := float64(r.prov.total) / r.clk.Now().Sub(start).Seconds()
	t.Logf("served %d in 8 s: %.1f/s (%.1f%% of the budget); busiest second %d", r.prov.total, rate, 100*rate/budget, r.prov.busiest())
	if r.prov.busiest() > budget {
		t.Errorf("%d requests in one second, budget %v", r.prov.busiest(), budget)
	}
	if rate <= budget/2 {
		t.Errorf("%.1f/s served, want more than half of %v/s: the processes do not pool their shares", rate, budget)
	}
}

// Processes joining and leaving never push the key over its budget: a newcomer waits until the
// others have lowered their shares; a leaver's share is taken over on the next heartbeat.
func TestJoiningAndLeavingStayWithinBudget(t *testing.T) {
	const budget = 60.0
	r := newCluster(t).fakeRun(t, 0)
	a := r.join(procConfig("a", budget), 8)
	b := r.join(procConfig("b", budget), 8)
	r.until(15*time.Second, "two live and sending", func() bool {
		return a.share.Stats().Live == 2 && b.share.Stats().Live == 2 && r.prov.total > 0
	})
	r.prov.reset()
	d := r.join(procConfig("c", budget), 8)
	r.until(15*time.Second, "the newcomer sending", func() bool { return d.share.Stats().Used > 0 })
	r.leave(b)
	// A clean stop takes the row away at once: the others count it out at their next heartbeat,
	// not after 3 beats of it ageing.
	var left int
	if err := r.c.pool.QueryRow(context.Background(), `SELECT count(*) FROM collector_instances WHERE key_label = $1 AND instance = 'b'`,
		r.c.label).Scan(&left); err != nil || left != 0 {
		t.Fatalf("the leaver's row: %d left, %v; want it deleted", left, err)
	}
	r.until(hb+runStep, "the others to take over the leaver's share at their next heartbeat", func() bool {
		return a.share.Stats().Live == 2 && d.share.Stats().Live == 2
	})
	before := a.share.Stats().Used + d.share.Stats().Used
	t0 := r.clk.Now()
	r.toSecond()
	r.runFor(2 * time.Second)
	after := a.share.Stats().Used + d.share.Stats().Used
	t.Logf("busiest second %d; after the leave %.1f/s", r.prov.busiest(), float64(after-before)/r.clk.Now().Sub(t0).Seconds())
	if r.prov.busiest() > budget {
		t.Errorf("%d requests in one second while processes joined and left, budget %v", r.prov.busiest(), budget)
	}
}

// A process killed without a word (no leave: its row stays) stops counting once its last
// heartbeat is 3 beats old, and the others take its share at their next heartbeat.
func TestADeadProcessesShareIsTakenOver(t *testing.T) {
	const budget = 60.0
	c := newCluster(t)
	r := c.fakeRun(t, 0)
	a := r.join(procConfig("a", budget), 8)
	b := r.join(procConfig("b", budget), 8)
	dead := r.join(procConfig("c", budget), 8)
	r.until(15*time.Second, "three live and sending", func() bool {
		return a.share.Stats().Live == 3 && b.share.Stats().Live == 3 && r.prov.total > 0
	})
	third := a.share.Stats().PerSecond
	dead.gone = true // SIGKILL: no more heartbeats, no leave
	c.ageRow(t, "c")
	r.until(hb+runStep, "the others to count the dead process out at their next heartbeat", func() bool {
		return a.share.Stats().Live == 2 && b.share.Stats().Live == 2
	})
	for _, p := range []*proc{a, b} {
		if got, want := p.share.Stats().PerSecond, third*3/2; math.Abs(got-want) > 1e-9 {
			t.Errorf("%s's share %.3f/s after the death, want %.3f/s (half, from a third)", p.name, got, want)
		}
	}
	r.prov.reset()
	r.toSecond()
	r.runFor(2 * time.Second)
	if r.prov.busiest() > budget {
		t.Errorf("%d requests in one second after the takeover, budget %v", r.prov.busiest(), budget)
	}
}

// A process frozen (a paused VM, SIGSTOP) or cut off from the database for 3 heartbeats is
// counted out, and the others raise their shares until their next heartbeat. When its
// heartbeat succeeds again it rejoins as a newcomer joins, sending nothing for 2 heartbeats:
// sending at once put its share and theirs on the key together.
func TestAProcessCountedOutRejoinsAsANewcomerDoes(t *testing.T) {
	const budget = 60.0
	c := newCluster(t)
	r := c.fakeRun(t, 0)
	a := r.join(procConfig("a", budget), 8)
	b := r.join(procConfig("b", budget), 8)
	r.until(15*time.Second, "two live and sending", func() bool {
		return a.share.Stats().Live == 2 && b.share.Stats().Live == 2 && b.share.Stats().Used > 0
	})
	b.gone = true // frozen: no heartbeat, no request
	c.ageRow(t, "b")
	r.until(hb+runStep, "a to count b out", func() bool { return a.share.Stats().Live == 1 })
	// b's clock runs on while it is stopped (Linux's monotonic clock does). Once resumed, its
	// workers wake before its overdue heartbeat has come back (its round trip), some holding
	// limiter tokens they reserved before the stop.
	r.runFor(3 * hb)
	b.gone, b.beatAt = false, r.clk.Now().Add(50*time.Millisecond)
	used, resumed := b.share.Stats().Used, r.clk.Now()
	r.until(2*hb+time.Second, "b to send again", func() bool { return b.share.Stats().Used > used })
	if waited := r.clk.Now().Sub(resumed); waited < 2*hb {
		t.Errorf("b sent again %s after its heartbeat came back; want %s, for a to count it again first", waited, 2*hb)
	}
	if live := a.share.Stats().Live; live != 2 {
		t.Errorf("when b sent again, a counted %d live processes, want 2", live)
	}
}

// ageRow ages instance's live-instance row by the 3 heartbeats after which the others count it
// out: liveness runs on the database's clock, which the fake run does not move.
func (c *cluster) ageRow(t *testing.T, instance string) {
	t.Helper()
	if _, err := c.pool.Exec(context.Background(), `UPDATE collector_instances
		SET heartbeat_at = heartbeat_at - $1 * interval '1 millisecond' WHERE key_label = $2 AND instance = $3`,
		(3 * hb).Milliseconds(), c.label, instance); err != nil {
		t.Fatal(err)
	}
}

// A rate-limit answer seen by one process cools the key down for all of them.
func TestCooldownIsShared(t *testing.T) {
	r := newCluster(t).fakeRun(t, 0)
	a := r.join(procConfig("a", 50), 0)
	b := r.join(procConfig("b", 50), 0)
	r.until(15*time.Second, "both live", func() bool { return a.share.Stats().Live == 2 && b.share.Stats().Live == 2 })
	a.share.RateLimited(context.Background(), 5*time.Second, "test: API002")
	if a.share.CooldownRemaining() == 0 {
		t.Fatal("the process that saw the answer is not cooling down")
	}
	b.share.heartbeat(context.Background())
	if got := b.share.CooldownRemaining(); got <= 3*time.Second {
		t.Fatalf("the other process cools down %s after its heartbeat, want the shared 5 s", got)
	}
	if d, err := b.share.admit(&attempt{}, r.clk.Now(), 0); err != nil || d <= 3*time.Second {
		t.Fatalf("asking during the cool-down: wait %s, %v; want to wait it out", d, err)
	}
}

// Per process the quota carries fractions (q per second on average); across N processes at
// ranks 0..N-1 the seconds never hold more than ⌈N·q⌉.
func TestQuotaCarriesFractionsAndStaggersThem(t *testing.T) {
	for _, tc := range []struct {
		total float64
		n     int
	}{{97, 3}, {58.2, 2}, {2, 3}, {100, 7}, {0.5, 1}} {
		q := tc.total / float64(tc.n)
		milli := int64(tc.total * 1000)
		sums := make([]int, tc.n)
		for sec := int64(1_700_000_000); sec < 1_700_000_100; sec++ {
			all := 0
			for r := range tc.n {
				k := quota(milli, tc.n, sec, r)
				sums[r] += k
				all += k
			}
			if float64(all) > math.Ceil(tc.total) {
				t.Fatalf("total %v over %d processes: second %d carries %d", tc.total, tc.n, sec, all)
			}
		}
		for r, sum := range sums {
			if want := q * 100; float64(sum) < want-1 || float64(sum) > want+1 {
				t.Fatalf("total %v, rank %d: 100 seconds carry %d, want about %.0f", tc.total, r, sum, want)
			}
		}
	}
}

// A cool-down's reason is provider text: hostile bytes are stored clean, never refused.
func TestCooldownReasonIsStoredClean(t *testing.T) {
	c := newCluster(t)
	s, err := New(c.pool, Config{KeyLabel: c.label, Rate: 10, Heartbeat: time.Second, Cooldown: time.Second, Instance: "a"}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range neoplesim.HostileTexts() {
		s.RateLimited(context.Background(), time.Second, "API002 "+h.Text)
		var reason string
		if err := c.pool.QueryRow(context.Background(), `SELECT reason FROM budget_cooldowns WHERE key_label = $1`, c.label).Scan(&reason); err != nil {
			t.Fatal(err)
		}
		if !utf8.ValidString(reason) || strings.ContainsRune(reason, 0) || utf8.RuneCountInString(reason) > provider.MaxErrorRunes+1 {
			t.Fatalf("%s: cool-down reason stored unclean: %q", h.Name, reason)
		}
		if !strings.HasPrefix(reason, "API002 ") {
			t.Fatalf("%s: cool-down reason %q lost its start", h.Name, reason)
		}
	}
}

// A bad value is refused naming the configuration key it comes from, not replaced by a default.
func TestNewRefusesBadValuesNamingTheirKey(t *testing.T) {
	good := Config{KeyLabel: "market:x", Instance: "a", Rate: 10, Heartbeat: time.Second, Cooldown: time.Second}
	if _, err := New(nil, good, nil); err != nil {
		t.Fatalf("a good config refused: %v", err)
	}
	for _, tc := range []struct {
		key  string
		edit func(*Config)
	}{
		{"provider.market.rate", func(c *Config) { c.Rate = 0 }},
		{"budget Config.Heartbeat", func(c *Config) { c.Heartbeat = 0 }},
		{"budget Config.Cooldown", func(c *Config) { c.Cooldown = -time.Second }},
		{"Decrease", func(c *Config) { c.Decrease = 1.5 }},
		{"MinRate", func(c *Config) { c.MinRate = -1 }},
	} {
		cfg := good
		tc.edit(&cfg)
		_, err := New(nil, cfg, nil)
		if err == nil || !strings.Contains(err.Error(), tc.key) {
			t.Errorf("%s out of range: error %v, want one naming %s", tc.key, err, tc.key)
		}
	}
}

// The heartbeat is a write: one refused for lack of space marks the write health refused.
func TestHeartbeatReportsToWriteHealth(t *testing.T) {
	c := newCluster(t)
	wh, full := storetest.WatchWrites(t, store.CauseDiskFull)
	free := storetest.FillDisk(t, c.pool, "collector_instances")
	defer free()
	cfg := procConfig("a", 10)
	cfg.WriteHealth = wh
	c.fakeRun(t, 0).join(cfg, 0).share.heartbeat(context.Background())
	full.WaitWithin(t, time.Minute)
}

// A heartbeat that times out waiting for a pooled connection (slow reads hold them all) says
// nothing of the database: it leaves the write health writable, where reporting it as
// unreachable held every provider call and turned /readyz 503 once a second.
func TestAHeartbeatStarvedOfConnectionsReportsNoRefusal(t *testing.T) {
	c := newCluster(t)
	small, err := store.Open(context.Background(), store.PoolConfig{URL: c.pool.Config().ConnString(), MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(small.Close)
	starved := *c
	starved.pool = small
	wh := store.NewWriteHealth()
	cfg := procConfig("a", 10)
	cfg.WriteHealth = wh
	p := starved.fakeRun(t, 0).join(cfg, 0)
	held, err := small.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer held.Release()
	p.share.heartbeat(context.Background()) // waits out its 5 s bound for the one connection
	if s := wh.State(); !s.Writable {
		t.Fatalf("write health %+v after a heartbeat starved of connections, want writable", s)
	}
}

// Run heartbeats on its clock, and lets requests go once the others have had two heartbeats
// to count the process; it deregisters when it ends.
func TestRunHeartbeatsOnItsClockAndOpensAfterTheJoinDelay(t *testing.T) {
	c := newCluster(t)
	clk := newFakeClock()
	cfg := procConfig("a", 10)
	cfg.KeyLabel, cfg.Clock = c.label, clk
	s, err := New(c.pool, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan struct{})
	go func() { s.Start(ctx); close(ended) }()
	live := func() int {
		is, err := LiveInstances(context.Background(), c.pool, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return len(is)
	}
	for i := range 3 {
		testkit.Recv(t, clk.waiting, testkit.Timeout, "Run to sleep until its next heartbeat")
		if live() != 1 {
			t.Fatalf("heartbeat %d: no row in collector_instances", i)
		}
		select {
		case <-s.ready:
			if i < 2 {
				t.Fatalf("requests allowed after %d heartbeats, before the join delay", i+1)
			}
		default:
			if i == 2 {
				t.Fatal("requests still held after the join delay")
			}
		}
		clk.Advance(hb)
	}
	cancel()
	testkit.Recv(t, ended, testkit.Timeout, "Run to end")
	if live() != 0 {
		t.Fatal("Run left its row behind")
	}
}

// A process that died without a word leaves its row behind; a live one's heartbeat deletes it
// once it is an hour old, and not before.
func TestADeadProcessesRowGoesAfterAnHour(t *testing.T) {
	c := newCluster(t)
	r := c.fakeRun(t, 0)
	ctx := context.Background()
	if _, err := c.pool.Exec(ctx, `INSERT INTO collector_instances (key_label, instance, heartbeat_at)
		VALUES ($1, 'dead-61m', now() - interval '61 minutes'), ($1, 'dead-59m', now() - interval '59 minutes')`, c.label); err != nil {
		t.Fatal(err)
	}
	beats := 0
	r.onBeat = func(*proc) { beats++ }
	r.join(procConfig("a", 60), 0)
	r.until(15*time.Second, "a heartbeat", func() bool { return beats > 0 })
	rows, _ := c.pool.Query(ctx, `SELECT instance FROM collector_instances WHERE key_label = $1 ORDER BY instance`, c.label)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(left, []string{"a", "dead-59m"}) {
		t.Fatalf("rows after a heartbeat: %v; want the hour-old one gone and the other kept", left)
	}
}
