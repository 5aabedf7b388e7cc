package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// switchReadOnly sets the test database's sessions read-only (or back). Switching on cuts the
// daemon's connections, so it reconnects into the new setting, as a failover cuts them;
// switching back leaves them: the daemon's sessions keep their read-only setting, and the
// daemon must see by itself that new ones may write.
func switchReadOnly(t *testing.T, e *env, on bool) {
	t.Helper()
	storetest.SetReadOnly(t, e.url, on)
	if !on {
		return
	}
	if _, err := e.pool.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND application_name = $1`, daemonApp); err != nil {
		t.Fatal(err)
	}
}

// startReady starts a daemon on 20 due items with its HTTP server and waits until it has
// collected them all and is ready.
func startReady(t *testing.T, log *zap.Logger) (*env, *running) {
	t.Helper()
	return startReadyWith(t, log, nil)
}

// startReadyWith is startReady with setup changing the configuration first.
func startReadyWith(t *testing.T, log *zap.Logger, setup func(*env, *Config)) (*env, *running) {
	t.Helper()
	e := newEnv(t, 20, neoplesim.Options{})
	e.ownPools = true
	e.track(t, 0, 20, tiers.Cold, -time.Second)
	cfg := testConfig()
	cfg.Daemon.HTTPAddr = "127.0.0.1:0"
	cfg.Daemon.MaxSleep = 500 * time.Millisecond // items made due later are seen soon
	if setup != nil {
		setup(e, &cfg)
	}
	r := e.start(t, cfg, log)
	testkit.Eventually(t, 30*time.Second, "every item collected", func() bool { return collected(t, e.pool) == 20 })
	if code, body := readyz(t, r); code != http.StatusOK {
		t.Fatalf("/readyz before: %d %s", code, body)
	}
	return e, r
}

// A database that refuses writes makes the daemon not ready, naming the cause, while it stays
// live; the metrics say so too, and both turn back by themselves when writes return.
func TestReadOnlyDatabaseMakesTheDaemonNotReady(t *testing.T) {
	// The daemon's database.direct_url pool (partition DDL), told apart like its pool.
	e, r := startReadyWith(t, nil, func(e *env, cfg *Config) {
		var err error
		if cfg.DirectPool, err = store.Open(context.Background(), store.PoolConfig{URL: e.url, MaxConns: 2, ApplicationName: daemonApp}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cfg.DirectPool.Close)
	})

	m := r.d.Metrics()
	// The metrics follow the state /readyz reads a moment later (they are set after the change
	// is made), so each side is waited for.
	metrics := func() (writable, readOnly float64) {
		return testutil.ToFloat64(m.DatabaseWritable), testutil.ToFloat64(m.WriteRefused.WithLabelValues(string(store.CauseReadOnly)))
	}
	switchReadOnly(t, e, true)
	testkit.Eventually(t, 20*time.Second, "/readyz and the metrics to report the read-only database", func() bool {
		code, body := readyz(t, r)
		w, ro := metrics()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "database refuses writes (read_only)") && w == 0 && ro == 1
	})
	resp, err := http.Get("http://" + r.d.Addr() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz while read-only: %d, want 200 (a restart would not help)", resp.StatusCode)
	}

	// A direct session opened while read-only (the write path's partition creation) keeps
	// the setting, as the pool's do (the pool dropped first: its sessions the switch cut).
	r.d.cfg.DirectPool.Reset()
	dc, err := r.d.cfg.DirectPool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Exec(context.Background(), `CREATE TEMP TABLE direct_writes ()`); err == nil || store.RefusedCause(err) != store.CauseReadOnly {
		t.Fatalf("a direct session while read-only: %v, want it refused as read-only", err)
	}
	dc.Release()

	switchReadOnly(t, e, false)
	testkit.Eventually(t, 30*time.Second, "/readyz ready and collector_database_writable 1 again", func() bool {
		code, _ := readyz(t, r)
		w, ro := metrics()
		return code == http.StatusOK && w == 1 && ro == 0
	})
	if _, err := r.d.cfg.DirectPool.Exec(context.Background(), `CREATE TEMP TABLE direct_writes ()`); err != nil {
		t.Fatalf("the direct pool once writes came back: %v; want its read-only sessions dropped", err)
	}
	// Collection resumes on the same connections' pool: items made due are collected.
	if _, err := e.pool.Exec(context.Background(), `UPDATE tracked_items SET next_collect_at = now() - interval '1 second', last_collected_at = NULL`); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "the items made due collected after writes came back", func() bool { return collected(t, e.pool) == 20 })
}

// Every provider call the daemon makes is held while the database refuses writes, in one layer:
// the client's hold, the last moment before a request goes out (so also a call queued on the
// budget when writes stopped). The provider hears nothing whose answer could not be stored, and
// the call goes out once writes come back.
func TestProviderCallsAreHeldWhileWritesAreRefused(t *testing.T) {
	e := newEnv(t, 3, neoplesim.Options{})
	d := e.build(t, testConfig(), nil)
	id := e.items[0].ItemID
	d.writes.Observe(&pgconn.PgError{Code: "25006", Message: "cannot execute UPDATE in a read-only transaction"})
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := d.collect.client.Auction(ctx, id); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a call while writes are refused: %v, want it held until its deadline", err)
	}
	if n := e.sim.Stats().Requests; n != 0 {
		t.Fatalf("%d provider requests while writes were refused, want 0", n)
	}
	done := make(chan error, 1)
	go func() {
		_, err := d.collect.client.Auction(context.Background(), id)
		done <- err
	}()
	d.writes.Observe(nil)
	if err := <-done; err != nil {
		t.Fatalf("a call once writes came back: %v", err)
	}
	if n := e.sim.Stats().Requests; n != 1 {
		t.Fatalf("%d provider requests after writes came back, want 1", n)
	}
}

// A full disk is one state from the first write refused for lack of space until the space
// probe's write succeeds: the lease renewals, claims and heartbeats that succeed meanwhile (in
// place) do not end it. /readyz and the metrics say so all along, and it is logged once when it
// starts and once when it ends.
func TestFullDiskIsOneStateUntilTheSpaceProbeWrites(t *testing.T) {
	core, logs := zapobserver.New(zapcore.InfoLevel)
	e, r := startReady(t, zap.New(core))

	free := storetest.FillDisk(t, e.pool, "auction_snapshots")
	// Due again, with no snapshot known: each collection is a first one and needs a new row.
	if _, err := e.pool.Exec(context.Background(), `UPDATE tracked_items SET next_collect_at = now() - interval '1 second', last_snapshot_at = NULL`); err != nil {
		t.Fatal(err)
	}
	retries := func() int {
		return logs.FilterMessage("write-back failed; retrying").FilterField(zap.String("cause", string(store.CauseDiskFull))).Len()
	}
	// Each retry follows a lease renewal that succeeded in place.
	testkit.Eventually(t, 30*time.Second, "the write-back refused and retried after renewals", func() bool { return retries() >= 3 })
	code, body := readyz(t, r)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "database refuses writes (disk_full)") {
		t.Fatalf("/readyz while the disk is full and updates in place succeed: %d %s", code, body)
	}
	m := r.d.Metrics()
	if w, df := testutil.ToFloat64(m.DatabaseWritable), testutil.ToFloat64(m.WriteRefused.WithLabelValues(string(store.CauseDiskFull))); w != 0 || df != 1 {
		t.Fatalf("collector_database_writable %v, write_refused{disk_full} %v: want 0 and 1", w, df)
	}

	free()
	testkit.Eventually(t, 30*time.Second, "/readyz ready again", func() bool {
		code, _ := readyz(t, r)
		return code == http.StatusOK
	})
	testkit.Eventually(t, 30*time.Second, "every item stored", func() bool {
		var n int
		err := e.pool.QueryRow(context.Background(), `SELECT count(*) FROM tracked_items WHERE last_snapshot_at IS NOT NULL`).Scan(&n)
		return err == nil && n == 20
	})
	refused := logs.FilterMessageSnippet("the database refuses writes").Len()
	back := logs.FilterMessageSnippet("the database takes writes again").All()
	if refused != 1 || len(back) != 1 {
		t.Fatalf("logged %d starts and %d ends of the refusal, want 1 and 1", refused, len(back))
	}
	if d, ok := back[0].ContextMap()["refused_for_seconds"].(time.Duration); !ok || d <= 0 {
		t.Fatalf("the end of the refusal says %v; want how long it lasted", back[0].ContextMap())
	}
}

// A lack of resources the space probe cannot disprove because it cannot run (the role may
// create neither a table nor a temporary one) holds collection for spaceBlindFor, not for good:
// then it ends unproven, with a warning, and a write refused again would start it anew.
func TestASpaceProbeThatCannotRunEndsTheLackAfterAWhile(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	core, logs := zapobserver.New(zapcore.WarnLevel)
	d := e.build(t, testConfig(), zap.New(core))
	d.space.probe = func(context.Context) error {
		return &pgconn.PgError{Code: "42501", Message: "permission denied for schema public"}
	}
	d.writes.Observe(&pgconn.PgError{Code: "53200", Message: "out of memory"})
	ctx := context.Background()
	d.probeOnce(ctx)
	if s := d.writes.State(); s.Writable || !d.writes.SpaceShort() {
		t.Fatalf("state %+v after a probe that could not run: want the lack standing", s)
	}
	d.space.blindFor = time.Nanosecond // the spell has lasted longer than that by now
	d.probeOnce(ctx)
	if s := d.writes.State(); !s.Writable || d.writes.SpaceShort() {
		t.Fatalf("state %+v once the probe could not run for spaceBlindFor: want writable", s)
	}
	if n := logs.FilterMessageSnippet("ending the lack of space unproven").Len(); n != 1 {
		t.Fatalf("%d warnings that the lack ended unproven, want 1", n)
	}
}

// A space probe that finds no session to spare (the server at max_connections) did not run:
// the lack stands, with no error that the probe cannot run and no blind spell begun, which
// would end the lack unproven.
func TestASpaceProbeWithNoSessionIsNoProbeThatCannotRun(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	core, logs := zapobserver.New(zapcore.WarnLevel)
	d := e.build(t, testConfig(), zap.New(core))
	d.space.probe = func(context.Context) error {
		return fmt.Errorf("space probe: %w", &pgconn.PgError{Code: "53300", Message: "sorry, too many clients already"})
	}
	d.writes.Observe(&pgconn.PgError{Code: "53100", Message: "could not extend file: No space left on device"})
	d.probeOnce(context.Background())
	if s := d.writes.State(); s.Cause != store.CauseDiskFull || !d.space.blind.IsZero() {
		t.Fatalf("state %+v, blind since %v after a probe with no session: want disk_full standing, no blind spell", s, d.space.blind)
	}
	if n := logs.FilterMessageSnippet("space probe").Len(); n != 0 {
		t.Fatalf("logged %v, want nothing of the probe: it did not run", logs.All())
	}
}

// A probe cut short by the daemon's stop proves nothing and is not reported (it logged the
// database as refusing writes on shutdowns that landed mid-probe); one that ran out of its
// time is: the database did not answer.
func TestAProbeCutByTheStopIsNotReported(t *testing.T) {
	pool, err := store.Open(context.Background(), store.PoolConfig{URL: storetest.NewDatabase(t), MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	d := &Daemon{pool: pool, writes: store.NewWriteHealth()}
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	d.probeOnce(stopped)
	if st := d.writes.State(); !st.Writable {
		t.Fatalf("after a probe cut by the stop: %+v, want the state left writable", st)
	}
	late, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	d.probeOnce(late)
	if st := d.writes.State(); st.Writable || st.Cause != store.CauseUnreachable {
		t.Fatalf("after a probe that ran out of time: %+v, want unreachable", st)
	}
}

// A pool whose every connection is in use (an export's snapshot, slow reads) is busy, not a
// database gone: the probe asks on a session of its own instead of timing out waiting for a
// pooled one, which held every provider call and turned /readyz 503.
func TestABusyPoolIsNotAnUnreachableDatabase(t *testing.T) {
	url := storetest.NewDatabase(t)
	pool, err := store.Open(context.Background(), store.PoolConfig{URL: url, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	var held []*pgxpool.Conn
	for range 2 {
		c, err := pool.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	defer func() {
		for _, c := range held {
			c.Release()
		}
	}()
	d := &Daemon{pool: pool, writes: store.NewWriteHealth()}
	ctx, cancel := context.WithTimeout(context.Background(), writeProbeTimeout)
	defer cancel()
	d.probeOnce(ctx)
	if st := d.writes.State(); !st.Writable || st.Cause != "" {
		t.Fatalf("probe with every pooled connection in use: %+v, want writable", st)
	}
}
