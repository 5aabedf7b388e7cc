package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

// readsEnv is a private primary with a streaming standby and a router over the two. The
// router's loop is not started: the test measures with RunOnce, so nothing happens between
// two steps that the test did not ask for. MaxLag is a microsecond: only a replica that has
// replayed everything counts as keeping up, and one that missed a single write is lagging,
// without waiting for seconds to pass.
func readsEnv(t *testing.T) (*store.Reads, *storetest.Standby, *pgx.Conn) {
	t.Helper()
	s := storetest.NewStandby(t)
	ctx := context.Background()
	primary, standby := s.Pools(t)
	reads := store.NewReads(primary, standby,
		store.ReadsConfig{MaxLag: time.Microsecond, Every: time.Hour, Timeout: 5 * time.Second}, nil)
	conn, err := pgx.Connect(ctx, s.PrimaryURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return reads, s, conn
}

// inRecovery says which server answered a read through the router: only the standby is in
// recovery.
func inRecovery(t *testing.T, reads *store.Reads) bool {
	t.Helper()
	var rec bool
	if err := reads.QueryRow(context.Background(), `SELECT pg_is_in_recovery()`).Scan(&rec); err != nil {
		t.Fatalf("read through the router: %v", err)
	}
	return rec
}

func addItem(t *testing.T, conn *pgx.Conn, id string) {
	t.Helper()
	storetest.Items(t, conn, storetest.Item{ID: id})
}

// seen counts the item through the router, with a Query so both read paths are exercised.
func seen(t *testing.T, reads *store.Reads, id string) bool {
	t.Helper()
	rows, err := reads.Query(context.Background(), `SELECT item_id FROM tracked_items WHERE item_id = $1`, id)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return len(ids) == 1
}

// untilReplica measures until the replica has replayed everything and serves reads again.
func untilReplica(t *testing.T, reads *store.Reads) store.ReadState {
	t.Helper()
	var st store.ReadState
	testkit.Eventually(t, testkit.Timeout, "reads to go to the replica", func() bool {
		st = reads.RunOnce(context.Background())
		return st.Source == store.SourceReplica
	})
	return st
}

// One standby, four situations in turn: keeping up, lagging with its replay paused, hanging,
// and stopped; in each, reads go where the state says and come back to the replica after.
func TestReadsFollowTheReplicaLag(t *testing.T) {
	reads, s, conn := readsEnv(t)
	ctx := context.Background()
	if st := reads.State(); st.Source != store.SourcePrimary || !strings.Contains(st.Reason, "not measured") {
		t.Fatalf("before any measurement: %+v, want the primary, not measured yet", st)
	}

	t.Run("replica keeps up", func(t *testing.T) {
		addItem(t, conn, "kept-up")
		st := untilReplica(t, reads)
		if !st.LagKnown || st.Lag != 0 || st.Paused || st.String() != "replica (lag 0s)" {
			t.Fatalf("caught up: %+v (%s)", st, st)
		}
		if !inRecovery(t, reads) {
			t.Fatal("the state says replica but the primary answered")
		}
		// In step at the measurement means it had replayed the write made before it.
		if !seen(t, reads, "kept-up") {
			t.Fatal("the replica serves reads without a write it was measured to have replayed")
		}
	})

	t.Run("measurements stop", func(t *testing.T) {
		// A router whose measuring stopped (its loop ended, or hangs) does not keep reads on a
		// replica that may have fallen behind since: three intervals and a timeout after the
		// last measurement, reads go to the primary.
		replica, err := store.OpenReplica(ctx, store.PoolConfig{URL: s.StandbyURL, MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(replica.Close)
		now := time.Now()
		stalled := store.NewReads(reads.Primary(), replica, store.ReadsConfig{Every: time.Second, Now: func() time.Time { return now }}, nil)
		untilReplica(t, stalled)
		now = now.Add(5*time.Second + time.Millisecond) // 3 × Every + MeasureTimeoutDefault
		if inRecovery(t, stalled) {
			t.Fatal("a read went to the replica past its measurement's reach")
		}
		if st := stalled.State(); st.Source != store.SourcePrimary || !strings.Contains(st.Reason, "not measured for") {
			t.Fatalf("past the last measurement's reach: %+v, want the primary, saying the lag was not measured", st)
		}
	})

	t.Run("one request stays on the primary", func(t *testing.T) {
		// A request whose read ran on the primary (the replica down, lagging) reads the rest
		// there, even once the router returns to the replica: one answer from one source.
		// Other requests, and those that began on the replica, go where the router says.
		s.PauseReplay(t)
		addItem(t, conn, "pinned")
		if st := reads.RunOnce(ctx); st.Source != store.SourcePrimary {
			t.Fatalf("paused behind a write: %+v, want the primary", st)
		}
		req, served := store.WithServed(ctx)
		var rec bool
		if err := reads.QueryRow(req, `SELECT pg_is_in_recovery()`).Scan(&rec); err != nil || rec {
			t.Fatalf("the request's first read: recovery %v, %v; want the primary", rec, err)
		}
		s.ResumeReplay(t)
		untilReplica(t, reads)
		if err := reads.QueryRow(req, `SELECT pg_is_in_recovery()`).Scan(&rec); err != nil || rec {
			t.Fatalf("the same request's next read: recovery %v, %v; want the primary still", rec, err)
		}
		if served.String() != "primary" {
			t.Fatalf("the request says it was served from %s", served)
		}
		other, _ := store.WithServed(ctx)
		if !inRecovery(t, reads) || reads.QueryRow(other, `SELECT pg_is_in_recovery()`).Scan(&rec) != nil || !rec {
			t.Fatal("another request did not go to the replica the router returned to")
		}
	})

	t.Run("replica lagging", func(t *testing.T) {
		s.PauseReplay(t)
		sconn, err := pgx.Connect(ctx, s.StandbyURL)
		if err != nil {
			t.Fatal(err)
		}
		defer sconn.Close(ctx)
		addItem(t, conn, "behind")
		st := reads.RunOnce(ctx)
		if st.Source != store.SourcePrimary || !st.LagKnown || st.Lag <= 0 || !st.Paused ||
			!strings.Contains(st.Reason, "replica lagging") || !strings.Contains(st.Reason, "replay is paused") {
			t.Fatalf("paused behind a write: %+v, want the primary, saying the replica lags and its replay is paused", st)
		}
		if inRecovery(t, reads) || !seen(t, reads, "behind") {
			t.Fatal("a lagging replica still serves reads")
		}
		var onStandby bool
		if err := sconn.QueryRow(ctx, `SELECT count(*) > 0 FROM tracked_items WHERE item_id = 'behind'`).Scan(&onStandby); err != nil || onStandby {
			t.Fatalf("the paused standby has the write (%v, %v): the test proves nothing", onStandby, err)
		}

		s.ResumeReplay(t)
		untilReplica(t, reads)
		if !inRecovery(t, reads) || !seen(t, reads, "behind") {
			t.Fatal("after resuming, the replica does not serve the write it replayed")
		}
	})

	t.Run("replica ahead of the primary", func(t *testing.T) {
		// A standby left on another timeline (a failover promoted a standby that had less, or
		// the primary was restored to an earlier point) has replayed WAL its primary never
		// wrote: its lag would read 0 while it serves a past that is gone. Here the primary's
		// sessions read a WAL position far behind the standby's, as such a primary would.
		if _, err := conn.Exec(ctx, `CREATE SCHEMA IF NOT EXISTS behind;
			CREATE OR REPLACE FUNCTION behind.pg_current_wal_lsn() RETURNS pg_lsn LANGUAGE sql AS $$ SELECT '0/1'::pg_lsn $$`); err != nil {
			t.Fatal(err)
		}
		untilReplica(t, reads) // the standby has replayed the function, at least
		primary, err := store.Open(ctx, store.PoolConfig{URL: s.PrimaryURL + "&options=-c%20search_path%3Dbehind,pg_catalog,public", MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(primary.Close)
		replica, err := store.OpenReplica(ctx, store.PoolConfig{URL: s.StandbyURL, MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(replica.Close)
		left := store.NewReads(primary, replica, store.ReadsConfig{MaxLag: time.Minute, Every: time.Hour, Timeout: 5 * time.Second}, nil)
		if st := left.RunOnce(ctx); st.Source != store.SourcePrimary || !strings.Contains(st.Reason, "another timeline") {
			t.Fatalf("a replica past its primary's WAL: %+v, want the primary, saying it follows another timeline", st)
		}
	})

	t.Run("replica hangs", func(t *testing.T) {
		// A router of its own, over a proxy in front of the standby that the test freezes: the
		// standby then takes connections and never answers, as one that hangs, or whose packets
		// are dropped, does. Measurements are the test's, so the fallback is the read's doing.
		proxy := storetest.NewProxy(t, s.StandbyURL)
		replica, err := store.OpenReplica(ctx, store.PoolConfig{URL: proxy.URL, MaxConns: 4})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(replica.Close)
		t.Cleanup(proxy.Close)
		hung := store.NewReads(reads.Primary(), replica, store.ReadsConfig{MaxLag: time.Microsecond, Every: time.Hour}, nil)
		recovery := func(rows pgx.Rows, err error) (bool, error) {
			if err != nil {
				return false, err
			}
			return pgx.CollectExactlyOneRow(rows, pgx.RowTo[bool])
		}
		silent := func(what string) {
			t.Helper()
			if st := hung.State(); st.Source != store.SourcePrimary || !strings.Contains(st.Reason, "replica did not answer a read within 2s") {
				t.Fatalf("after %s: %+v, want the primary, saying the replica did not answer", what, st)
			}
		}

		// Query, on the connection the measurement left in the pool.
		untilReplica(t, hung)
		proxy.Freeze()
		// The frozen proxy passes no answer: whatever answers is the primary.
		if rec := answered(t, "a Query the hung replica was sent", func() (bool, error) {
			return recovery(hung.Query(ctx, `SELECT pg_is_in_recovery()`))
		}); rec {
			t.Fatal("a standby answered through the frozen proxy")
		}
		silent("a Query the replica did not answer")
		// The reads that follow go to the primary at once: not one asks the replica's pool.
		asked := func() int64 { st := replica.Stat(); return st.AcquireCount() + st.CanceledAcquireCount() }
		before := asked()
		if answered(t, "a read after the fallback", func() (bool, error) {
			var rec bool
			return rec, hung.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&rec)
		}) || asked() != before {
			t.Fatal("a read after the fallback went to the replica")
		}

		// QueryRow, on a new connection: the replica accepts it and never answers the startup.
		proxy.Thaw()
		untilReplica(t, hung)
		proxy.Freeze()
		replica.Reset()
		if answered(t, "a QueryRow the hung replica was sent", func() (bool, error) {
			var rec bool
			return rec, hung.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&rec)
		}) {
			t.Fatal("a standby answered through the frozen proxy")
		}
		silent("a QueryRow the replica did not answer")
		proxy.Thaw()
	})

	t.Run("replica of something else", func(t *testing.T) {
		// Another cluster (the shared test server, not the pair's primary) and another
		// database of the right standby: neither is a copy of the primary's data, whatever
		// their WAL positions say, so reads stay on the primary, saying why.
		other, _ := storetest.NewPool(t)
		_, standby := s.Pools(t)
		wrongDB, err := store.OpenReplica(ctx, store.PoolConfig{URL: strings.Replace(s.StandbyURL, "/duecollector?", "/postgres?", 1), MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(wrongDB.Close)
		cfg := store.ReadsConfig{MaxLag: time.Hour, Every: time.Hour, Timeout: testkit.Timeout}
		for want, r := range map[string]*store.Reads{
			"belongs to another cluster":                                  store.NewReads(other, standby, cfg, nil),
			`serves database "postgres", the primary's is "duecollector"`: store.NewReads(reads.Primary(), wrongDB, cfg, nil),
		} {
			if st := r.RunOnce(ctx); st.Source != store.SourcePrimary || !strings.Contains(st.Reason, want) {
				t.Errorf("%+v, want the primary, saying the replica %s", st, want)
			}
		}
	})

	t.Run("replica role cannot read", func(t *testing.T) {
		// database.read_url's role loses the sales between two measurements: a read of them
		// runs on the primary and marks the replica down, naming the refusal; the next
		// measurement says which tables the role may not read, so reads do not try it again.
		for _, q := range []string{`CREATE ROLE limited_reader LOGIN`, `GRANT SELECT ON ALL TABLES IN SCHEMA public TO limited_reader`} {
			if _, err := conn.Exec(ctx, q); err != nil {
				t.Fatal(err)
			}
		}
		addItem(t, conn, "granted")
		untilReplica(t, reads) // the role and its grant replayed
		limited, err := store.OpenReplica(ctx, store.PoolConfig{URL: strings.Replace(s.StandbyURL, "postgres://postgres@", "postgres://limited_reader@", 1), MaxConns: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(limited.Close)
		r := store.NewReads(reads.Primary(), limited, store.ReadsConfig{MaxLag: time.Hour, Every: time.Hour, Timeout: testkit.Timeout}, nil)
		if st := r.RunOnce(ctx); st.Source != store.SourceReplica {
			t.Fatalf("a replica whose role may read every table: %+v, want it used", st)
		}
		if _, err := conn.Exec(ctx, `REVOKE SELECT ON auction_sales FROM limited_reader`); err != nil {
			t.Fatal(err)
		}
		addItem(t, conn, "revoked")
		untilReplica(t, reads) // the revoke replayed
		var rec bool
		if err := r.QueryRow(ctx, `SELECT pg_is_in_recovery(), (SELECT count(*) FROM auction_sales)`).Scan(&rec, new(int64)); err != nil || rec {
			t.Fatalf("a read of the sales the replica's role may not read: recovery %v, %v; want it answered by the primary", rec, err)
		}
		if st := r.State(); st.Source != store.SourcePrimary || !strings.Contains(st.Reason, "permission denied") {
			t.Fatalf("after the refused read: %+v, want the primary, naming the refusal", st)
		}
		if st := r.RunOnce(ctx); st.Source != store.SourcePrimary || !strings.Contains(st.Reason, "cannot be read") ||
			!strings.Contains(st.Reason, "may not read auction_sales") {
			t.Fatalf("a replica whose role may not read the sales: %+v, want the primary, naming the table", st)
		}
	})

	t.Run("replica stopped", func(t *testing.T) {
		untilReplica(t, reads)
		s.StopStandby(t)
		// A read the state still sends to the replica meets it down and runs on the primary.
		if inRecovery(t, reads) {
			t.Fatal("a read answered by a stopped standby")
		}
		// Unreachable, or refused with the shutdown's own error (57P01) when that reached the
		// client before the connection closed.
		if st := reads.State(); st.Source != store.SourcePrimary ||
			!strings.Contains(st.Reason, "replica unreachable") && !strings.Contains(st.Reason, "replica refused a read") {
			t.Fatalf("after a read met the stopped standby: %+v", st)
		}
		start := time.Now()
		st := reads.RunOnce(ctx)
		if st.Source != store.SourcePrimary || !strings.Contains(st.Reason, "replica unreachable") || st.LagKnown {
			t.Fatalf("stopped standby: %+v, want the primary, saying the replica is unreachable", st)
		}
		// A hang guard, not a timing: unbounded, the measurement would wait out TCP (minutes).
		if d := time.Since(start); d > 30*time.Second {
			t.Fatalf("measuring a stopped standby took %s: its timeout did not bound it", d)
		}
		if !seen(t, reads, "kept-up") {
			t.Fatal("reads fail while the standby is down")
		}

		s.StartStandby(t)
		addItem(t, conn, "after-restart")
		untilReplica(t, reads)
		if !inRecovery(t, reads) || !seen(t, reads, "after-restart") {
			t.Fatal("the restarted standby does not serve reads")
		}
	})
}

// answered runs read and returns its answer, failing the test when it fails or gives none
// within testkit.Timeout: a read that would wait for a hung replica for good fails the test
// instead of hanging it. The bound is generous; the point is that an answer comes.
func answered[T any](t *testing.T, what string, read func() (T, error)) T {
	t.Helper()
	type answer struct {
		v   T
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		v, err := read()
		ch <- answer{v, err}
	}()
	a := testkit.Recv(t, ch, testkit.Timeout, what)
	if a.err != nil {
		t.Fatalf("%s: %v", what, a.err)
	}
	return a.v
}

// OpenReplica bounds connecting, so pgxpool's attempts on a replica that takes connections and
// never answers end; a connect_timeout in database.read_url decides instead.
func TestOpenReplicaBoundsConnecting(t *testing.T) {
	t.Parallel()
	for u, want := range map[string]time.Duration{
		"postgres://reader@127.0.0.1:1/duecollector":                   store.ReplicaConnectTimeout,
		"postgres://reader@127.0.0.1:1/duecollector?connect_timeout=9": 9 * time.Second,
	} {
		p, err := store.OpenReplica(context.Background(), store.PoolConfig{URL: u})
		if err != nil {
			t.Fatal(err)
		}
		got := p.Config().ConnConfig.ConnectTimeout
		p.Close()
		if got != want {
			t.Errorf("%s: connect timeout %s, want %s", u, got, want)
		}
	}
}

// Without a replica every read goes to the primary, and the state says so in one word.
func TestReadsWithoutReplica(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	reads := store.NewReads(pool, nil, store.ReadsConfig{}, nil)
	if st := reads.RunOnce(context.Background()); st.Replica || st.Source != store.SourcePrimary || st.String() != "primary" {
		t.Fatalf("no replica: %+v (%s)", st, st)
	}
	if inRecovery(t, reads) {
		t.Fatal("read from a standby with none configured")
	}
}

// A replica nothing answers at sends reads to the primary within the measurement's timeout,
// and the password in its URL shows nowhere.
func TestReadsUnreachableReplicaHidesItsPassword(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	replica, err := store.OpenReplica(ctx, store.PoolConfig{URL: "postgres://reader:s3cret-pw@127.0.0.1:1/duecollector?sslmode=disable&connect_timeout=2"})
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close()
	reads := store.NewReads(pool, replica, store.ReadsConfig{Timeout: 3 * time.Second}, nil)
	st := reads.RunOnce(ctx)
	if st.Source != store.SourcePrimary || !strings.Contains(st.Reason, "replica unreachable at 127.0.0.1:1/duecollector") {
		t.Fatalf("unreachable replica: %+v", st)
	}
	if strings.Contains(st.Reason, "s3cret") || strings.Contains(st.String(), "s3cret") {
		t.Fatalf("the state shows the replica's password: %s", st)
	}
	if inRecovery(t, reads) {
		t.Fatal("read from a standby")
	}
	if _, err := store.OpenReplica(ctx, store.PoolConfig{URL: "postgres://reader:s3cret-pw@127.0.0.1:bad/x"}); err == nil ||
		strings.Contains(err.Error(), "s3cret") || !strings.Contains(err.Error(), "database.read_url") {
		t.Fatalf("a bad read_url: %v, want an error naming database.read_url without the password", err)
	}
}
