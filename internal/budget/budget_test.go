package budget

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
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

type member struct {
	share *Share
	stop  context.CancelFunc
	wg    sync.WaitGroup
}

// join starts one process: its share heartbeating and `workers` callers that send as fast as
// the share lets them, each call a real request to the simulator.
func (c *cluster) join(t *testing.T, name string, rate float64, workers int) *member {
	t.Helper()
	return c.start(t, Config{KeyLabel: c.label, Rate: rate, Headroom: 0.03, Heartbeat: 500 * time.Millisecond, Cooldown: time.Second, Instance: name}, workers)
}

// start runs a share with cfg and its callers, which report rate-limit answers to it as the
// daemon does.
func (c *cluster) start(t *testing.T, cfg Config, workers int) *member {
	t.Helper()
	s, err := New(c.pool, cfg, zaptest.NewLogger(t, zaptest.Level(zap.ErrorLevel)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{share: s, stop: cancel}
	m.wg.Go(func() { _ = s.Run(ctx) })
	for range workers {
		m.wg.Go(func() {
			for {
				done, err := s.Wait(ctx)
				if err != nil {
					return
				}
				_, _, err = c.client.Auction(ctx, c.item)
				done()
				var pe *provider.Error
				if errors.As(err, &pe) && pe.Class == provider.ClassRateLimited {
					s.RateLimited(ctx, pe.RetryAfter, pe.Error())
				} else if err != nil && ctx.Err() == nil {
					t.Errorf("auction: %v", err)
					return
				}
			}
		})
	}
	t.Cleanup(m.leave)
	return m
}

func (m *member) leave() {
	m.stop()
	m.wg.Wait()
}

// untilSecond waits for the start of the wall-clock second after t0 + d, the unit the
// simulator counts in.
func untilSecond(t *testing.T, t0 time.Time, d time.Duration) time.Time {
	t.Helper()
	at := t0.Add(d).Truncate(time.Second).Add(time.Second)
	testkit.Eventually(t, d+5*time.Second, "the measurement second", func() bool { return !time.Now().Before(at) })
	return at
}

// Three processes on one key with a budget of 100/s: the simulator never serves more than 100
// in any wall-clock second, and the shares add up to more than any one process's share could
// (how close to the budget they get is a speed figure: make bench's budget-fidelity row).
func TestThreeProcessesShareOneKeyBudget(t *testing.T) {
	const budget = 100.0
	c := newCluster(t)
	var ms []*member
	for i := range 3 {
		ms = append(ms, c.join(t, fmt.Sprintf("p%d", i), budget, 16))
	}
	testkit.Eventually(t, 15*time.Second, "all three live and sending", func() bool {
		for _, m := range ms {
			if m.share.Stats().Live != 3 {
				return false
			}
		}
		return c.sim.KeyStats(marketKey).Total > 0
	})
	start := untilSecond(t, time.Now(), time.Second)
	c.sim.ResetStats()
	end := untilSecond(t, start, 8*time.Second-time.Millisecond)
	ks := c.sim.KeyStats(marketKey)
	rate := float64(ks.Total) / end.Sub(start).Seconds()
	t.Logf("served %d in %s: %.1f/s (%.1f%% of the budget); busiest second %d", ks.Total, end.Sub(start), rate, 100*rate/budget, ks.MaxPerSecond)
	if ks.MaxPerSecond > budget {
		t.Errorf("%d requests in one second, budget %v", ks.MaxPerSecond, budget)
	}
	if rate <= budget/2 {
		t.Errorf("%.1f/s served, want more than half of %v/s: the processes do not pool their shares", rate, budget)
	}
}

// Processes joining and leaving never push the key over its budget: a newcomer waits until the
// others have lowered their shares; a leaver's share is taken over on the next heartbeat.
func TestJoiningAndLeavingStayWithinBudget(t *testing.T) {
	const budget = 60.0
	c := newCluster(t)
	a := c.join(t, "a", budget, 8)
	b := c.join(t, "b", budget, 8)
	testkit.Eventually(t, 15*time.Second, "two live and sending", func() bool {
		return a.share.Stats().Live == 2 && b.share.Stats().Live == 2 && c.sim.KeyStats(marketKey).Total > 0
	})
	c.sim.ResetStats()
	d := c.join(t, "c", budget, 8)
	testkit.Eventually(t, 15*time.Second, "the newcomer sending", func() bool { return d.share.Stats().Used > 0 })
	b.leave()
	testkit.Eventually(t, 15*time.Second, "the others to take over the leaver's share", func() bool {
		return a.share.Stats().Live == 2 && d.share.Stats().Live == 2
	})
	before := a.share.Stats().Used + d.share.Stats().Used
	t0 := time.Now()
	untilSecond(t, t0, 2*time.Second)
	after := a.share.Stats().Used + d.share.Stats().Used
	ks := c.sim.KeyStats(marketKey)
	t.Logf("busiest second %d; after the leave %.1f/s", ks.MaxPerSecond, float64(after-before)/time.Since(t0).Seconds())
	if ks.MaxPerSecond > budget {
		t.Errorf("%d requests in one second while processes joined and left, budget %v", ks.MaxPerSecond, budget)
	}
}

// A rate-limit answer seen by one process cools the key down for all of them.
func TestCooldownIsShared(t *testing.T) {
	c := newCluster(t)
	a := c.join(t, "a", 50, 0)
	b := c.join(t, "b", 50, 0)
	testkit.Eventually(t, 15*time.Second, "both live", func() bool { return a.share.Stats().Live == 2 && b.share.Stats().Live == 2 })
	a.share.RateLimited(context.Background(), 5*time.Second, "test: API002")
	if a.share.CooldownRemaining() == 0 {
		t.Fatal("the process that saw the answer is not cooling down")
	}
	testkit.Eventually(t, 5*time.Second, "the other process to cool down", func() bool { return b.share.CooldownRemaining() > 3*time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if _, err := b.share.Wait(ctx); err == nil {
		t.Fatal("Wait granted a request during the cool-down")
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
		{"daemon.budget.heartbeat", func(c *Config) { c.Heartbeat = 0 }},
		{"daemon.budget.cooldown", func(c *Config) { c.Cooldown = -time.Second }},
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
	m := c.start(t, Config{KeyLabel: c.label, Rate: 10, Heartbeat: 200 * time.Millisecond, Cooldown: time.Second, Instance: "a", WriteHealth: wh}, 0)
	defer func() { m.stop(); m.wg.Wait() }()
	full.WaitWithin(t, time.Minute)
}
