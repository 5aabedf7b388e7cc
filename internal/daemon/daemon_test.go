package daemon

import (
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/retention"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"
)

// With notifications off and a 30 s maximum sleep, only the database-computed wake-up can get
// an item due in 2 s claimed within a second of its due time.
func TestWakeUpIsTimedByTheDatabase(t *testing.T) {
	e := newEnv(t, 20, neoplesim.Options{})
	e.track(t, 0, 1, tiers.Cold, 2*time.Second)
	e.track(t, 1, 20, tiers.Cold, 20*time.Minute) // scheduled, not due: must not be claimed
	cfg := testConfig()
	cfg.Daemon.MaxSleep = 30 * time.Second
	d := e.build(t, cfg, nil)
	ctx := context.Background()

	if res := pass(t, d); res.Summary.Claimed != 0 || !res.Next {
		t.Fatalf("first pass %+v: want nothing claimed and a wake-up asked of the database", res)
	}
	wait, err := d.collect.nextWake(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if wait <= time.Second || wait > 2*time.Second {
		t.Fatalf("next wake-up in %s, want the item's due time, under 2 s away", wait)
	}
	d.collect.sleep(ctx, min(wait, cfg.Daemon.MaxSleep))
	if res := pass(t, d); res.Summary.Collected != 1 {
		t.Fatalf("the pass after the wake-up collected %d, want the item due in 2 s", res.Summary.Collected)
	}
	var lagMS float64
	if err := e.pool.QueryRow(ctx, `
		SELECT extract(epoch FROM last_claimed_at - last_due_at) * 1000 FROM tracked_items WHERE item_id = $1`, e.items[0].ItemID).Scan(&lagMS); err != nil {
		t.Fatal(err)
	}
	t.Logf("due → claim lag %.1f ms", lagMS)
	if lagMS < 0 || lagMS > 1000 {
		t.Fatalf("claimed %.0f ms after its due time, want within 1000 ms", lagMS)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_claimed_at IS NOT NULL`); n != 1 {
		t.Fatalf("%d items claimed, want only the due one", n)
	}
}

// SIGTERM mid-batch: in-flight calls finish within the grace period and are written; every
// other claimed item is handed back at once; nothing stays leased, nothing is lost; Run
// returns nil.
func TestShutdownMidBatchReleasesLeasesAndLosesNothing(t *testing.T) {
	const n = 40
	e := newEnv(t, n, neoplesim.Options{Latency: 300 * time.Millisecond})
	e.track(t, 0, n, tiers.Cold, -time.Second)
	cfg := testConfig()
	cfg.Dispatch.Concurrency = 4
	cfg.Dispatch.BatchSize = n
	cfg.Daemon.ShutdownGrace = 10 * time.Second
	r := e.start(t, cfg, nil)

	testkit.Recv(t, e.sim.Served(marketKey, 1), 20*time.Second, "calls in flight") // heard on arrival, 300 ms before the answer
	if err := r.shutdown(t); err != nil {
		t.Fatal(err)
	}
	leased := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL`)
	collected := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_collected_at IS NOT NULL`)
	snapshots := count(t, e.pool, `SELECT count(*) FROM auction_snapshots`)
	stillDue := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_collected_at IS NULL AND next_collect_at <= now()`)
	t.Logf("collected %d, handed back %d, leased %d", collected, stillDue, leased)
	if leased != 0 {
		t.Fatalf("%d items still leased after shutdown, want 0", leased)
	}
	if collected == 0 || collected == n {
		t.Fatalf("collected %d of %d: the shutdown did not land mid-batch", collected, n)
	}
	if snapshots != collected || collected+stillDue != n {
		t.Fatalf("snapshots %d, collected %d, still due %d of %d: something was lost", snapshots, collected, stillDue, n)
	}
}

// Killing every database connection of the daemon: it logs, backs off, reconnects and carries on.
func TestRecoversFromTerminatedConnections(t *testing.T) {
	e := newEnv(t, 10, neoplesim.Options{})
	e.ownPools = true
	e.track(t, 0, 5, tiers.Cold, -time.Second)
	cfg := testConfig()
	cfg.Daemon.Notify = true
	cfg.Daemon.MaxSleep = 500 * time.Millisecond
	cfg.Daemon.Budget.Enabled = true
	cfg.Daemon.Budget.Heartbeat = 100 * time.Millisecond
	cfg.signals.passed.Init(t)
	e.start(t, cfg, nil)
	waitCollected(t, cfg, e.pool, 5)

	admin, err := pgx.Connect(context.Background(), storetest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	var killed int
	if err := admin.QueryRow(context.Background(), `
		SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE datname = $1 AND application_name = $2`,
		e.pool.Config().ConnConfig.Database, daemonApp).Scan(&killed); err != nil {
		t.Fatal(err)
	}
	t.Logf("terminated %d backends", killed)
	if killed == 0 {
		t.Fatal("no backend terminated")
	}
	e.track(t, 5, 10, tiers.Cold, 0)
	waitCollected(t, cfg, e.pool, 10)
}

func TestMetricsAndHealthEndpoints(t *testing.T) {
	e := newEnv(t, 5, neoplesim.Options{})
	e.track(t, 0, 5, tiers.Hot, -time.Second)
	cfg := testConfig()
	cfg.Daemon.HTTPAddr = "127.0.0.1:0"
	cfg.Daemon.Budget.Enabled = true
	cfg.Daemon.Budget.Heartbeat = 100 * time.Millisecond
	cfg.SchemaHint = "run `collector migrate up`"
	cfg.signals.passed.Init(t)
	cfg.signals.refreshed.Init(t)
	r := e.start(t, cfg, nil)
	base := "http://" + r.d.Addr()
	get := func(path string) (int, string) {
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/healthz"); code != 200 {
		t.Fatalf("/healthz: %d", code)
	}
	if code, body := get("/readyz"); code != 200 {
		t.Fatalf("/readyz: %d %s", code, body)
	}
	want := []string{
		"collector_claim_lag_seconds_bucket", "collector_claims_total 5", `collector_collections_total{outcome="collected"} 5`,
		`collector_provider_requests_total{endpoint="/df/auction",outcome="ok"} 5`, `collector_items_due{tier="HOT_1M"}`,
		"collector_items_overdue", "collector_leases_held", `collector_provider_status{provider="neople",status="HEALTHY"} 1`,
		"collector_outbox_backlog 5", "collector_outbox_oldest_unpublished_seconds", "collector_outbox_failed 0", "collector_db_pool_acquired_conns",
		`collector_budget_share_requests_per_second{workload="market"}`, `collector_budget_used_total{workload="market"} 10`, `collector_budget_cooldown_seconds{workload="market"} 0`,
		"collector_limiter_wait_seconds_total", `collector_passes_total{result="ok"}`,
		`collector_claim_lag_seconds_bucket{tier="HOT_1M",le=`,
		`collector_provider_request_duration_seconds_count{endpoint="/df/auction",outcome="ok",workload="market"} 5`,
		`collector_build_info{commit="unknown",go_version="go`,
	}
	for collected(t, e.pool) < 5 {
		cfg.signals.passed.Wait(t)
	}
	// A refresh that began after the last write-back sees its outbox events.
	for cfg.signals.refreshed.Wait(t).Backlog < 5 {
	}
	_, body := get("/metrics")
	for _, w := range want {
		if !strings.Contains(body, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
	if strings.Contains(body, marketKey) {
		t.Fatal("the API key appears in /metrics")
	}
	// No Kafka configured, so no relay: nothing to be up or down.
	if strings.Contains(body, "collector_relay_up") {
		t.Error("/metrics exports collector_relay_up on an instance that runs no relay")
	}

	// readyz fails when the schema is behind the binary.
	if _, err := e.pool.Exec(context.Background(), `UPDATE schema_version SET version = version - 1`); err != nil {
		t.Fatal(err)
	}
	// The same one line every command gives on such a database, with the hint the caller gave.
	if code, body := get("/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "is at schema version") ||
		!strings.Contains(body, "migrations are pending; run `collector migrate up`") {
		t.Fatalf("/readyz with an old schema: %d %q, want 503 naming the version and migrate up", code, body)
	}
}

// Items an instance hands back at shutdown are taken by a sleeping instance at once (woken by
// the release), not after their lease would have expired.
func TestHandedBackItemsAreTakenAtOnce(t *testing.T) {
	const n = 30
	e := newEnv(t, n, neoplesim.Options{Latency: 300 * time.Millisecond})
	e.track(t, 0, n, tiers.Cold, -time.Second)
	cfg := testConfig()
	cfg.Dispatch.Concurrency = 2
	cfg.Dispatch.BatchSize = n
	cfg.Dispatch.Lease = time.Minute
	cfg.Daemon.ShutdownGrace = 5 * time.Second
	a := e.start(t, cfg, nil)
	testkit.Eventually(t, 20*time.Second, "the first instance to lease everything", func() bool {
		return count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL`) == n
	})
	cfg = testConfig()
	cfg.Daemon.Notify = true
	cfg.Daemon.MaxSleep = time.Hour // only the lease expiry (a minute away) or a notification can wake it
	cfg.signals.passed.Init(t)
	e.start(t, cfg, nil)
	if res := cfg.signals.passed.Wait(t); res.Summary.Claimed != 0 {
		t.Fatalf("the second instance's first pass claimed %d, want nothing (all leased)", res.Summary.Claimed)
	}
	testkit.Eventually(t, 10*time.Second, "the second instance listening", func() bool {
		return count(t, e.pool, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN tracked_items_due'`) == 1
	})
	a.shutdown(t)
	waitCollected(t, cfg, e.pool, n)
}

// Status counts tiers, due and overdue items without fixtures, and reports claim lag from the
// claims' due times.
func TestClusterStatus(t *testing.T) {
	e := newEnv(t, 6, neoplesim.Options{})
	ctx := context.Background()
	e.track(t, 0, 2, tiers.Hot, -time.Minute) // overdue
	e.track(t, 2, 3, tiers.Cold, -time.Second)
	e.track(t, 3, 6, tiers.Warm, time.Hour)
	storetest.Items(t, e.pool, storetest.Item{ID: "seed-fixture-1", Name: "fixture", Tier: tiers.Hot, NextCollectAt: storetest.Ago(time.Hour)})
	st, err := Status(ctx, e.pool, "neople")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]TierStatus{}
	for _, ts := range st.Tiers {
		got[ts.Tier] = ts
	}
	if h := got["HOT_1M"]; h.Items != 2 || h.Due != 2 || h.Overdue != 2 {
		t.Fatalf("HOT_1M %+v: want 2 items, 2 due, 2 overdue (the fixture left out)", h)
	}
	if c, w := got["COLD_10M"], got["WARM_5M"]; c.Due != 1 || c.Overdue != 0 || w.Items != 3 || w.Due != 0 {
		t.Fatalf("COLD %+v WARM %+v", c, w)
	}
	if st.LagN != 0 || st.Provider.Status != provider.Healthy {
		t.Fatalf("before any claim: lag n %d, provider %s", st.LagN, st.Provider.Status)
	}

	if res := pass(t, e.build(t, testConfig(), nil)); res.Summary.Claimed != 4 {
		t.Fatalf("the pass claimed %d, want the 4 due items", res.Summary.Claimed)
	}
	t.Logf("outcomes: %d collected", count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_collected_at IS NOT NULL`))
	if st, err = Status(ctx, e.pool, "neople"); err != nil {
		t.Fatal(err)
	}
	// The fixture was claimed too (the dispatcher does not skip fixtures) but is not counted.
	if st.LagN != 3 || st.LagP99 < 50*time.Second || st.Leased != 0 || st.OutboxBacklog < 3 {
		t.Fatalf("after collecting: lag n %d p99 %s, leased %d, backlog %d", st.LagN, st.LagP99, st.Leased, st.OutboxBacklog)
	}
	// A claim made ahead of its due time (daemon.pack_wait) is on time: counted, at lag 0. The
	// claim is written here as the claim statements write it: when, and the schedule it served.
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() + interval '2 seconds' WHERE item_id = $1`, e.items[3].ItemID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET last_claimed_at = now(), last_due_at = next_collect_at WHERE item_id = $1`, e.items[3].ItemID); err != nil {
		t.Fatal(err)
	}
	if st, err = Status(ctx, e.pool, "neople"); err != nil {
		t.Fatal(err)
	}
	if st.LagN != 4 || st.LagP50 < 0 {
		t.Fatalf("after a claim 2 s ahead: lag n %d p50 %s, want it counted (4) and no negative lag", st.LagN, st.LagP50)
	}
}

// With a retention age set, the retention service deletes older interest events and keeps the rest.
func TestPrunesInterestPastItsAge(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO item_interest (item_id, kind, occurred_at)
		SELECT 'item-1', 'view', now() - g * interval '1 hour' FROM generate_series(1, 250) g`); err != nil {
		t.Fatal(err)
	}
	rc := retention.FromConfig(config.Default())
	rc.Interest, rc.Batch = 100*time.Hour+30*time.Minute, 40
	s, err := newRetentionService(retentionConfig{Retention: rc}, e.pool, telemetry.NewMetrics(), zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for more := true; more; {
		res, err := s.runOnce(ctx)
		if err != nil {
			t.Fatal(err)
		}
		more = res.More
	}
	if n := count(t, e.pool, `SELECT count(*) FROM item_interest`); n != 100 {
		t.Fatalf("%d interest events left, want 100", n)
	}
}

// A turn that failed on one table still counts the unpublished events it dropped before: the
// metric is what tells consumers' operators of the loss.
func TestAFailedPruningTurnCountsWhatItDropped(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	m := telemetry.NewMetrics()
	s, err := newRetentionService(retentionConfig{Retention: retention.FromConfig(config.Default())}, e.pool, m, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	s.report(retention.Result{OutboxExpired: 4}, errors.New("prune published outbox rows: canceling statement due to lock timeout"))
	if n := testutil.ToFloat64(m.OutboxExpired); n != 4 {
		t.Fatalf("collector_outbox_expired_total %v after a turn that dropped 4 and then failed, want 4", n)
	}
}

// The daemon always runs the retention service (the outbox is bounded by default), and deletes
// interest events only once retention.interest is set, every Retention.Interval.
func TestDaemonPrunesInterestOnlyWithAnAgeSet(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `
		INSERT INTO item_interest (item_id, kind, occurred_at)
		SELECT 'item-1', 'view', now() - g * interval '1 hour' FROM generate_series(1, 3) g`); err != nil {
		t.Fatal(err)
	}
	if res, err := e.build(t, testConfig(), nil).retention.runOnce(ctx); err != nil || res.Interest != 0 {
		t.Fatalf("a turn without retention.interest: %+v %v", res, err)
	}
	cfg := testConfig()
	cfg.Retention.Interest, cfg.Retention.Interval = 90*time.Minute, 10*time.Millisecond
	cfg.signals.pruned.Init(t)
	e.start(t, cfg, nil)
	if res := cfg.signals.pruned.Wait(t); res.Interest != 2 {
		t.Fatalf("the first turn pruned %d interest events, want the 2 older than 90 minutes", res.Interest)
	}
}

// A daemon with no kafka.brokers (no relay) still prunes published rows past
// kafka.outbox_retention and, where the operator opted in to retention.outbox_unpublished,
// drops unpublished ones past it with their pending entries, counted in
// collector_outbox_expired_total.
func TestDaemonWithoutKafkaBoundsTheOutboxWhenAsked(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	// 30 days old, by g % 3: failed, pending, published (negative snapshot ids: no real one's).
	if _, err := e.pool.Exec(context.Background(), `
		WITH o AS (
		    INSERT INTO outbox (event_type, item_id, snapshot_id, payload, created_at, failed_at)
		    SELECT 'test', 'old-' || g, -g, '{}', now() - interval '30 days', CASE WHEN g % 3 = 0 THEN now() END
		    FROM generate_series(1, 9) g
		    RETURNING id, lane, snapshot_id)
		INSERT INTO outbox_pending (id, lane) SELECT id, lane FROM o WHERE -snapshot_id % 3 = 1`); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Retention.Interval, cfg.Retention.OutboxUnpublished = 10*time.Millisecond, 7*24*time.Hour
	cfg.signals.pruned.Init(t)
	r := e.start(t, cfg, nil)
	if res := cfg.signals.pruned.Wait(t); res.OutboxPublished != 3 || res.OutboxExpired != 6 {
		t.Fatalf("the first turn deleted %d published and %d unpublished outbox rows, want 3 and 6", res.OutboxPublished, res.OutboxExpired)
	}
	if n := testutil.ToFloat64(r.d.Metrics().OutboxExpired); n != 6 {
		t.Fatalf("collector_outbox_expired_total %v, want 6", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM outbox WHERE snapshot_id < 0`); n != 0 {
		t.Fatalf("%d old outbox rows left", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM outbox_pending p WHERE NOT EXISTS (SELECT FROM outbox o WHERE o.id = p.id)`); n != 0 {
		t.Fatalf("%d outbox_pending entries point at no outbox row", n)
	}
}

// The daemon keeps the history partitions a week ahead from its start, and says how far.
func TestDaemonKeepsHistoryPartitionsAhead(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	ctx := context.Background()
	// Upkeep stopped: no partition past today's.
	if _, err := e.pool.Exec(ctx, `
		DO $$ DECLARE r record; BEGIN
			FOR r IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			         WHERE i.inhparent IN ('auction_snapshots'::regclass, 'auction_sales'::regclass)
			           AND pg_get_expr(c.relpartbound, c.oid) NOT LIKE '%MINVALUE%' LOOP
				EXECUTE format('DROP TABLE %I', r.relname);
			END LOOP;
		END $$`); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.signals.kept.Init(t)
	r := e.start(t, cfg, nil)
	states := cfg.signals.kept.Wait(t)
	for _, st := range states {
		ahead, _ := r.d.Metrics().PartitionsAhead.Value(st.Table)
		if len(st.Created) < 8 || ahead < (7*24*time.Hour).Seconds() {
			t.Errorf("%s: created %v, %v s ahead; want today and a week ahead", st.Table, st.Created, ahead)
		}
	}
}

// A refresh that waits on a lock (an ALTER TABLE or VACUUM FULL left open) fails in its
// bound, so the gauges go unknown once the failing has lasted instead of keeping their last
// values for as long as the lock is held.
func TestAGaugeRefreshWaitingOnALockFails(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	d := e.build(t, testConfig(), nil)
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) // ends the lock, also when the test fails
	if _, err := tx.Exec(ctx, `LOCK TABLE tracked_items IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	d.gauges.timeout = 200 * time.Millisecond
	done := make(chan error, 1)
	go func() { _, err := d.gauges.runOnce(ctx); done <- err }()
	if err := testkit.Recv(t, done, testkit.Timeout, "the refresh to give up"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("refresh under a lock: %v; want it ended by its deadline", err)
	}
}

// A tier that empties reads 0 on the next refresh, and every tier is exported, 0 when empty.
func TestTierGaugesResetWhenATierEmpties(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	e.track(t, 0, 1, tiers.Hot, -time.Minute)
	d := e.build(t, testConfig(), nil)
	ctx := context.Background()
	gauges := func() map[string][2]float64 {
		t.Helper()
		if _, err := d.gauges.runOnce(ctx); err != nil {
			t.Fatal(err)
		}
		g := map[string][2]float64{}
		for _, tier := range tiers.All() {
			g[string(tier)] = [2]float64{testutil.ToFloat64(d.Metrics().ItemsDue.WithLabelValues(string(tier))),
				testutil.ToFloat64(d.Metrics().ItemsOverdue.WithLabelValues(string(tier)))}
		}
		return g
	}
	if g := gauges(); g["HOT_1M"] != [2]float64{1, 1} || g["COLD_10M"] != [2]float64{0, 0} {
		t.Fatalf("before the move: %v", g)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET collection_tier = 'COLD_10M'`); err != nil {
		t.Fatal(err)
	}
	if g := gauges(); g["HOT_1M"] != [2]float64{0, 0} || g["COLD_10M"] != [2]float64{1, 1} {
		t.Fatalf("after the last HOT_1M item moved to COLD_10M: %v", g)
	}
	n, err := testutil.GatherAndCount(d.Metrics().Registry, "collector_items_due", "collector_items_overdue")
	if err != nil {
		t.Fatal(err)
	}
	if want := 2 * len(tiers.All()); n != want {
		t.Fatalf("%d tier series exported, want %d (every tier, 0 when empty)", n, want)
	}

	// Refreshes that cannot read the database keep the last values through a blip (a NaN would
	// reset the alerts' for: timers), and leave them unknown once the failing has lasted.
	gone, cancel := context.WithCancel(ctx)
	cancel()
	m := d.Metrics()
	unknown := func(want bool, when string) {
		t.Helper()
		for name, v := range map[string]float64{"due COLD_10M": testutil.ToFloat64(m.ItemsDue.WithLabelValues("COLD_10M")),
			"leases": testutil.ToFloat64(m.LeasesHeld), "outbox backlog": testutil.ToFloat64(m.OutboxBacklog)} {
			if math.IsNaN(v) != want {
				t.Errorf("%s reads %v %s, want NaN: %v", name, v, when, want)
			}
		}
	}
	// Before any refresh has worked, the gauges' zeros are not values to keep: unknown at once.
	_, err = d.gauges.runOnce(gone)
	d.gauges.judge(time.Now(), err)
	unknown(true, "when no refresh has worked since start")
	if _, err := d.gauges.runOnce(ctx); err != nil {
		t.Fatal(err)
	}
	d.gauges.judge(time.Now(), nil) // the refreshes above, as Start judges them
	t0 := time.Now()
	for _, at := range []time.Duration{0, time.Minute, gaugeStaleAfter - time.Second} {
		_, err := d.gauges.runOnce(gone)
		if err == nil {
			t.Fatal("a refresh without its database reported no error")
		}
		d.gauges.judge(t0.Add(at), err)
	}
	unknown(false, "while the failing is a blip")
	_, err = d.gauges.runOnce(gone)
	d.gauges.judge(t0.Add(gaugeStaleAfter), err)
	unknown(true, "once the refreshes have failed for gaugeStaleAfter")
	res, err := d.gauges.runOnce(ctx)
	d.gauges.judge(t0.Add(gaugeStaleAfter+time.Second), err)
	if err != nil || res.Tracked != 1 {
		t.Fatalf("a refresh that works again: %+v %v", res, err)
	}
	unknown(false, "after a refresh that works")
	// A new failure starts a new streak: a blip again, however long ago the last one began.
	_, err = d.gauges.runOnce(gone)
	d.gauges.judge(t0.Add(2*gaugeStaleAfter), err)
	unknown(false, "at the first failure of a new streak")
}

// Failing passes are one warning a streak, then one a minute, and a line when passes work
// again: a pass a few seconds apart through an hour's outage made hundreds.
func TestFailingPassesAreLoggedOnceAStreak(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	e.track(t, 0, 1, tiers.Hot, -time.Minute)
	core, logs := zapobserver.New(zapcore.InfoLevel)
	d := e.build(t, testConfig(), zap.New(core))
	ctx := context.Background()
	rename := func(from, to string) {
		t.Helper()
		if _, err := e.pool.Exec(ctx, `ALTER TABLE `+from+` RENAME TO `+to); err != nil {
			t.Fatal(err)
		}
	}
	rename("provider_status", "provider_status_gone") // every pass fails at its gate
	for range 3 {
		if res := d.collect.runOnce(ctx); res.Err == nil {
			t.Fatal("a pass without provider_status did not fail")
		}
	}
	if n := logs.FilterMessageSnippet("collection pass failed").Len(); n != 1 {
		t.Fatalf("%d lines for 3 failed passes, want 1", n)
	}
	rename("provider_status_gone", "provider_status")
	pass(t, d)
	if n := logs.FilterMessageSnippet("works again").Len(); n != 1 {
		t.Fatalf("%d 'works again' lines after a pass that worked, want 1", n)
	}
}
