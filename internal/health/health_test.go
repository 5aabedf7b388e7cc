package health

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

func testConfig(owner string) Config {
	return Config{
		Thresholds: Thresholds{
			Window: 10 * time.Second, ErrorRatio: 0.5, MinSamples: 4,
			ProbeBackoff: 50 * time.Millisecond, ProbeBackoffMax: 400 * time.Millisecond,
			RecoverFactor: 0.1, RecoverFor: 300 * time.Millisecond, RecoverSuccessRatio: 0.9, CheckInterval: 10 * time.Millisecond,
		},
		Provider: "neople", Owner: owner,
	}
}

type rateRecorder struct {
	mu sync.Mutex
	fs []float64
}

func (r *rateRecorder) SetRateFactor(f float64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fs = append(r.fs, f)
}

func (r *rateRecorder) last() float64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.fs) == 0 {
		return 0
	}
	return r.fs[len(r.fs)-1]
}

func run(t *testing.T, m *Monitor) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); m.Start(ctx) }()
	t.Cleanup(func() { cancel(); testkit.Recv(t, done, testkit.Timeout, "the monitor to stop") })
}

func status(t *testing.T, pool *pgxpool.Pool) provider.StatusRow {
	t.Helper()
	row, err := provider.ReadStatus(context.Background(), pool, "neople")
	if err != nil {
		t.Fatal(err)
	}
	return row
}

var errDown = &provider.Error{Class: provider.ClassMaintenance, Status: 503, Code: "DNF980"}

// changes hears every change of the effective status m sees (OnChange), as the new status.
func changes(m *Monitor) <-chan provider.Status {
	ch := make(chan provider.Status, 64)
	m.OnChange = func(_, to provider.Status, _ string) { ch <- to }
	return ch
}

// waitStatus takes changes until one to `to` arrives.
func waitStatus(t *testing.T, ch <-chan provider.Status, to provider.Status) {
	t.Helper()
	for testkit.Recv(t, ch, testkit.Timeout, "a change to "+string(to)) != to {
	}
}

// Several monitors share one outage: only one probe is ever in flight, the back-off between
// failed probes grows, and the first successful probe moves the provider to RECOVERING.
func TestOneProbeAtATimeWithGrowingBackoff(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	if _, err := provider.SetStatus(context.Background(), pool, "neople", provider.Maintenance, "DNF980"); err != nil {
		t.Fatal(err)
	}
	var inFlight, maxInFlight atomic.Int32
	var mu sync.Mutex
	var probes []time.Time
	probed := make(chan struct{}, 64)
	var up atomic.Bool
	probe := func(ctx context.Context) error {
		n := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := maxInFlight.Load()
			if n <= m || maxInFlight.CompareAndSwap(m, n) {
				break
			}
		}
		mu.Lock()
		probes = append(probes, time.Now())
		mu.Unlock()
		time.Sleep(5 * time.Millisecond) // a probe takes a moment, so overlaps would show
		if up.Load() {
			return nil
		}
		probed <- struct{}{}
		return errDown
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	rates := make([]*rateRecorder, 3)
	seen := make([]<-chan provider.Status, 3)
	for i := range rates {
		rates[i] = &rateRecorder{}
		cfg := testConfig(fmt.Sprintf("m%d", i))
		cfg.RecoverFor = 1000 * time.Hour // the rate stays near recover_factor while the test looks, however slowly
		m := New(pool, cfg, probe, rates[i], log)
		seen[i] = changes(m)
		run(t, m)
	}
	for range 4 {
		testkit.Recv(t, probed, testkit.Timeout, "four failed probes")
	}
	up.Store(true)
	for _, ch := range seen {
		waitStatus(t, ch, provider.Recovering) // each monitor set its rate before it reported
	}
	if m := maxInFlight.Load(); m != 1 {
		t.Fatalf("%d probes in flight at once, want 1", m)
	}
	mu.Lock()
	gaps := []time.Duration{}
	for i := 1; i < 4; i++ {
		gaps = append(gaps, probes[i].Sub(probes[i-1]))
	}
	mu.Unlock()
	t.Logf("gaps between failed probes: %v", gaps)
	// Back-off 100, 200, 400 ms after failures 1, 2, 3 (base 50 ms doubled per failure).
	if gaps[1] < 190*time.Millisecond || gaps[2] < 390*time.Millisecond {
		t.Fatalf("back-off did not grow: %v", gaps)
	}
	for i, r := range rates {
		if f := r.last(); f < 0.1 || f > 0.101 {
			t.Errorf("monitor %d's rate factor %v at the start of RECOVERING, want 0.1", i, f)
		}
	}
}

// RECOVERING ramps the rate up over RecoverFor and becomes HEALTHY once that has passed and
// enough of the recent outcomes succeeded; too many transient failures send it back to DEGRADED.
func TestRecoveringRampsUpOrFallsBack(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	if _, err := provider.SetStatus(ctx, pool, "neople", provider.Recovering, "probe ok"); err != nil {
		t.Fatal(err)
	}
	rate := &rateRecorder{}
	cfg := testConfig("m")
	cfg.RecoverFor = time.Hour // only the failures below can end this RECOVERING
	m := New(pool, cfg, func(context.Context) error { return nil }, rate, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	seen := changes(m)
	run(t, m)
	waitStatus(t, seen, provider.Recovering)
	if f := rate.last(); f < 0.1 || f >= 0.2 {
		t.Fatalf("rate factor at the start of RECOVERING %v, want about 0.1", f)
	}
	m.Observe(errors.New("connection reset")) // one failure among few outcomes decides nothing
	m.Observe(nil)
	m.mu.Lock()
	if m.degradedLocked() {
		t.Fatal("degraded on one failure below min_samples")
	}
	m.mu.Unlock()
	for range 4 {
		m.Observe(errors.New("connection reset")) // not a *provider.Error: transient
	}
	if got := testkit.Recv(t, seen, testkit.Timeout, "the change after RECOVERING"); got != provider.Degraded {
		t.Fatalf("RECOVERING became %s after failures, want DEGRADED", got)
	}
}

// A short outage on a small catalog ends by time: with no outcomes at all (nothing due) or
// only successes, RECOVERING becomes HEALTHY once RecoverFor has passed, at the full rate.
func TestRecoveringEndsByTime(t *testing.T) {
	for _, outcomes := range []int{0, 3} {
		t.Run(fmt.Sprintf("%d successes", outcomes), func(t *testing.T) {
			pool, _ := storetest.NewPool(t)
			ctx := context.Background()
			if _, err := provider.SetStatus(ctx, pool, "neople", provider.Recovering, "probe ok"); err != nil {
				t.Fatal(err)
			}
			rate := &rateRecorder{}
			m := New(pool, testConfig("m"), func(context.Context) error { return nil }, rate, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
			// Each change with when the monitor made it, on its own goroutine: how late the
			// test hears of it does not matter.
			type change struct {
				to provider.Status
				at time.Time
			}
			seen := make(chan change, 8)
			m.OnChange = func(_, to provider.Status, _ string) { seen <- change{to, time.Now()} }
			run(t, m)
			recovering := testkit.Recv(t, seen, testkit.Timeout, "RECOVERING")
			if recovering.to != provider.Recovering {
				t.Fatalf("first status %s, want RECOVERING", recovering.to)
			}
			for range outcomes {
				m.Observe(nil)
			}
			healthy := testkit.Recv(t, seen, testkit.Timeout, "the change after RECOVERING")
			if healthy.to != provider.Healthy {
				t.Fatalf("RECOVERING became %s, want HEALTHY", healthy.to)
			}
			if waited := healthy.at.Sub(recovering.at); waited < 250*time.Millisecond {
				t.Fatalf("HEALTHY %s after RECOVERING, before recover_for (300ms) had passed", waited)
			}
			if f := rate.last(); f != 1 {
				t.Fatalf("rate factor %v once HEALTHY, want 1", f)
			}
		})
	}
}

// Below the success share RECOVERING holds even after RecoverFor.
func TestRecoveringHoldsBelowTheSuccessShare(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	if _, err := provider.SetStatus(ctx, pool, "neople", provider.Recovering, "probe ok"); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig("m")
	cfg.MinSamples = 100 // the failures below never reach DEGRADED
	m := New(pool, cfg, func(context.Context) error { return nil }, nil, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	m.see(status(t, pool))
	for range 8 {
		m.Observe(nil)
	}
	m.Observe(errors.New("timeout"))
	m.Observe(errors.New("timeout")) // 80% succeeded, below 90%
	m.mu.Lock()
	m.recSince = m.recSince.Add(-time.Hour)
	m.mu.Unlock()
	if err := m.step(ctx); err != nil {
		t.Fatal(err)
	}
	if st := status(t, pool).Status; st != provider.Recovering {
		t.Fatalf("status %s at 80%% success, want RECOVERING", st)
	}
	for range 20 {
		m.Observe(nil) // 28 of 30
	}
	if err := m.step(ctx); err != nil {
		t.Fatal(err)
	}
	if st := status(t, pool).Status; st != provider.Healthy {
		t.Fatalf("status %s at 93%% success after recover_for, want HEALTHY", st)
	}
}

// Item errors, rate limits and calls this process stalled through say nothing about the
// provider's health.
func TestOnlyTransientFailuresDegrade(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	// The probe keeps failing, so DEGRADED stays put once reached.
	m := New(pool, testConfig("m"), func(context.Context) error { return errDown }, nil, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	seen := changes(m)
	run(t, m)
	waitStatus(t, seen, provider.Healthy)
	for range 10 {
		m.Observe(&provider.Error{Class: provider.ClassItem, Code: "DNF003"})
		m.Observe(&provider.Error{Class: provider.ClassRateLimited, Code: "API002"})
	}
	// Calls in flight when this process was stopped (a paused VM, SIGSTOP) time out as it
	// resumes: its own stall, which must not pause every instance.
	for range 30 {
		m.Observe(&provider.Error{Class: provider.ClassTransient, Err: fmt.Errorf("%w (%w)", context.DeadlineExceeded, provider.ErrStalled)})
	}
	m.mu.Lock()
	n := m.window.len()
	m.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d outcomes counted, want none", n)
	}
	for range 5 {
		m.Observe(&provider.Error{Class: provider.ClassTransient, Status: 500})
	}
	if got := testkit.Recv(t, seen, testkit.Timeout, "the change after HEALTHY"); got != provider.Degraded {
		t.Fatalf("HEALTHY became %s after transient failures, want DEGRADED", got)
	}
}

// One instance whose own path to the provider fails (DNS, a firewall) while the others collect
// must not pause them all: its failures leave the shared status alone. When nobody collects,
// the same failures degrade it.
func TestOneSickInstanceDoesNotDegradeTheCluster(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	// Others collected 20 items in the window.
	if _, err := pool.Exec(ctx, `INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at, last_collected_at)
		SELECT md5(g::text), 'item ' || g, 'HOT_1M', now() + interval '1 minute', now() FROM generate_series(1, 20) g`); err != nil {
		t.Fatal(err)
	}
	m := New(pool, testConfig("sick"), func(context.Context) error { return errDown }, nil, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	m.KeptShared.Init(t)
	seen := changes(m)
	run(t, m)
	waitStatus(t, seen, provider.Healthy)
	for range 5 {
		m.Observe(&provider.Error{Class: provider.ClassTransient, Status: 504})
	}
	// Counted only as far as the answer needs (the count stops there), so at least MinSamples.
	if n := m.KeptShared.Wait(t); n < testConfig("sick").MinSamples || n > 20 {
		t.Fatalf("kept the shared status for %d items collected elsewhere, want %d to 20", n, testConfig("sick").MinSamples)
	}
	if st := status(t, pool); st.Status != provider.Healthy {
		t.Fatalf("status %s after one instance's failures while others collect, want HEALTHY", st.Status)
	}

	// Nobody collects any more: the same failures are the provider's.
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET last_collected_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	m.Observe(&provider.Error{Class: provider.ClassTransient, Status: 504})
	waitStatus(t, seen, provider.Degraded)
}

// A provider failing part of its answers fails every instance's calls about alike: collections
// elsewhere (here the others' 20 items) do not keep an instance that also succeeds a third of
// the time from degrading the status.
func TestAPartialOutageDegradesThoughOthersCollect(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	if _, err := pool.Exec(context.Background(), `INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at, last_collected_at)
		SELECT md5(g::text), 'item ' || g, 'HOT_1M', now() + interval '1 minute', now() FROM generate_series(1, 20) g`); err != nil {
		t.Fatal(err)
	}
	m := New(pool, testConfig("partial"), func(context.Context) error { return errDown }, nil, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	seen := changes(m)
	run(t, m)
	waitStatus(t, seen, provider.Healthy)
	for range 3 {
		m.Observe(nil)
		m.Observe(&provider.Error{Class: provider.ClassTransient, Status: 504})
		m.Observe(&provider.Error{Class: provider.ClassTransient, Status: 504})
	}
	waitStatus(t, seen, provider.Degraded)
}

// Each status change is logged once by the instance that makes it: one line for
// MAINTENANCE → RECOVERING and one for RECOVERING → HEALTHY, however many checks run.
func TestEachStatusChangeIsLoggedOnce(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	if _, err := provider.SetStatus(ctx, pool, "neople", provider.Maintenance, "DNF980"); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zap.InfoLevel)
	m := New(pool, testConfig("m"), func(context.Context) error { return nil }, nil, zap.New(core))
	m.Checked.Init(t)
	changed := changes(m)
	run(t, m)
	waitStatus(t, changed, provider.Healthy)
	// The check that made the change and three more, each of which would log it again if
	// changes were logged per check.
	for got := 0; got < 4; {
		if m.Checked.Wait(t) == provider.Healthy {
			got++
		}
	}
	var seen []string // every line that reports a change, whatever its message
	for _, e := range logs.All() {
		if to, ok := e.ContextMap()["to"]; ok {
			seen = append(seen, fmt.Sprint(e.ContextMap()["from"], "→", to))
		}
	}
	if !slices.Equal(seen, []string{"MAINTENANCE→RECOVERING", "RECOVERING→HEALTHY"}) {
		t.Fatalf("status change lines %v, want each change once; all lines: %v", seen, logs.All())
	}
}

// Zero thresholds take the defaults (no operator turns them); a threshold that would stall the
// state machine is a programming error.
func TestZeroThresholdsTakeTheDefaults(t *testing.T) {
	m := New(nil, Config{Thresholds: Thresholds{RecoverFor: time.Second}, Provider: "neople"}, nil, nil, nil)
	want := Thresholds{Window: WindowDefault, ErrorRatio: ErrorRatioDefault, MinSamples: MinSamplesDefault,
		ProbeBackoff: ProbeBackoffDefault, ProbeBackoffMax: ProbeBackoffMaxDefault, RecoverFactor: RecoverFactorDefault,
		RecoverFor: time.Second, RecoverSuccessRatio: RecoverSuccessRatioDefault, CheckInterval: CheckIntervalDefault,
		ProbeLease: ProbeLeaseDefault}
	if m.cfg.Thresholds != want {
		t.Fatalf("thresholds %+v, want %+v", m.cfg.Thresholds, want)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a probe back-off cap under the back-off was accepted")
		}
	}()
	New(nil, Config{Thresholds: Thresholds{ProbeBackoff: time.Minute, ProbeBackoffMax: time.Second}}, nil, nil, nil)
}

// probeRow is the provider's probe lease as stored.
type probeRow struct {
	leasedBy     *string
	expires, now *time.Time
	failures     int
	lastResult   *string
}

func readProbe(t *testing.T, pool *pgxpool.Pool) probeRow {
	t.Helper()
	var r probeRow
	if err := pool.QueryRow(context.Background(), `
		SELECT leased_by, lease_expires_at, now(), failures, last_result FROM provider_probe WHERE provider = 'neople'`).
		Scan(&r.leasedBy, &r.expires, &r.now, &r.failures, &r.lastResult); err != nil {
		t.Fatal(err)
	}
	return r
}

// The instance holding the probe dies in the middle of its request: it writes nothing more, as
// after SIGKILL (tools/faults' kill matrix kills a real daemon there). Another instance takes
// the probe once the lease has run out, not before, and brings the provider back; the dead
// holder's answer, should it come after all, changes nothing.
func TestADeadProbeHoldersLeaseIsTakenOver(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	if _, err := provider.SetStatus(ctx, pool, "neople", provider.Degraded, "test"); err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	cfg := testConfig("dead")
	cfg.ProbeLease = 500 * time.Millisecond
	cfg.RecoverFor = time.Hour // RECOVERING holds while the test looks
	answer := make(chan struct{})
	dead := New(pool, cfg, func(context.Context) error { <-answer; return errDown }, nil, log)
	dead.Checked.Init(t)
	dead.ProbeLeased.Init(t)
	run(t, dead)
	var once sync.Once
	let := func() { once.Do(func() { close(answer) }) }
	t.Cleanup(let) // before run's cleanup waits for the monitor
	dead.ProbeLeased.Wait(t)
	held := readProbe(t, pool)
	if held.leasedBy == nil || *held.leasedBy != "dead" {
		t.Fatalf("probe leased by %v, want the first monitor", held.leasedBy)
	}

	cfg.Owner = "taker"
	taken := make(chan probeRow, 1)
	taker := New(pool, cfg, func(ctx context.Context) error {
		var r probeRow // read here, on the monitor's goroutine, without failing the test from it
		// Not bounded by the probe's own short deadline (half the lease): a slow read on a
		// loaded machine would read nothing.
		err := pool.QueryRow(context.WithoutCancel(ctx), `SELECT leased_by, lease_expires_at FROM provider_probe WHERE provider = 'neople'`).Scan(&r.leasedBy, &r.expires)
		taken <- r
		return err
	}, nil, log)
	recovering := make(chan struct{})
	taker.OnChange = func(_, to provider.Status, _ string) {
		if to == provider.Recovering {
			close(recovering)
		}
	}
	run(t, taker)
	got := testkit.Recv(t, taken, testkit.Timeout, "the other instance's probe")
	if got.leasedBy == nil || *got.leasedBy != "taker" || got.expires == nil {
		t.Fatalf("probe sent while leased by %v, want the taker", got.leasedBy)
	}
	if start := got.expires.Add(-cfg.ProbeLease); start.Before(*held.expires) {
		t.Fatalf("probe taken at %s, before the dead holder's lease ran out at %s", start, held.expires)
	}
	testkit.Recv(t, recovering, testkit.Timeout, "RECOVERING after the taker's probe")

	// The dead holder is still inside its probe: what it signalled so far came before.
	for drained := false; !drained; {
		select {
		case <-dead.Checked.C():
		default:
			drained = true
		}
	}
	let()
	dead.Checked.Wait(t) // its check ends after the answer is written, or not
	after := readProbe(t, pool)
	if after.failures != 0 || after.lastResult == nil || *after.lastResult != "ok" {
		t.Fatalf("the late failed answer was recorded: failures %d, last result %v", after.failures, after.lastResult)
	}
	if st := status(t, pool).Status; st != provider.Recovering {
		t.Fatalf("status %s after the late answer, want RECOVERING", st)
	}
}

// A monitor stopped in the middle of its probe hands the probe back: another instance probes at
// once instead of after the lease (an hour here).
func TestAStoppedProberHandsTheProbeBack(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	if _, err := provider.SetStatus(ctx, pool, "neople", provider.Maintenance, "DNF980"); err != nil {
		t.Fatal(err)
	}
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	cfg := testConfig("stopping")
	cfg.ProbeLease = time.Hour
	first := New(pool, cfg, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, nil, log)
	first.ProbeLeased.Init(t)
	sctx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); first.Start(sctx) }()
	first.ProbeLeased.Wait(t)
	stop()
	testkit.Recv(t, stopped, testkit.Timeout, "the first monitor to stop")
	if r := readProbe(t, pool); r.leasedBy != nil {
		t.Fatalf("probe still leased by %s after a clean stop", *r.leasedBy)
	}

	cfg.Owner = "next"
	next := New(pool, cfg, func(context.Context) error { return nil }, nil, log)
	next.ProbeLeased.Init(t)
	run(t, next)
	next.ProbeLeased.Wait(t)
}

// A stop that comes while the probe's lease is being taken lets the statement finish and hands
// the probe back: cut, a lease the server had already committed would hold the probe from every
// instance until it ran out (an hour here).
func TestAProbeLeaseUnderWayAtAStopIsHandedBack(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	cfg := testConfig("stopping")
	cfg.ProbeLease = time.Hour
	m := New(pool, cfg, func(ctx context.Context) error { return ctx.Err() }, nil, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	m.ProbeLeased.Init(t)
	ctx, stop := context.WithCancel(context.Background())
	stop() // SIGTERM as the statements leave
	row := provider.StatusRow{Provider: "neople", Status: provider.Maintenance, Since: time.Now().Add(-time.Hour)}
	if err := m.tryProbe(ctx, row); err != nil {
		t.Fatalf("probe at a stop: %v; want the lease taken and handed back, not the statement cut", err)
	}
	m.ProbeLeased.Wait(t)
	if r := readProbe(t, pool); r.leasedBy != nil {
		t.Fatalf("probe still leased by %s after the stop", *r.leasedBy)
	}
}

// What status and the console say of the probe: who holds it and for how long, a holder whose
// lease ran out, or the back-off.
func TestProbeDescribeNamesTheHolder(t *testing.T) {
	now := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		p    ProbeState
		want string
	}{
		{ProbeState{Failures: 2, NextProbeAt: now.Add(4 * time.Second)}, "2 failed, next in 4s"},
		{ProbeState{Failures: 2, LeasedBy: "host-a:12", LeaseExpiresAt: now.Add(20 * time.Second)},
			"in flight from host-a:12 (lease for 20s more); 2 failed before"},
		{ProbeState{Failures: 3, LeasedBy: "host-a:12", LeaseExpiresAt: now.Add(-7 * time.Second)},
			"host-a:12's lease ran out 7s ago (it died or hangs): the next check of any instance takes it; 3 failed"},
	} {
		if got := c.p.Describe(now); got != c.want {
			t.Errorf("Describe(%+v) = %q, want %q", c.p, got, c.want)
		}
	}
}

// A process without a monitor (collect-due from cron) brings a paused provider back by itself:
// Once probes while MAINTENANCE (the monitor's tryProbe: its lease and back-off), moves the
// provider to RECOVERING when the probe is answered, and ends RECOVERING once the status is
// RecoverFor old. It leaves an active override alone.
func TestOnceBringsAPausedProviderBackWithoutAMonitor(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	if _, err := provider.SetStatus(ctx, pool, "neople", provider.Maintenance, "DNF980"); err != nil {
		t.Fatal(err)
	}
	var probes atomic.Int32
	var up atomic.Bool
	probe := func(context.Context) error {
		probes.Add(1)
		if up.Load() {
			return nil
		}
		return errDown
	}
	cfg := testConfig("cron-1")
	cfg.ProbeBackoff = time.Microsecond // the first probe of an outage at once
	cfg.RecoverFor = time.Hour
	once := func() {
		t.Helper()
		if err := Once(ctx, pool, cfg, probe, zaptest.NewLogger(t)); err != nil {
			t.Fatal(err)
		}
	}
	once()
	if n := probes.Load(); n != 1 || status(t, pool).Status != provider.Maintenance {
		t.Fatalf("a run during the outage: %d probes, status %s; want one failed probe and MAINTENANCE", n, status(t, pool).Status)
	}
	// The provider answers again; a new outage episode starts the back-off afresh.
	up.Store(true)
	if _, err := provider.SetStatus(ctx, pool, "neople", provider.Degraded, "errors"); err != nil {
		t.Fatal(err)
	}
	once()
	if st := status(t, pool).Status; st != provider.Recovering {
		t.Fatalf("after an answered probe the status is %s, want RECOVERING", st)
	}
	once()
	if st := status(t, pool).Status; st != provider.Recovering {
		t.Fatalf("RECOVERING ended before RecoverFor: %s", st)
	}
	cfg.RecoverFor = time.Microsecond
	once()
	if row := status(t, pool); row.Status != provider.Healthy || !strings.Contains(row.Reason, "without a health monitor") {
		t.Fatalf("after RecoverFor: %s (%q), want HEALTHY saying why", row.Status, row.Reason)
	}

	// An override wins: nothing is probed or moved while one is in force.
	if _, err := provider.SetStatus(ctx, pool, "neople", provider.Maintenance, "DNF980"); err != nil {
		t.Fatal(err)
	}
	if err := provider.SetOverride(ctx, pool, "neople", provider.Maintenance, "planned", 0); err != nil {
		t.Fatal(err)
	}
	before := probes.Load()
	once()
	if probes.Load() != before || status(t, pool).Status != provider.Maintenance {
		t.Fatal("Once probed or moved the status under an override")
	}
}

// The window takes an outcome per fetched item: trimming it must not copy it each time, and
// its counts must follow what is in it.
func TestTheWindowCountsWithoutCopying(t *testing.T) {
	var w outcomes
	t0 := time.Unix(0, 0)
	for i := range 100_000 {
		w.add(sample{at: t0.Add(time.Duration(i) * time.Millisecond), bad: i%4 == 0})
		w.dropBefore(t0.Add(time.Duration(i-1000) * time.Millisecond)) // a 1 s window of 1,001
	}
	if w.len() != 1001 || w.bad != 250 || cap(w.s) > 4096 {
		t.Fatalf("window of %d (%d failed, capacity %d), want 1001 (250 failed) kept in a few thousand", w.len(), w.bad, cap(w.s))
	}
	w.dropBefore(t0.Add(time.Hour))
	if w.len() != 0 || w.bad != 0 {
		t.Fatalf("emptied window: %d (%d failed)", w.len(), w.bad)
	}
}

// A provider that fails again as its traffic ramps up is one outage: the probe that let it
// recover counts as failed and the back-off goes on doubling, instead of a probe and a ramp-up
// every ProbeBackoff for as long as it flaps. An outage long after the last starts afresh.
func TestARelapseContinuesTheProbeBackoff(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	cfg := testConfig("m0")
	cfg.ProbeBackoff, cfg.ProbeBackoffMax, cfg.RecoverFor = time.Second, time.Hour, time.Minute
	log := zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	probeOK := func(context.Context) error { return nil }
	schedule := func(status provider.Status) (failures int, gap time.Duration) {
		t.Helper()
		if _, err := provider.SetStatus(ctx, pool, "neople", status, "test"); err != nil {
			t.Fatal(err)
		}
		if err := Once(ctx, pool, cfg, probeOK, log); err != nil {
			t.Fatal(err)
		}
		var ms float64
		if err := pool.QueryRow(ctx, `SELECT failures, extract(epoch FROM next_probe_at - episode_since) * 1000 FROM provider_probe`).Scan(&failures, &ms); err != nil {
			t.Fatal(err)
		}
		return failures, time.Duration(ms) * time.Millisecond
	}
	if f, gap := schedule(provider.Degraded); f != 0 || gap != time.Second {
		t.Fatalf("a first outage: %d failures, first probe after %v; want 0, 1s", f, gap)
	}
	// The probe falls due and succeeds: RECOVERING.
	if _, err := pool.Exec(ctx, `UPDATE provider_probe SET next_probe_at = now()`); err != nil {
		t.Fatal(err)
	}
	if err := Once(ctx, pool, cfg, probeOK, log); err != nil {
		t.Fatal(err)
	}
	if row, err := provider.ReadStatus(ctx, pool, "neople"); err != nil || row.Status != provider.Recovering {
		t.Fatalf("after a good probe: %+v %v", row, err)
	}
	if f, gap := schedule(provider.Degraded); f != 1 || gap != 2*time.Second {
		t.Fatalf("a relapse while recovering: %d failures, next probe after %v; want 1, 2s (the series goes on)", f, gap)
	}
	// An outage that ended with no probe (set healthy by hand) leaves no good probe behind: the
	// next one starts afresh, however soon.
	if _, err := provider.SetStatus(ctx, pool, "neople", provider.Healthy, "test"); err != nil {
		t.Fatal(err)
	}
	if f, gap := schedule(provider.Degraded); f != 0 || gap != time.Second {
		t.Fatalf("an outage after one that ended without a probe: %d failures, first probe after %v; want 0, 1s", f, gap)
	}
	// Long after the last good probe, an outage is a new one.
	if _, err := pool.Exec(ctx, `UPDATE provider_probe SET last_result = 'ok', updated_at = updated_at - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	if _, err := provider.SetStatus(ctx, pool, "neople", provider.Healthy, "test"); err != nil {
		t.Fatal(err)
	}
	if f, gap := schedule(provider.Degraded); f != 0 || gap != time.Second {
		t.Fatalf("an outage hours after the last: %d failures, first probe after %v; want 0, 1s", f, gap)
	}
}
