package store_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/tern/v2/migrate"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/migrations"
)

func TestConcurrentMigrationsAreSafe(t *testing.T) {
	t.Parallel()
	url := storetest.NewEmptyDatabase(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- store.Migrate(ctx, url, nil)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
	st, err := store.Status(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if st.Current != st.Latest || len(st.Pending) != 0 {
		t.Fatalf("status after migrate: %+v", st)
	}
	pool, err := store.Open(ctx, store.PoolConfig{URL: url, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := store.CheckCurrent(ctx, pool); err != nil {
		t.Fatalf("CheckCurrent after migrate: %v", err)
	}
}

func TestStatusShowsPendingOnEmptyDatabase(t *testing.T) {
	t.Parallel()
	url := storetest.NewEmptyDatabase(t)
	st, err := store.Status(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	if st.Current != 0 || len(st.Pending) == 0 || int(st.Latest) != len(st.Pending) {
		t.Fatalf("fresh database status %+v: want everything pending", st)
	}
	pool, err := store.Open(context.Background(), store.PoolConfig{URL: url, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	err = store.CheckCurrent(context.Background(), pool)
	if err == nil {
		t.Fatal("CheckCurrent must fail on an unmigrated database")
	}
	want := fmt.Sprintf("the database at %s is at schema version 0 of %d: migrations are pending", store.Where(url), st.Latest)
	var behind *store.SchemaBehindError
	if !errors.As(err, &behind) || err.Error() != want {
		t.Fatalf("CheckCurrent on an unmigrated database: %v; want %q", err, want)
	}
}

// A database the pre-release chain made gets one message from every migration and schema
// check: what it is and what to do. Nothing is migrated.
func TestPreReleaseSchemaSaysRecreate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.NewPreReleaseDatabase(t)
	want := fmt.Sprintf("the database at %s was created by a pre-release schema (version 14, made by another text of the migrations than this binary's); "+
		"this release creates the schema with one migration and cannot upgrade it: drop and recreate the database "+
		"(or empty it: DROP SCHEMA public CASCADE; CREATE SCHEMA public), then migrate it", store.Where(url))
	check := func(what string, err error) {
		t.Helper()
		var pre *store.PreReleaseSchemaError
		if !errors.As(err, &pre) || err.Error() != want || !store.NeedsMigration(err) {
			t.Errorf("%s: %v; want %q", what, err, want)
		}
	}
	check("Migrate", store.Migrate(ctx, url, nil))
	check("MigrateTo 0", store.MigrateTo(ctx, url, 0, store.MigrateHooks{}))
	_, err := store.Status(ctx, url)
	check("Status", err)
	pool, err := store.Open(ctx, store.PoolConfig{URL: url, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	check("CheckCurrent", store.CheckCurrent(ctx, pool))
	if v, err := store.CurrentVersion(ctx, pool); err != nil || v != 14 {
		t.Fatalf("version after the refused migrations: %d, %v; want 14 untouched", v, err)
	}
}

// A database an earlier text of 001_schema.sql made has the same version as the current one
// but not what the code now uses: it is refused as pre-release, not taken for current.
func TestAnEarlierTextOfTheSchemaIsPreRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, url := storetest.NewPool(t)
	if err := store.CheckCurrent(ctx, pool); err != nil {
		t.Fatalf("CheckCurrent on the schema this binary made: %v", err)
	}
	for _, comment := range []string{"'duecollector schema 0123456789abcdef'", "NULL"} {
		if _, err := pool.Exec(ctx, `COMMENT ON TABLE tracked_items IS `+comment); err != nil {
			t.Fatal(err)
		}
		var pre *store.PreReleaseSchemaError
		if err := store.CheckCurrent(ctx, pool); !errors.As(err, &pre) || pre.Version != 1 {
			t.Errorf("CheckCurrent, revision %s: %v; want a pre-release error at version 1", comment, err)
		}
		if err := store.Migrate(ctx, url, nil); !errors.As(err, &pre) {
			t.Errorf("Migrate, revision %s: %v; want a pre-release error", comment, err)
		}
		// No comment at all is also what a restore with --no-comments leaves: the error
		// gives the statement that sets it back, the way out that keeps the history.
		if restore := strings.Contains(pre.Error(), "COMMENT ON TABLE public.tracked_items IS 'duecollector schema "); restore != (comment == "NULL") {
			t.Errorf("revision %s: %v; want the COMMENT statement only when there is no comment", comment, pre)
		}
	}
	if _, err := pool.Exec(ctx, `COMMENT ON TABLE tracked_items IS 'duecollector schema `+migrations.Revision()+`'`); err != nil {
		t.Fatal(err)
	}
	if err := store.CheckCurrent(ctx, pool); err != nil {
		t.Fatalf("CheckCurrent with the comment set back as the error says: %v", err)
	}
}

// A database of a later release, whose version is above this binary's, is not taken for a
// pre-release one: checks pass (instances of the older release keep running during an upgrade)
// and migrating says the schema is newer.
func TestNewerSchemaIsNotPreRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, url := storetest.NewPool(t)
	if _, err := pool.Exec(ctx, `UPDATE schema_version SET version = 14`); err != nil {
		t.Fatal(err)
	}
	if err := store.CheckCurrent(ctx, pool); err != nil {
		t.Fatalf("CheckCurrent on a newer schema: %v", err)
	}
	_, err := store.Status(ctx, url)
	if err == nil || store.NeedsMigration(err) || !strings.Contains(err.Error(), "newer than this binary") {
		t.Fatalf("Status on a newer schema: %v", err)
	}
}

// migrateBetween is a Querier that lets a migration commit between its first and second
// statements, as another process's `migrate up` may.
type migrateBetween struct {
	conn  *pgx.Conn
	url   string
	calls int
	err   error
}

func (m *migrateBetween) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	m.calls++
	if m.calls == 2 {
		m.err = store.Migrate(ctx, m.url, nil)
	}
	return m.conn.QueryRow(ctx, sql, args...)
}

// tern commits its version table before the migration that sets version 1. A check reading
// the version and the schema in two snapshots, with that migration committing between them,
// took the database for a pre-release one and told the operator to drop it.
func TestAMigrationCommittingMidCheckIsNotPreRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	url := storetest.NewEmptyDatabase(t)
	if err := store.MigrateTo(ctx, url, 0, store.MigrateHooks{}); err != nil {
		t.Fatal(err)
	}
	conn, err := store.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	q := &migrateBetween{conn: conn, url: url}
	if err := store.CheckCurrent(ctx, q); err != nil || q.err != nil || q.calls < 2 {
		t.Fatalf("CheckCurrent while a migration commits: %v (migration: %v, %d statements)", err, q.err, q.calls)
	}
}

func TestOpenNamesTheServerOnFailure(t *testing.T) {
	_, err := store.Open(context.Background(), store.PoolConfig{URL: "postgres://nobody:secretpw@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"})
	if err == nil {
		t.Fatal("want an error")
	}
	if s := err.Error(); !contains(s, "127.0.0.1") || contains(s, "secretpw") {
		t.Fatalf("error %q must name the server and hide the password", s)
	}
}

// pgx quotes a connection string that does not parse, masking only the passwords it recognises.
func TestAConnectionStringThatDoesNotParseIsNotQuoted(t *testing.T) {
	for _, url := range []string{"host=db password = s3cret pool_max_conns=x", "host=db password = s3cret statement_cache_capacity=x",
		"host=db password=open s3cret dbname=x", // pgx: missing "=" after "s3cret"
		"postgres://app:s3cret@db:54x2/x"} {
		_, err := store.Open(context.Background(), store.PoolConfig{URL: url})
		if err == nil || contains(err.Error(), "s3cret") || !contains(err.Error(), "database.url") {
			t.Errorf("Open(%q) = %v: want an error naming database.url without the password", url, err)
		}
	}
	url := "host=db password = s3cret statement_cache_capacity=x" // pgx.ParseConfig's own parameter
	if _, err := store.Connect(context.Background(), url); err == nil || contains(err.Error(), "s3cret") || !contains(err.Error(), "statement_cache_capacity") {
		t.Errorf("Connect(%q) = %v: want pgx's reason without the password", url, err)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

func TestTransientTellsRetryableFailuresFromDataErrors(t *testing.T) {
	for code, want := range map[string]bool{
		"40001": true, "40P01": true, "57P01": true, "08006": true, "53300": true, "25P03": true, "57P05": true,
		"22021": false, "22003": false, "23505": false, "42P01": false,
	} {
		if got := store.Transient(fmt.Errorf("write back: %w", &pgconn.PgError{Code: code})); got != want {
			t.Errorf("SQLSTATE %s: Transient = %v, want %v", code, got, want)
		}
	}
	if !store.Transient(io.ErrUnexpectedEOF) || store.Transient(context.Canceled) || store.Transient(nil) {
		t.Error("a lost connection is transient; a cancelled context and no error are not")
	}
	data := fmt.Errorf("write back: %w", &store.DataError{Err: errors.New("json: unsupported value: NaN")})
	if store.Transient(data) || store.RefusedCause(data) != "" {
		t.Error("an error some row's values met before reaching the server is neither transient nor the database refusing writes")
	}
}

// A statement pgx prepared before a migration changed its table's columns fails once with
// "cached plan must not change result type"; pgx then drops it from its cache, so the error is
// one to retry (a write-back splitting its group over it marked items write_refused).
func TestAChangedResultTypeIsRetried(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `CREATE TABLE result_type_probe (a int, b int); INSERT INTO result_type_probe VALUES (1, 2)`); err != nil {
		t.Fatal(err)
	}
	var a, b int
	if err := conn.QueryRow(ctx, `SELECT * FROM result_type_probe WHERE $1::int > 0`, 1).Scan(&a, &b); err != nil {
		t.Fatal(err)
	}
	// A migration on another session changes the table under the cached statement.
	if _, err := pool.Exec(ctx, `ALTER TABLE result_type_probe ADD COLUMN c int`); err != nil {
		t.Fatal(err)
	}
	err = conn.QueryRow(ctx, `SELECT * FROM result_type_probe WHERE $1::int > 0`, 1).Scan(&a, &b)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "0A000" {
		t.Fatalf("a cached statement after its result changed: %v, want SQLSTATE 0A000", err)
	}
	if !store.Transient(err) {
		t.Errorf("%v: Transient = false, want true", err)
	}
	var c *int
	if err := conn.QueryRow(ctx, `SELECT * FROM result_type_probe WHERE $1::int > 0`, 1).Scan(&a, &b, &c); err != nil {
		t.Fatalf("the same statement again: %v, want it prepared anew", err)
	}
	if pgErr.Routine != "RevalidateCachedQuery" {
		t.Errorf("the error comes from %q; Transient tells it by RevalidateCachedQuery", pgErr.Routine)
	}
	if store.Transient(&pgconn.PgError{Code: "0A000", Message: "cannot use COPY in a read-only transaction"}) {
		t.Error("any other 0A000 (a feature not supported) is not transient")
	}
}

// The migrator's own connection, outside the pools, is bounded as theirs are: frozen between
// a migration's statements, it would hold ACCESS EXCLUSIVE locks that every collector's
// queries wait behind. An operator's own bound is kept.
func TestAMigratorsConnectionIsBoundedToo(t *testing.T) {
	ctx := context.Background()
	url := storetest.NewDatabase(t)
	for _, c := range []struct{ url, want string }{
		{url, "1min"},
		{url + "&options=-c%20idle_in_transaction_session_timeout%3D5min", "5min"},
	} {
		conn, err := store.Connect(ctx, c.url)
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = conn.QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&got)
		conn.Close(ctx)
		if err != nil || got != c.want {
			t.Fatalf("idle_in_transaction_session_timeout = %q (%v), want %s", got, err, c.want)
		}
	}
}

// Every migration's transaction is bounded, not only the first: tern's RESET ALL after each
// step undid the connection's bound, so a migrator frozen in a later step held its locks for
// good.
func TestEveryMigrationStepIsBounded(t *testing.T) {
	ctx := context.Background()
	conn, err := store.Connect(ctx, storetest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	m, err := migrate.NewMigrator(ctx, conn, "bound_test_version")
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		m.AppendMigration(fmt.Sprintf("step %d", i), fmt.Sprintf(
			`CREATE TABLE bound_seen_%d AS SELECT current_setting('idle_in_transaction_session_timeout')
				|| ' ' || current_setting('lock_timeout') || ' ' || current_setting('statement_timeout') AS v`, i), "")
	}
	var steps []int32
	store.BoundSteps(ctx, conn, m, func(s store.Step) { steps = append(steps, s.Sequence) })
	if err := m.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(steps, []int32{1, 2, 3}) {
		t.Fatalf("onStart saw steps %v, want 1 2 3", steps)
	}
	for i := 1; i <= 3; i++ {
		var got string
		if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT v FROM bound_seen_%d`, i)).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != "1min 10s 0" {
			t.Errorf("step %d ran with idle_in_transaction, lock and statement timeouts %q, want 1min 10s 0", i, got)
		}
	}
}

// A migration step waiting for a table lock behind a long transaction gives up after
// migrationLockTimeout, saying so, rather than queue every claim and write-back behind its
// ACCESS EXCLUSIVE request; run again once the lock is free, it applies.
func TestAMigrationBehindALongTransactionGivesUpSayingSo(t *testing.T) {
	ctx := context.Background()
	pool, url := storetest.NewPool(t)
	defer store.SetMigrationLockTimeout(200 * time.Millisecond)()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE tracked_items IN ACCESS SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	err = store.MigrateTo(ctx, url, 0, store.MigrateHooks{}) // dropping the tables needs their ACCESS EXCLUSIVE lock
	if err == nil || !strings.Contains(err.Error(), "for a lock another session holds") || !strings.Contains(err.Error(), "run it again") {
		t.Fatalf("migrate down behind a held lock: %v; want it to give up saying so", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	latest, err := store.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	if v, err := store.CurrentVersion(ctx, pool); err != nil || v != latest {
		t.Fatalf("after the failed step the schema is at %d (%v); want it untouched at %d", v, err, latest)
	}
}

// A client frozen inside a transaction (a paused VM, SIGSTOP) must not keep its row locks, and
// so its items, from every claim for good: the server ends the transaction. An operator's own
// bound is kept.
func TestAFrozenTransactionIsEndedByTheServer(t *testing.T) {
	ctx := context.Background()
	_, url := storetest.NewPool(t)
	// Long enough that a loaded machine's pause between BEGIN and the UPDATE is not taken for
	// the frozen client.
	pool, err := store.Open(ctx, store.PoolConfig{URL: url, MaxConns: 2, IdleInTransaction: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `CREATE TABLE frozen (id int PRIMARY KEY); INSERT INTO frozen VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if _, err := tx.Exec(ctx, `UPDATE frozen SET id = id WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	// The holder now does nothing, as a frozen process would. A waiter that does not skip
	// locked rows returns only once the lock is gone.
	other, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	if _, err := other.Exec(ctx, `SET lock_timeout = '60s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `SELECT id FROM frozen WHERE id = 1 FOR UPDATE`); err != nil {
		t.Fatalf("the frozen transaction's lock was not freed by the server: %v", err)
	}
	if err := tx.Commit(ctx); err == nil {
		t.Fatal("the frozen transaction committed after the server ended it")
	}

	// An operator's bound (here in the URL's options) is not replaced.
	own, err := store.Open(ctx, store.PoolConfig{URL: url + "&options=-c%20idle_in_transaction_session_timeout%3D5min", MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer own.Close()
	var got string
	if err := own.QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&got); err != nil {
		t.Fatal(err)
	}
	if got != "5min" {
		t.Fatalf("idle_in_transaction_session_timeout = %s, want the URL's 5min", got)
	}
	if err := pool.QueryRow(ctx, `SHOW idle_in_transaction_session_timeout`).Scan(&got); err != nil || got != "2s" {
		t.Fatalf("default bound = %s (%v), want 2s", got, err)
	}
}

// A pooled session waits for a lock only so long: someone else's DDL (an ALTER TABLE or a LOCK
// TABLE left open in psql) fails every claim, write-back and gauge as lock_not_available, which
// is logged and retried, instead of stopping them in silence for as long as it is held. An
// operator's own bound is kept.
func TestPooledSessionsWaitForLocksOnlySoLong(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, url := storetest.NewPool(t)
	for _, c := range []struct{ url, want string }{
		{url, "1min"},
		{url + "&options=-c%20lock_timeout%3D5s", "5s"},
	} {
		pool, err := store.Open(ctx, store.PoolConfig{URL: c.url, MaxConns: 1})
		if err != nil {
			t.Fatal(err)
		}
		var got string
		err = pool.QueryRow(ctx, `SHOW lock_timeout`).Scan(&got)
		pool.Close()
		if err != nil || got != c.want {
			t.Fatalf("lock_timeout = %q (%v), want %s", got, err, c.want)
		}
	}
}

// A migration that meets another session holding the migration lock says who holds it before
// it waits (a frozen or hung migrator is otherwise a silent wait), then goes on once the lock
// is free; with the lock free it says nothing.
func TestAMigrationSaysWhoHoldsTheMigrationLock(t *testing.T) {
	t.Parallel()
	url := storetest.NewDatabase(t)
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	cfg.RuntimeParams["application_name"] = "the-other-migrator"
	other, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)
	// tern's own lock, as its Migrator takes it: a key other than tern's would not hold us up.
	if _, err := other.Exec(ctx, `SELECT pg_advisory_lock(9628173550095224)`); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- store.MigrateTo(ctx, url, store.Latest, store.MigrateHooks{OnWait: func(h string) { waiting <- h }})
	}()
	var holder string
	select {
	case holder = <-waiting:
	case err := <-done:
		t.Fatalf("the migration ended (%v) without waiting for the lock another session holds", err)
	case <-time.After(testkit.Timeout):
		t.Fatal("the migration did not say it waits for the lock")
	}
	if !strings.Contains(holder, fmt.Sprintf("pid %d", other.PgConn().PID())) || !strings.Contains(holder, "the-other-migrator") {
		t.Errorf("holder %q; want the other session's pid and application name", holder)
	}
	select {
	case err := <-done:
		t.Fatalf("the migration ended (%v) while the lock was held", err)
	default:
	}
	if _, err := other.Exec(ctx, `SELECT pg_advisory_unlock(9628173550095224)`); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the migration, once the lock was free: %v", err)
		}
	case <-time.After(testkit.Timeout):
		t.Fatal("the migration did not go on once the lock was free")
	}
	if err := store.MigrateTo(ctx, url, store.Latest, store.MigrateHooks{OnWait: func(h string) { t.Errorf("waiting for %q with the lock free", h) }}); err != nil {
		t.Fatal(err)
	}
}
