package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

func readStatus(t *testing.T, e *env) provider.StatusRow {
	t.Helper()
	row, err := provider.ReadStatus(context.Background(), e.pool, "neople")
	if err != nil {
		t.Fatal(err)
	}
	return row
}

func changes(rs []*running, from, to provider.Status) float64 {
	var n float64
	for _, r := range rs {
		n += testutil.ToFloat64(r.d.Metrics().StatusChanges.WithLabelValues("neople", string(from), string(to)))
	}
	return n
}

// Maintenance: every instance pauses after at most its calls in flight, one instance at a
// time probes with a growing back-off, and a successful probe brings the cluster back through
// RECOVERING (at a reduced rate) to HEALTHY.
func TestMaintenancePausesEveryInstanceAndTheProbeBringsThemBack(t *testing.T) {
	const n, instances, concurrency = 600, 3, 2
	e := newEnv(t, n, neoplesim.Options{Latency: 5 * time.Millisecond})
	e.track(t, 0, n, tiers.Cold, -time.Second)
	var rs []*running
	for range instances {
		cfg := testConfig()
		cfg.Dispatch.Concurrency = concurrency
		cfg.Dispatch.BatchSize = 10
		cfg.Health.RecoverFor = time.Second
		cfg.Health.RecoverFactor = 0.2
		cfg.Market.Rate = 200 // ramp visible: RECOVERING starts at 40/s per instance
		rs = append(rs, e.start(t, cfg, nil))
	}
	testkit.Eventually(t, 20*time.Second, "some collections", func() bool { return collected(t, e.pool) >= 20 })

	e.sim.SetMaintenance(true)
	testkit.Eventually(t, 20*time.Second, "MAINTENANCE recorded", func() bool { return readStatus(t, e).Status == provider.Maintenance })
	// Wait for a couple of failed probes: by then every instance has long stopped dispatching.
	probeFailures := func() int {
		return count(t, e.pool, `SELECT coalesce((SELECT failures FROM provider_probe WHERE provider = 'neople'), 0)`)
	}
	testkit.Eventually(t, 20*time.Second, "two failed probes", func() bool { return probeFailures() >= 2 })
	answered := e.sim.Stats().Maintenance
	failures := probeFailures()
	t.Logf("maintenance answers %d, failed probes %d", answered, failures)
	// Each instance sends at most its in-flight calls and one call for another item (the
	// check that the answer is not one item's own) before pausing; everything else is a probe
	// (at most one in flight, not yet recorded).
	if limit := int64(instances*(concurrency+1) + failures + 1); answered > limit {
		t.Fatalf("%d requests answered with maintenance, want <= %d (%d instances × (%d in flight + 1 check) + %d probes)",
			answered, limit, instances, concurrency, failures+1)
	}
	for _, r := range rs {
		if st := r.d.ProviderStatus(); st != provider.Maintenance {
			t.Fatalf("instance sees %s, want MAINTENANCE", st)
		}
	}

	e.sim.SetMaintenance(false)
	testkit.Eventually(t, 30*time.Second, "HEALTHY again", func() bool { return readStatus(t, e).Status == provider.Healthy })
	if got := changes(rs, provider.Maintenance, provider.Recovering); got < 1 {
		t.Fatalf("no instance saw MAINTENANCE → RECOVERING (%v)", got)
	}
	testkit.Eventually(t, 10*time.Second, "every instance to see HEALTHY", func() bool {
		for _, r := range rs {
			if r.d.ProviderStatus() != provider.Healthy {
				return false
			}
		}
		return true
	})
	if got := changes(rs, provider.Recovering, provider.Healthy); got < 1 {
		t.Fatalf("no instance saw RECOVERING → HEALTHY (%v)", got)
	}
	row := readStatus(t, e)
	t.Logf("final status %s: %s", row.Status, row.Reason)
}

// A high share of 5xx answers in the window makes the provider DEGRADED; the probe (once the
// errors stop) brings it back.
func TestErrorRatioDegradesAndRecovers(t *testing.T) {
	const n = 300
	e := newEnv(t, n, neoplesim.Options{})
	e.track(t, 0, n, tiers.Cold, -time.Second)
	e.sim.SetFaults(neoplesim.Faults{ErrorRate: 0.9})
	cfg := testConfig()
	cfg.Dispatch.Concurrency = 2
	cfg.Dispatch.BatchSize = 10
	cfg.Health.MinSamples = 10
	cfg.Health.RecoverFor = 500 * time.Millisecond
	r := e.start(t, cfg, nil)
	// A lucky probe may already have moved it on; the counted transition is what matters.
	testkit.Eventually(t, 20*time.Second, "HEALTHY → DEGRADED", func() bool {
		return changes([]*running{r}, provider.Healthy, provider.Degraded) >= 1
	})
	e.sim.SetFaults(neoplesim.Faults{})
	testkit.Eventually(t, 30*time.Second, "HEALTHY again", func() bool { return readStatus(t, e).Status == provider.Healthy })
	if changes([]*running{r}, provider.Degraded, provider.Recovering) < 1 {
		t.Fatal("transitions not counted")
	}
}

// An active manual override wins: no probe, no automatic transition while it lasts.
func TestOverrideWinsOverAutomaticHealth(t *testing.T) {
	e := newEnv(t, 20, neoplesim.Options{})
	e.track(t, 0, 20, tiers.Cold, -time.Second)
	ctx := context.Background()
	if _, err := provider.SetStatus(ctx, e.pool, "neople", provider.Maintenance, "test"); err != nil {
		t.Fatal(err)
	}
	if err := provider.SetOverride(ctx, e.pool, "neople", provider.Maintenance, "operator", 0); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.HealthChecked.Init(t)
	cfg.signals.passed.Init(t)
	e.start(t, cfg, nil)
	// Count health checks, not seconds: with a 50 ms interval and a 100 ms probe back-off, a
	// monitor that ignored the override would have probed well before its fifth check under it.
	for seen := 0; seen < 5; {
		if cfg.HealthChecked.Wait(t) == provider.Maintenance {
			seen++
		}
	}
	if n := e.sim.Stats().Requests; n > 0 {
		t.Fatalf("%d requests went out while a MAINTENANCE override was active", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM provider_probe`); n != 0 {
		t.Fatal("the monitor scheduled a probe while a MAINTENANCE override was active")
	}
	if err := provider.ClearOverride(ctx, e.pool, "neople"); err != nil {
		t.Fatal(err)
	}
	waitCollected(t, cfg, e.pool, 20)
}
