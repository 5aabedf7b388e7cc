package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

// Through a real PgBouncer in transaction mode: migrations over database.direct_url,
// import-items, collect-due and the daemon with database.query_exec_mode simple_protocol; the
// daemon, with no session for LISTEN, says once that it falls back to timed wake-ups.
func TestThroughPgBouncerTransactionMode(t *testing.T) {
	db := catalogEnv(t, true)
	bouncer := storetest.PgBouncer(t, db, 2)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	migrateCmd(t, db, "down", "--to", "0")
	t.Setenv("COLLECTOR_DATABASE_DIRECT_URL", db)
	migrateCmd(t, bouncer, "up")
	latest, _ := store.LatestVersion()
	if v := schemaVersion(t, db); v != latest {
		t.Fatalf("migrate up over database.direct_url: version %d, want %d", v, latest)
	}
	t.Setenv("COLLECTOR_DATABASE_DIRECT_URL", "")
	t.Setenv("COLLECTOR_DATABASE_QUERY_EXEC_MODE", "simple_protocol")
	if out := migrateCmd(t, bouncer, "status"); !strings.Contains(out, "schema at version") {
		t.Fatalf("migrate status through PgBouncer: %s", out)
	}

	if out, errOut, err := runCollector(t, "import-items", "--database-url", bouncer, "--targets", "../../configs/import-targets.yaml"); err != nil {
		t.Fatalf("import-items through PgBouncer: %v\n%s%s", err, out, errOut)
	}
	tracked := count(`SELECT count(*) FROM tracked_items`)
	if tracked == 0 {
		t.Fatal("nothing imported")
	}
	if out, errOut, err := runCollector(t, "collect-due", "--database-url", bouncer); err != nil {
		t.Fatalf("collect-due through PgBouncer: %v\n%s%s", err, out, errOut)
	}
	if n := count(`SELECT count(*) FROM tracked_items WHERE last_collected_at IS NOT NULL AND lease_token IS NULL`); n != tracked {
		t.Fatalf("collect-due through PgBouncer collected %d of %d", n, tracked)
	}

	if _, err := conn.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now(), last_collected_at = NULL`); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var out, errOut bytes.Buffer
	done := make(chan int, 1)
	go func() {
		done <- execute(rctx, []string{"run", "--database-url", bouncer, "--http-addr", "127.0.0.1:0", "--max-sleep", "1s", "--log-format", "json"}, &out, &errOut)
	}()
	deadline := time.Now().Add(60 * time.Second)
	for count(`SELECT count(*) FROM tracked_items WHERE last_collected_at IS NULL`) > 0 {
		if time.Now().After(deadline) {
			cancel()
			testkit.Recv(t, done, testkit.Timeout, "run to stop")
			t.Fatalf("the daemon through PgBouncer did not collect everything; log:\n%s", errOut.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	if code := testkit.Recv(t, done, testkit.Timeout, "run to stop"); code != 0 {
		t.Fatalf("run exited %d; log:\n%s", code, errOut.String())
	}
	if n := strings.Count(errOut.String(), `"msg":"no session for LISTEN; falling back to timed wake-ups"`); n != 1 {
		t.Fatalf("the LISTEN fallback logged %d times, want once; log:\n%s", n, errOut.String())
	}
}

// With pgx's default statement cache through PgBouncer in transaction mode, two clients on one
// server connection collide on prepared statements; the error names the setting to change.
func TestPgBouncerStatementErrorNamesTheSetting(t *testing.T) {
	_, db := storetest.NewPool(t)
	bouncer := storetest.PgBouncer(t, db, 1)
	ctx := context.Background()
	var errs []error
	for range 2 {
		c, err := pgx.Connect(ctx, bouncer)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		var n int
		errs = append(errs, c.QueryRow(ctx, `SELECT count(*) FROM tracked_items WHERE collection_tier = $1`, "HOT_1M").Scan(&n))
	}
	err := errs[1]
	if !store.PoolerMismatch(err) {
		t.Fatalf("second client's statement: %v, want SQLSTATE 42P05 or 26000", err)
	}
	msg := store.ExplainPooler(err).Error()
	for _, want := range []string{"database.query_exec_mode: simple_protocol", "database.direct_url", "SQLSTATE"} {
		if !strings.Contains(msg, want) {
			t.Fatalf("error %q does not name %q", msg, want)
		}
	}
}
