package storetest

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/testsignal"
)

// FillDisk makes pool's test database answer as a full disk does, until the returned
// function frees it: every INSERT, UPDATE and DELETE on tables, and every CREATE TABLE (the
// space probe's write), fails with the server's 53100 disk_full, raised by triggers. Writes to
// other tables succeed, as updates that fit in their pages do on a real full disk. The
// triggers make the error real PostgreSQL's without needing root for a small filesystem.
func FillDisk(tb testing.TB, pool *pgxpool.Pool, tables ...string) (free func()) {
	tb.Helper()
	exec := func(q string) {
		tb.Helper()
		if _, err := pool.Exec(context.Background(), q); err != nil {
			tb.Fatalf("storetest: %s: %v", q, err)
		}
	}
	var fill, unfill strings.Builder
	fill.WriteString(`
		CREATE FUNCTION storetest_disk_full() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'could not extend file: No space left on device (storetest)' USING ERRCODE = 'disk_full'; END $$;
		CREATE FUNCTION storetest_disk_full_ddl() RETURNS event_trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'could not extend file: No space left on device (storetest)' USING ERRCODE = 'disk_full'; END $$;
		CREATE EVENT TRIGGER storetest_disk_full ON ddl_command_start WHEN TAG IN ('CREATE TABLE')
			EXECUTE FUNCTION storetest_disk_full_ddl();`)
	unfill.WriteString(`DROP EVENT TRIGGER storetest_disk_full;`)
	for _, t := range tables {
		id := pgx.Identifier{t}.Sanitize()
		fill.WriteString(`CREATE TRIGGER storetest_disk_full BEFORE INSERT OR UPDATE OR DELETE ON ` + id +
			` FOR EACH STATEMENT EXECUTE FUNCTION storetest_disk_full();`)
		unfill.WriteString(`DROP TRIGGER storetest_disk_full ON ` + id + `;`)
	}
	unfill.WriteString(`DROP FUNCTION storetest_disk_full(); DROP FUNCTION storetest_disk_full_ddl();`)
	exec(fill.String())
	return func() { exec(unfill.String()) }
}

// WatchWrites gives a WriteHealth that signals every change of state to cause, for a test to
// wait for a write path's report.
func WatchWrites(tb testing.TB, cause store.WriteCause) (*store.WriteHealth, *testsignal.Signal[store.WriteState]) {
	var sig testsignal.Signal[store.WriteState]
	sig.Init(tb)
	wh := store.NewWriteHealth()
	wh.OnChange = func(s store.WriteState) {
		if s.Cause == cause {
			sig.Signal(s)
		}
	}
	return wh, &sig
}
