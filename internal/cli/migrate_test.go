package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// emptyDB is a fresh database with no schema at all.
func emptyDB(t *testing.T) string {
	t.Helper()
	_, url := storetest.NewPool(t)
	migrateCmd(t, url, "down", "--to", "0")
	if v := schemaVersion(t, url); v != 0 {
		t.Fatalf("schema at %d after down --to 0", v)
	}
	return url
}

func migrateCmd(t *testing.T, url string, args ...string) string {
	t.Helper()
	t.Setenv("COLLECTOR_CONFIG", "")
	out, errOut, err := runCollector(t, append([]string{"migrate", "--database-url", url}, args...)...)
	if err != nil {
		t.Fatalf("migrate %v: %v\n%s%s", args, err, out, errOut)
	}
	return out
}

func schemaVersion(t *testing.T, url string) int32 {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	v, err := store.CurrentVersion(context.Background(), conn)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func tableExists(t *testing.T, url, table string) bool {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var ok bool
	if err := conn.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, table).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// A current schema whose partitions cover now migrates up successfully even when creating more
// ahead fails (here: a lock on the parent outlasts the DDL's lock timeout), with a warning.
func TestMigrateUpSucceedsWhenOnlyPartitionsAheadFail(t *testing.T) {
	pool, url := storetest.NewPool(t)
	t.Setenv("COLLECTOR_HISTORY_PARTITION_AHEAD", "240h") // past the week the database has
	tx, err := pool.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	if _, err := tx.Exec(context.Background(), `LOCK TABLE auction_snapshots IN SHARE UPDATE EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	out, errOut, err := runCollector(t, "migrate", "--database-url", url, "up")
	if err != nil || !strings.Contains(out, "schema at version") || !strings.Contains(errOut, "history partitions not created ahead") {
		t.Fatalf("migrate up: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
}

// Every migration's down section runs, and up brings the schema back: a full round trip, then
// steps with --to, and the dry run changes nothing.
func TestMigrateDownUpRoundTrip(t *testing.T) {
	url := emptyDB(t)
	latest, err := store.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	if tableExists(t, url, "tracked_items") {
		t.Fatal("tracked_items survived down --to 0")
	}
	out := migrateCmd(t, url, "up", "--to", "1", "--dry-run", "--show-sql")
	if !strings.Contains(out, "up 001 001_schema.sql") || !strings.Contains(out, "CREATE TABLE") || strings.Contains(out, "002_") {
		t.Fatalf("dry run output:\n%s", out)
	}
	if v := schemaVersion(t, url); v != 0 {
		t.Fatalf("--dry-run changed the schema to %d", v)
	}
	migrateCmd(t, url, "up", "--to", "1")
	if v := schemaVersion(t, url); v != 1 {
		t.Fatalf("up --to 1: version %d", v)
	}
	migrateCmd(t, url, "up")
	if v := schemaVersion(t, url); v != latest || !tableExists(t, url, "tracked_items") {
		t.Fatalf("up: version %d, want %d", v, latest)
	}
	if latest == 1 {
		// One below the first version drops everything: only an explicit --to 0 does that.
		out, _, err = runCollector(t, "migrate", "--database-url", url, "down")
		if err == nil || !strings.Contains(err.Error(), "--to 0") || !tableExists(t, url, "tracked_items") {
			t.Fatalf("down without --to from version 1: %v\n%s", err, out)
		}
		migrateCmd(t, url, "down", "--to", "0")
	} else {
		migrateCmd(t, url, "down")
	}
	if v := schemaVersion(t, url); v != latest-1 {
		t.Fatalf("down: version %d, want %d", v, latest-1)
	}
	out, _, err = runCollector(t, "migrate", "--database-url", url, "down", "--to", "99")
	if err == nil || !strings.Contains(err.Error(), "target version 99") {
		t.Fatalf("down --to 99: %v\n%s", err, out)
	}
	migrateCmd(t, url, "up")
	if v := schemaVersion(t, url); v != latest {
		t.Fatalf("up again: version %d", v)
	}
}

// A bare `collector migrate` prints its help and applies nothing; status exits non-zero while
// migrations are pending.
func TestBareMigrateAppliesNothingAndStatusFailsWhilePending(t *testing.T) {
	url := emptyDB(t)
	t.Setenv("COLLECTOR_CONFIG", "")
	// A Job or init container written `collector migrate` must not exit 0 having applied nothing.
	_, errOut, err := runCollector(t, "migrate", "--database-url", url)
	var usage usageError
	if !errors.As(err, &usage) || !strings.Contains(err.Error(), "collector migrate up") {
		t.Fatalf("bare migrate: %v (want a usage error naming `migrate up`)\n%s", err, errOut)
	}
	if v := schemaVersion(t, url); v != 0 {
		t.Fatalf("bare migrate moved the schema to %d", v)
	}
	out, _, err := runCollector(t, "migrate", "--database-url", url, "status")
	if err == nil || !strings.Contains(err.Error(), "migrations pending") || !strings.Contains(out, "pending: 001_schema.sql") {
		t.Fatalf("status with pending migrations: err %v\n%s", err, out)
	}
	migrateCmd(t, url, "up")
	if out := migrateCmd(t, url, "status"); strings.Contains(out, "pending") {
		t.Fatalf("status after up:\n%s", out)
	}
}

// Migrations over a connection in the simple protocol (the mark of a transaction-pooling
// PgBouncer) are refused without database.direct_url: tern's session lock could be taken on one
// server connection and released on another, left held for every later migration. A dry run
// takes no lock and still plans.
func TestMigrateRefusesTheSimpleProtocolWithoutADirectURL(t *testing.T) {
	url := emptyDB(t)
	t.Setenv("COLLECTOR_CONFIG", "")
	t.Setenv("COLLECTOR_DATABASE_QUERY_EXEC_MODE", "simple_protocol")
	_, errOut, err := runCollector(t, "migrate", "--database-url", url, "up")
	if err == nil || !strings.Contains(err.Error(), "database.direct_url") || !strings.Contains(err.Error(), "simple protocol") {
		t.Fatalf("migrate up in the simple protocol: %v (want a refusal naming database.direct_url)\n%s", err, errOut)
	}
	if v := schemaVersion(t, url); v != 0 {
		t.Fatalf("the refused migrate moved the schema to %d", v)
	}
	if out := migrateCmd(t, url, "up", "--dry-run"); !strings.Contains(out, "would run") {
		t.Fatalf("dry run in the simple protocol:\n%s", out)
	}
	t.Setenv("COLLECTOR_DATABASE_DIRECT_URL", url)
	migrateCmd(t, url, "up")
}

// A database the pre-release chain of migrations made gets one message from every command that
// migrates or checks the schema: what it is, how to make it again, and what to run then.
func TestPreReleaseDatabaseSaysRecreate(t *testing.T) {
	catalogEnv(t, true)
	db := storetest.NewPreReleaseDatabase(t)
	want := fmt.Sprintf("the database at %s was created by a pre-release schema (version 14, made by another text of the migrations than this binary's); "+
		"this release creates the schema with one migration and cannot upgrade it: drop and recreate the database "+
		"(or empty it: DROP SCHEMA public CASCADE; CREATE SCHEMA public), then migrate it; run `collector migrate up`", store.Where(db))
	for _, args := range [][]string{{"migrate", "up"}, {"migrate", "up", "--dry-run"}, {"migrate", "down"}, {"migrate", "status"}, {"status"}, {"collect-due"}} {
		out, _, err := runCollector(t, append(args, "--database-url", db)...)
		if err == nil || err.Error() != want {
			t.Errorf("%v: err = %v, want %q", args, err, want)
		}
		if out != "" {
			t.Errorf("%v printed %q before the error", args, out)
		}
	}
	if v := schemaVersion(t, db); v != 14 {
		t.Fatalf("schema version %d after the refused commands, want 14 untouched", v)
	}
}

// Arguments that could never be right are refused before anything connects: a negative
// version (which would have meant "one down"), an empty item id, an empty endpoint, a negative
// limit of a check.
func TestImpossibleArgumentsAreUsageErrors(t *testing.T) {
	t.Setenv("COLLECTOR_CONFIG", "")
	unreachable := "postgres://u@127.0.0.1:1/x?connect_timeout=2"
	for _, args := range [][]string{
		{"migrate", "--database-url", unreachable, "down", "--to", "-5"},
		{"collect", "--database-url", unreachable, " "},
		{"touch", "--database-url", unreachable, ""},
		{"outbox", "list", "--database-url", unreachable, "--limit", "-5"},
		{"items", "--database-url", unreachable, "--limit", "-5"},
		{"items", "--database-url", unreachable, "--tier", "BOGUS"},
		{"purge:synthetic", "--database-url", unreachable, "--batch-size", "-5"},
		// An unset variable or a sign typo must not widen or switch off what was asked.
		{"items", "--database-url", unreachable, ""},
		{"items", "pin", "--database-url", unreachable, " ", "HOT_1M"},
		{"items", "unpin", "--database-url", unreachable, ""},
		{"items", "untrack", "--database-url", unreachable, ""},
		{"packing", "off", "--database-url", unreachable, "--endpoint", ""},
		{"packing", "on", "--database-url", unreachable, "--endpoint", "/df/items"},
		{"status", "--database-url", unreachable, "--check", "--max-idle", "-1s"},
		{"status", "--database-url", unreachable, "--check", "--min-instances", "-1"},
		{"status", "--database-url", unreachable, "--check", "--max-overdue", "-1"},
		{"status", "--database-url", unreachable, "--check", "--max-outbox-age", "-1m"},
	} {
		_, _, err := runCollector(t, args...)
		var ue usageError
		if !errors.As(err, &ue) || strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("%q: %v; want a usage error before connecting", args, err)
		}
	}
}

// A rollback runs the older release's `migrate up` (a Helm hook, a Job per version) against the
// schema a newer release migrated: nothing to apply, so it succeeds saying so, and every command
// of the older binary warns once that the schema is newer. `migrate down` and `status` refuse,
// naming the newer release's binary.
func TestMigrateUpOnANewerSchemaAppliesNothing(t *testing.T) {
	pool, url := storetest.NewPool(t)
	latest, err := store.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `UPDATE schema_version SET version = $1`, latest+1); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COLLECTOR_CONFIG", "")
	out, errOut, err := runCollector(t, "migrate", "--database-url", url, "up")
	if err != nil || !strings.Contains(out, fmt.Sprintf("schema at version %d, newer than this binary's %d: nothing applied", latest+1, latest)) ||
		!strings.Contains(errOut, "nothing to apply") {
		t.Fatalf("migrate up on a newer schema: %v\nstdout:\n%s\nstderr:\n%s", err, out, errOut)
	}
	for _, args := range [][]string{{"down"}, {"status"}, {"up", "--to", fmt.Sprint(latest)}} {
		_, _, err := runCollector(t, append([]string{"migrate", "--database-url", url}, args...)...)
		if err == nil || !strings.Contains(err.Error(), "with that release's binary") {
			t.Errorf("migrate %v on a newer schema: %v, want a refusal naming the newer release's binary", args, err)
		}
	}
	if _, errOut, err := runCollector(t, "items", "--database-url", url); err != nil || !strings.Contains(errOut, "schema is newer than this binary's") {
		t.Fatalf("items on a newer schema: %v, want it to run and warn\nstderr:\n%s", err, errOut)
	}
}
