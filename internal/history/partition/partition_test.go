package partition_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

func upkeep(t *testing.T, pool *pgxpool.Pool, retention time.Duration) *partition.Partitions {
	t.Helper()
	p, err := partition.New(pool, pool, partition.Config{Interval: 24 * time.Hour, Ahead: 7 * 24 * time.Hour,
		Tables: []partition.Table{{Name: partition.Snapshots, Retention: retention}, {Name: partition.Sales, Retention: retention}}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

type bound struct {
	name         string
	lower, upper *time.Time
}

func bounds(t *testing.T, pool *pgxpool.Pool, table string) []bound {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT c.relname, (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'FROM \(''([^'']+)''\)'))[1]::timestamptz,
		       (regexp_match(pg_get_expr(c.relpartbound, c.oid), 'TO \(''([^'']+)''\)'))[1]::timestamptz
		FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass
		ORDER BY 2 NULLS FIRST`, table)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (bound, error) {
		var b bound
		return b, r.Scan(&b.name, &b.lower, &b.upper)
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestPartitionsCoverThePastAndAWeekAheadAndRunsAgree(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	// Several instances at once: they serialise and the second finds nothing to do.
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := upkeep(t, pool, 0).RunOnce(ctx)
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	states, err := upkeep(t, pool, 0).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range states {
		if len(st.Created) != 0 || st.Ahead < 7*24*time.Hour {
			t.Errorf("%s: created %v on a covered table, ahead %v", st.Table, st.Created, st.Ahead)
		}
		bs := bounds(t, pool, st.Table)
		if bs[0].lower != nil {
			t.Errorf("%s: no archive partition below %v", st.Table, bs[0].lower)
		}
		for i := 1; i < len(bs); i++ {
			if !bs[i].lower.Equal(*bs[i-1].upper) {
				t.Errorf("%s: gap or overlap between %s and %s", st.Table, bs[i-1].name, bs[i].name)
			}
		}
	}
	// Rows of any time up to a week ahead have a home: old sales, today's snapshots.
	if _, err := pool.Exec(ctx, `INSERT INTO auction_sales (item_id, sold_at, seq, quantity, unit_price, total_price)
		VALUES ('a', '2019-03-01', 0, 1, 1, 1), ('a', now() + interval '6 days', 0, 1, 1, 1)`); err != nil {
		t.Fatal(err)
	}
}

// TestRetentionDropsWholePartitionsByTheirBounds: a partition is dropped when its upper bound is
// past the retention, whatever its name says, and rows are never deleted one by one.
func TestRetentionDropsWholePartitionsByTheirBounds(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	// Start from no partitions, then lay out the last ten days by hand under misleading names.
	for _, b := range bounds(t, pool, partition.Snapshots) {
		if _, err := pool.Exec(ctx, `DROP TABLE `+pgx.Identifier{b.name}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	var today time.Time
	if err := pool.QueryRow(ctx, `SELECT date_bin('1 day', now(), '2000-01-01 00:00:00+00')`).Scan(&today); err != nil {
		t.Fatal(err)
	}
	for d := -10; d < 1; d++ {
		lo, hi := today.AddDate(0, 0, d), today.AddDate(0, 0, d+1)
		name := fmt.Sprintf("auction_snapshots_p2999%04d", d+100) // names say nothing true
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF auction_snapshots FOR VALUES FROM ('%s') TO ('%s')`,
			name, lo.Format(time.RFC3339), hi.Format(time.RFC3339))); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, reason, listing_count, listing_quantity)
			VALUES ('a', gen_random_uuid(), $1, 'HOT_1M', 'first', 1, 1)`, lo.Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE not_a_partition (x int)`); err != nil {
		t.Fatal(err)
	}
	states, err := upkeep(t, pool, 3*24*time.Hour).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The pass creates first (an archive below the oldest day too), so the archive goes with them.
	days := slices.DeleteFunc(slices.Clone(states[0].Dropped), func(n string) bool { return strings.Contains(n, "_before_") })
	if len(days) != 7 {
		t.Fatalf("dropped %v, want the 7 partitions whose whole day is older than 3 days", states[0].Dropped)
	}
	var kept int
	var oldest time.Time
	if err := pool.QueryRow(ctx, `SELECT count(*), min(collected_at) FROM auction_snapshots`).Scan(&kept, &oldest); err != nil {
		t.Fatal(err)
	}
	if kept != 4 || oldest.Before(today.AddDate(0, 0, -3)) {
		t.Fatalf("%d rows kept, oldest %v", kept, oldest)
	}
	bs := bounds(t, pool, partition.Snapshots)
	if bs[0].lower != nil || !bs[0].upper.Equal(today.AddDate(0, 0, -3)) {
		t.Fatalf("the archive should be recreated below the oldest kept day: %+v", bs[0])
	}
	names := []string{}
	for _, b := range bs {
		names = append(names, b.name)
	}
	if !slices.Contains(names, "auction_snapshots_p29990097") {
		t.Fatalf("a kept day's partition is gone: %v", names)
	}
}

// Day after day, retention drops the oldest day and nothing else: the archive below follows
// the oldest partition up instead of leaving a gap that would be filled again.
func TestRetentionDayAfterDayDropsOnlyThePastDays(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	p := upkeep(t, pool, 3*24*time.Hour)
	for _, b := range bounds(t, pool, partition.Snapshots) {
		if b.lower == nil {
			if _, err := pool.Exec(ctx, `DROP TABLE `+pgx.Identifier{b.name}.Sanitize()); err != nil {
				t.Fatal(err)
			}
		}
	}
	var today time.Time
	if err := pool.QueryRow(ctx, `SELECT date_bin('1 day', now(), '2000-01-01 00:00:00+00')`).Scan(&today); err != nil {
		t.Fatal(err)
	}
	for d := -6; d < 0; d++ {
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE auction_snapshots_old%d PARTITION OF auction_snapshots FOR VALUES FROM ('%s') TO ('%s')`,
			-d, today.AddDate(0, 0, d).Format(time.RFC3339), today.AddDate(0, 0, d+1).Format(time.RFC3339))); err != nil {
			t.Fatal(err)
		}
	}
	// An empty archive below them, as a database that has run for a while has.
	if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE auction_snapshots_arch PARTITION OF auction_snapshots FOR VALUES FROM (MINVALUE) TO ('%s')`,
		today.AddDate(0, 0, -6).Format(time.RFC3339))); err != nil {
		t.Fatal(err)
	}
	first, err := p.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Days -6, -5, -4 end at or before now - 3 days.
	for _, d := range []string{"auction_snapshots_old6", "auction_snapshots_old5", "auction_snapshots_old4"} {
		if !slices.Contains(first[0].Dropped, d) {
			t.Fatalf("first pass dropped %v, want the 3 days past retention", first[0].Dropped)
		}
	}
	again, err := p.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(again[0].Created) != 0 || len(again[0].Dropped) != 0 {
		t.Fatalf("a second pass churns: created %v, dropped %v", again[0].Created, again[0].Dropped)
	}
	bs := bounds(t, pool, partition.Snapshots)
	if bs[0].lower != nil || !bs[0].upper.Equal(*bs[1].lower) {
		t.Fatalf("the archive does not reach the oldest partition: %s up to %v, then %s from %v", bs[0].name, bs[0].upper, bs[1].name, bs[1].lower)
	}
}

func names(bs []bound) []string {
	var out []string
	for _, b := range bs {
		out = append(out, b.name)
	}
	return out
}

// A drop pass frozen while it holds the drop lock (SIGSTOP, a paused VM) sits idle in a session
// outside any transaction, where no idle-transaction bound reaches: the server ends the idle
// session, and the lock with it, so the other instances' drops do not stop for good.
func TestAFrozenDropPassLetsGoOfTheLock(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	var version int
	if err := pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&version); err != nil || version < 140000 {
		t.Skipf("idle_session_timeout needs PostgreSQL 14 (server %d, %v)", version, err)
	}
	storetest.PartitionDays(t, pool, -10, 1, partition.Sales)
	frozen := upkeep(t, pool, 3*24*time.Hour)
	partition.BoundDropIdle(frozen, time.Second)
	locked, release := make(chan struct{}), make(chan struct{})
	partition.WhileDropLocked(frozen, func() { close(locked); <-release })
	var thaw sync.Once
	defer thaw.Do(func() { close(release) }) // on failure too: the pool's close waits for its connection
	done := make(chan error, 1)
	go func() {
		_, err := frozen.RunOnce(ctx)
		done <- err
	}()
	select {
	case <-locked:
	case err := <-done:
		t.Fatalf("the pass ended without reaching its drop: %v", err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET lock_timeout = '30s'`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(partition.DropLockKey)); err != nil {
		t.Fatalf("the frozen pass kept the drop lock: %v", err)
	}
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, int64(partition.DropLockKey)); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `RESET lock_timeout`); err != nil {
		t.Fatal(err)
	}
	thaw.Do(func() { close(release) })
	if err := <-done; err == nil {
		t.Fatal("the frozen pass went on as if it still held the drop lock")
	}
}

// Two drop passes at once: the one that finds the lock taken skips its drop (still creating what
// is missing) instead of waiting, and the old days are dropped once, by the other.
func TestTwoDropPassesAtOnceOneSkipsAndTheDaysGoOnce(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	storetest.PartitionDays(t, pool, -10, 1, partition.Snapshots)
	storetest.PartitionDays(t, pool, -10, 1, partition.Sales)
	first := upkeep(t, pool, 3*24*time.Hour)
	locked, release := make(chan struct{}), make(chan struct{})
	partition.WhileDropLocked(first, func() { close(locked); <-release })
	type result struct {
		states []partition.TableState
		err    error
	}
	done := make(chan result, 1)
	go func() {
		st, err := first.RunOnce(ctx)
		done <- result{st, err}
	}()
	select {
	case <-locked:
	case r := <-done:
		t.Fatalf("the first pass ended without reaching its drop: %v", r.err)
	}
	// While the first holds the drop, a day ahead goes missing: the second pass must recreate it.
	ahead := bounds(t, pool, partition.Snapshots)
	lost := ahead[len(ahead)-1].name
	if _, err := pool.Exec(ctx, `DROP TABLE `+pgx.Identifier{lost}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	second, err := upkeep(t, pool, 3*24*time.Hour).RunOnce(ctx)
	if err != nil {
		t.Fatalf("the pass that found the drop taken: %v", err)
	}
	for _, st := range second {
		if !st.DropSkipped || len(st.Dropped) != 0 {
			t.Errorf("%s: second pass skipped %v, dropped %v; want it to leave the drop to the first", st.Table, st.DropSkipped, st.Dropped)
		}
	}
	if !slices.Contains(second[0].Created, lost) {
		t.Errorf("the second pass created %v, not the lost %s: a skipped drop held creation back", second[0].Created, lost)
	}
	close(release)
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	for i, st := range r.states {
		var days []string
		for _, n := range st.Dropped {
			if !strings.Contains(n, "_before_") {
				days = append(days, n)
			}
		}
		if len(days) != 7 || st.DropSkipped {
			t.Errorf("%s: first pass dropped %v (skipped %v), want the 7 days past retention", st.Table, st.Dropped, st.DropSkipped)
		}
		left := names(bounds(t, pool, st.Table))
		for d := -10; d < -3; d++ {
			if slices.Contains(left, fmt.Sprintf("%s_day%d", st.Table, d+100)) {
				t.Errorf("%s: day %d is still there: %v", st.Table, d, left)
			}
		}
		if again := second[i]; again.Table != st.Table {
			t.Fatalf("states out of order: %s, %s", again.Table, st.Table)
		}
	}
}

// A drop that cannot get its lock (a long transaction holds an old day) gives up at the drop
// lock timeout instead of stalling; creation ahead and the other table's drop went through
// anyway, and the next pass, once the transaction ends, drops the day.
func TestCreationAndTheOtherTableGoOnWhenADropFails(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	storetest.PartitionDays(t, pool, -10, 1, partition.Snapshots)
	storetest.PartitionDays(t, pool, -10, 1, partition.Sales)
	cfg := partition.Config{Interval: 24 * time.Hour, Ahead: 7 * 24 * time.Hour, DropLockTimeout: 100 * time.Millisecond,
		Tables: []partition.Table{{Name: partition.Snapshots, Retention: 3 * 24 * time.Hour}, {Name: partition.Sales, Retention: 3 * 24 * time.Hour}}}
	p, err := partition.New(pool, pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	held := fmt.Sprintf("%s_day%d", partition.Snapshots, -10+100)
	if _, err := tx.Exec(ctx, `LOCK TABLE `+pgx.Identifier{held}.Sanitize()+` IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	states, err := p.RunOnce(ctx)
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "55P03" || !strings.Contains(err.Error(), held) {
		t.Fatalf("pass with %s locked: %v, want a lock timeout detaching it", held, err)
	}
	for _, st := range states {
		if st.Ahead < 7*24*time.Hour || len(st.Created) < 7 {
			t.Errorf("%s: created %v, %v ahead: a failing drop held creation back", st.Table, st.Created, st.Ahead)
		}
	}
	if sales := states[1]; len(sales.Dropped) < 7 {
		t.Errorf("auction_sales dropped %v: the snapshots' failure skipped it", sales.Dropped)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	again, err := p.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(again[0].Dropped, held) || slices.Contains(names(bounds(t, pool, partition.Snapshots)), held) {
		t.Fatalf("after the transaction ended, the pass dropped %v; %s should be gone", again[0].Dropped, held)
	}
}

// Creating partitions never waits for writers: a writer's open transaction on the parent does
// not stop the attach (CREATE TABLE … PARTITION OF would wait for it and time out).
func TestCreatingPartitionsDoesNotWaitForAnOpenWrite(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	storetest.PartitionDays(t, pool, -1, 1, partition.Snapshots)
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, reason, listing_count, listing_quantity)
		VALUES ('a', gen_random_uuid(), now(), 'HOT_1M', 'first', 1, 1)`); err != nil {
		t.Fatal(err)
	}
	states, err := upkeep(t, pool, 0).RunOnce(ctx)
	if err != nil {
		t.Fatalf("creating beside an open write: %v", err)
	}
	if st := states[0]; len(st.Created) < 7 || st.Ahead < 7*24*time.Hour {
		t.Fatalf("created %v, %v ahead", st.Created, st.Ahead)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The attached partitions carry the parent's keys: a retried snapshot of one claim cannot land twice.
	var claim string
	if err := pool.QueryRow(ctx, `INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, reason, listing_count, listing_quantity)
		VALUES ('a', gen_random_uuid(), now() + interval '3 days', 'HOT_1M', 'first', 1, 1) RETURNING claim_token::text`).Scan(&claim); err != nil {
		t.Fatal(err)
	}
	_, err = pool.Exec(ctx, `INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, reason, listing_count, listing_quantity)
		SELECT 'a', claim_token, collected_at, 'HOT_1M', 'first', 1, 1 FROM auction_snapshots WHERE claim_token = $1`, claim)
	if !errors.As(err, new(*pgconn.PgError)) || err.(*pgconn.PgError).Code != "23505" {
		t.Fatalf("a second snapshot of one claim in an attached partition: %v, want a unique violation", err)
	}
}

// A creator frozen while it holds the creation lock (a paused VM) must not hold every other
// creator, and so every write-back that needs a partition, for good: the wait is bounded by
// the lock timeout and ends in an error the next pass retries.
func TestACreatorWaitsForAHeldCreationLockOnlySoLong(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = holder.Rollback(ctx) }()
	if _, err := holder.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(partition.CreateLockKey)); err != nil {
		t.Fatal(err)
	}
	_, err = upkeep(t, pool, 0).RunOnce(ctx)
	var pg *pgconn.PgError
	if !errors.As(err, &pg) || pg.Code != "55P03" {
		t.Fatalf("creating while the lock is held: %v, want a lock timeout (55P03)", err)
	}
}

// Behind a transaction pooler (the pool in the simple protocol) with no direct pool, drops are
// refused with an error naming database.direct_url, and partitions are still created; with a
// direct pool they go through.
func TestDropsNeedASessionCreationDoesNot(t *testing.T) {
	_, db := storetest.NewPool(t)
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(db)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	pooled, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	defer pooled.Close()
	direct, err := pgxpool.New(ctx, db)
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	storetest.PartitionDays(t, direct, -10, 1, partition.Snapshots)
	states, err := upkeep(t, pooled, 3*24*time.Hour).RunOnce(ctx)
	if !errors.Is(err, partition.ErrNoSession) || !strings.Contains(err.Error(), "database.direct_url") {
		t.Fatalf("dropping with no session: %v, want ErrNoSession", err)
	}
	if st := states[0]; len(st.Dropped) != 0 || st.Ahead < 7*24*time.Hour {
		t.Fatalf("without a session: dropped %v, %v ahead; want nothing dropped, a week created", st.Dropped, st.Ahead)
	}
	p, err := partition.New(pooled, direct, partition.Config{Interval: 24 * time.Hour, Ahead: 7 * 24 * time.Hour,
		Tables: []partition.Table{{Name: partition.Snapshots, Retention: 3 * 24 * time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	states, err = p.RunOnce(ctx)
	if err != nil || len(states[0].Dropped) < 7 {
		t.Fatalf("over the direct pool: dropped %v, %v", states[0].Dropped, err)
	}
}

// An insert with no partition for its row is told by its SQLSTATE and fields, in any language.
func TestIsMissingReadsNoMessageText(t *testing.T) {
	pool, db := storetest.NewPool(t)
	ctx := context.Background()
	storetest.PartitionDays(t, pool, 0, 1, partition.Sales)
	insert := func(q interface {
		Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	}) error {
		_, err := q.Exec(ctx, `INSERT INTO auction_sales (item_id, sold_at, seq, quantity, unit_price, total_price) VALUES ('a', '2001-01-01', 0, 1, 1, 1)`)
		return err
	}
	if err := insert(pool); !partition.IsMissing(err) {
		t.Fatalf("insert with no partition: %v, not told as missing", err)
	}
	t.Run("in German", func(t *testing.T) {
		conn, err := pgx.Connect(ctx, db)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, `SET lc_messages = 'de_DE.UTF-8'`); err != nil {
			t.Skipf("no German locale on the server (%v); the constructed errors below cover it", err)
		}
		err = insert(conn)
		if !partition.IsMissing(err) || strings.Contains(err.Error(), "no partition") {
			t.Fatalf("German insert with no partition: %v", err)
		}
	})
	for _, c := range []struct {
		name string
		err  *pgconn.PgError
		want bool
	}{
		{"no partition, translated", &pgconn.PgError{Code: "23514", Message: "keine Partition von Relation »auction_sales« für Zeile gefunden", TableName: "auction_sales"}, true},
		{"a CHECK constraint", &pgconn.PgError{Code: "23514", Message: "no partition of relation", TableName: "auction_snapshots", ConstraintName: "auction_snapshots_reason_check"}, false},
		{"a partition's own bound", &pgconn.PgError{Code: "23514", TableName: "auction_snapshots_p20260101"}, false},
		{"another error", &pgconn.PgError{Code: "23505", TableName: "auction_sales"}, false},
	} {
		if got := partition.IsMissing(fmt.Errorf("write: %w", c.err)); got != c.want {
			t.Errorf("%s: IsMissing = %v, want %v", c.name, got, c.want)
		}
	}
}

// A partition detached whose DROP then failed is no partition any more, so its bounds cannot
// find it again: the next passes drop it anyway (it carries the retirement mark), without
// holding the other drops back while it still cannot go, and a table an operator detached by
// hand is never touched.
func TestAPartitionDetachedButNotDroppedGoesInALaterPass(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	storetest.PartitionDays(t, pool, -10, 1, partition.Snapshots)
	exec := func(sql string) {
		t.Helper()
		if _, err := pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exists := func(name string) bool {
		t.Helper()
		var ok bool
		if err := pool.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	stuck, kept := fmt.Sprintf("%s_day%d", partition.Snapshots, 90), fmt.Sprintf("%s_day%d", partition.Snapshots, 91)
	exec(`ALTER TABLE auction_snapshots DETACH PARTITION ` + kept) // the operator's own copy
	exec(`CREATE VIEW operators_view AS SELECT * FROM ` + stuck)   // DROP TABLE fails on it
	cfg := partition.Config{Interval: 24 * time.Hour, Ahead: 7 * 24 * time.Hour,
		Tables: []partition.Table{{Name: partition.Snapshots, Retention: 3 * 24 * time.Hour}}}
	p, err := partition.New(pool, pool, cfg)
	if err != nil {
		t.Fatal(err)
	}

	var partitionsPast int
	for range 2 { // the first pass detaches it and fails; the second fails again but drops the rest
		_, err := p.RunOnce(ctx)
		if err == nil || !strings.Contains(err.Error(), stuck) {
			t.Fatalf("pass with a view on %s: %v, want an error naming it", stuck, err)
		}
	}
	for _, b := range bounds(t, pool, partition.Snapshots) {
		if b.lower != nil && b.upper.Before(time.Now().Add(-cfg.Tables[0].Retention)) {
			partitionsPast++
		}
	}
	if partitionsPast != 0 || !exists(stuck) {
		t.Fatalf("after two passes: %d partitions past retention left (want 0), %s exists %v (want true: the view holds it)", partitionsPast, stuck, exists(stuck))
	}

	exec(`DROP VIEW operators_view`)
	states, err := p.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(states[0].Dropped, stuck) || exists(stuck) {
		t.Fatalf("once the view went, the pass dropped %v; %s should be gone", states[0].Dropped, stuck)
	}
	if !exists(kept) {
		t.Fatalf("%s, detached by hand and never marked, was dropped", kept)
	}
}

// A DEFAULT partition an operator added bounds nothing: partitions are still created around it,
// a week ahead, instead of the table being taken as covered for good.
func TestADefaultPartitionDoesNotStopCreation(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE TABLE auction_sales_default PARTITION OF auction_sales DEFAULT`); err != nil {
		t.Fatal(err)
	}
	// Two weeks ahead: more than the database was created with.
	p, err := partition.New(pool, pool, partition.Config{Interval: 24 * time.Hour, Ahead: 14 * 24 * time.Hour,
		Tables: []partition.Table{{Name: partition.Sales}}})
	if err != nil {
		t.Fatal(err)
	}
	states, err := p.RunOnce(ctx)
	if err != nil || len(states) != 1 {
		t.Fatal(states, err)
	}
	if st := states[0]; len(st.Created) == 0 || st.Ahead < 14*24*time.Hour {
		t.Fatalf("%s: created %v, ahead %v; want two weeks ahead beside the DEFAULT partition", st.Table, st.Created, st.Ahead)
	}
}

// The tables live in the schema the search path finds them in; partition DDL names that schema.
// A first schema on the path where the collector can create (its own, as "$user" gives it) got
// every new partition, and a same-named table there was marked, detached and dropped in place
// of the real partition.
func TestPartitionDDLNamesTheTablesSchema(t *testing.T) {
	base, db := storetest.NewPool(t)
	ctx := context.Background()
	var schema string
	if err := base.QueryRow(ctx, `SELECT relnamespace::regnamespace::text FROM pg_class WHERE oid = 'auction_snapshots'::regclass`).Scan(&schema); err != nil {
		t.Fatal(err)
	}
	// Start from no partitions, then one day past retention.
	for _, b := range bounds(t, base, partition.Snapshots) {
		if _, err := base.Exec(ctx, `DROP TABLE `+pgx.Identifier{b.name}.Sanitize()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := base.Exec(ctx, `DO $$ BEGIN EXECUTE format('CREATE TABLE auction_snapshots_old PARTITION OF auction_snapshots FOR VALUES FROM (%L) TO (%L)',
		date_bin('1 day', now(), '2000-01-01 00:00:00+00') - interval '3 days', date_bin('1 day', now(), '2000-01-01 00:00:00+00') - interval '2 days'); END $$`); err != nil {
		t.Fatal(err)
	}
	if _, err := base.Exec(ctx, `CREATE SCHEMA decoy; CREATE TABLE decoy.auction_snapshots_old (kept int); INSERT INTO decoy.auction_snapshots_old VALUES (1)`); err != nil {
		t.Fatal(err)
	}
	pc, err := pgxpool.ParseConfig(db)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.RuntimeParams["search_path"] = "decoy, " + schema
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	p, err := partition.New(pool, pool, partition.Config{Interval: 24 * time.Hour, Ahead: 7 * 24 * time.Hour,
		Tables: []partition.Table{{Name: partition.Snapshots, Retention: 24 * time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	states, err := p.RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(states[0].Dropped, "auction_snapshots_old") || len(states[0].Created) == 0 {
		t.Fatalf("dropped %v, created %v; want the day 3 days back dropped and a week created", states[0].Dropped, states[0].Created)
	}
	var elsewhere []string
	rows, err := base.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = 'auction_snapshots'::regclass AND c.relnamespace::regnamespace::text <> $1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	if elsewhere, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		t.Fatal(err)
	}
	if len(elsewhere) > 0 {
		t.Errorf("partitions created outside %s: %v", schema, elsewhere)
	}
	var kept int
	if err := base.QueryRow(ctx, `SELECT kept FROM decoy.auction_snapshots_old`).Scan(&kept); err != nil || kept != 1 {
		t.Errorf("the other schema's table was touched: %v", err)
	}
	var comment *string
	if err := base.QueryRow(ctx, `SELECT obj_description('decoy.auction_snapshots_old'::regclass, 'pg_class')`).Scan(&comment); err != nil || comment != nil {
		t.Errorf("the other schema's table was marked for retention: %v %v", comment, err)
	}
}
