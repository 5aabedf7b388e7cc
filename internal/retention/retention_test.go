package retention

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/testsignal"
)

// Old rows go, recent rows stay, in statements of at most Config.Batch rows; a table
// whose age is 0 is not touched; a bounded pass says that more is left.
func TestPruneDeletesOnlyRowsPastTheirAge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	// 30 rows per table at ages 1..30 days.
	if _, err := pool.Exec(ctx, `
		INSERT INTO item_interest (item_id, kind, occurred_at)
		SELECT 'item-1', 'view', now() - d * interval '1 day' FROM generate_series(1, 30) d;
		INSERT INTO price_candles (item_id, resolution, bucket, snapshots)
		SELECT 'item-1', r, date_bin('1 hour', now() - d * interval '1 day', '2000-01-01 00:00:00+00'), 1
		FROM generate_series(1, 30) d, unnest(ARRAY['1h', '1d']) r`); err != nil {
		t.Fatal(err)
	}
	count := func(sql string) int {
		t.Helper()
		var n int
		if err := pool.QueryRow(ctx, sql).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	cfg := Config{RetentionConfig: config.Default().Retention}
	cfg.Interest, cfg.CandlesHourly, cfg.Batch = 10*24*time.Hour+time.Hour, 20*24*time.Hour+time.Hour, 3

	// A bounded pass: 4 statements of 3 rows, all on interest (the first table).
	res, err := Prune(ctx, pool, cfg, 4)
	if err != nil || res.Interest != 12 || res.CandlesHourly != 0 || !res.More {
		t.Fatalf("bounded pass: %+v %v", res, err)
	}
	res, err = Prune(ctx, pool, cfg, 0)
	if err != nil || res.Interest != 20-12 || res.CandlesHourly != 10 || res.CandlesDaily != 0 || res.More {
		t.Fatalf("full pass: %+v %v", res, err)
	}
	i := count(`SELECT count(*) FROM item_interest`)
	h := count(`SELECT count(*) FROM price_candles WHERE resolution = '1h'`)
	d := count(`SELECT count(*) FROM price_candles WHERE resolution = '1d'`)
	if i != 10 || h != 20 || d != 30 {
		t.Fatalf("left %d interest events, %d hourly and %d daily candles; want 10, 20, 30", i, h, d)
	}
	if res, err := Prune(ctx, pool, cfg, 0); err != nil || res.Total() != 0 {
		t.Fatalf("second pass: %+v %v", res, err)
	}
}

// The ages must leave popularity the history it reads.
func TestRetentionConfigKeepsWhatPopularityReads(t *testing.T) {
	cfg := config.Default()
	if r := cfg.Retention; r.Snapshots != 0 || r.Sales != 0 || r.Interest != 0 || r.CandlesHourly != 0 || r.CandlesDaily != 0 {
		t.Fatalf("history is pruned by default: %+v", r)
	}
	cfg.Retention.Snapshots = time.Hour     // under catalog.signal_window (24h)
	cfg.Retention.Interest = 24 * time.Hour // under catalog.dormant_after (72h)
	err := cfg.Validate()
	if err == nil {
		t.Fatal("ages under what popularity reads were accepted")
	}
	for _, want := range []string{"retention.snapshots", "COLLECTOR_RETENTION_SNAPSHOTS", "retention.interest", "catalog.dormant_after"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

// outboxRow is a group of outbox rows of one state and age.
type outboxRow struct {
	state string // published, pending, failed
	age   time.Duration
	n     int
}

// seedOutbox writes the rows oldest first, as write-backs do (ids follow created_at), each
// pending one with its outbox_pending entry, as if no relay had ever run.
func seedOutbox(t *testing.T, pool *pgxpool.Pool, rows []outboxRow) {
	t.Helper()
	ctx := context.Background()
	snap := 0
	for _, r := range rows {
		for range r.n {
			snap++
			if _, err := pool.Exec(ctx, `
				WITH o AS (
				    INSERT INTO outbox (event_type, item_id, snapshot_id, payload, created_at, failed_at, attempts)
				    VALUES ('test', $1 || '-' || $3::bigint, $3::bigint, '{}', now() - $2::interval,
				            CASE WHEN $1 = 'failed' THEN now() END, CASE WHEN $1 = 'failed' THEN 1 ELSE 0 END)
				    RETURNING id, lane)
				INSERT INTO outbox_pending (id, lane) SELECT id, lane FROM o WHERE $1 = 'pending'`, r.state, r.age, snap); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// outboxStates counts the outbox's rows by state and age (older than cut or not), and the
// pending entries that point at no outbox row.
func outboxStates(t *testing.T, pool *pgxpool.Pool, cut time.Duration) (states map[string]int, orphans int) {
	t.Helper()
	ctx := context.Background()
	rows, err := pool.Query(ctx, `
		SELECT state || CASE WHEN created_at < now() - $1::interval THEN ' old' ELSE ' new' END, count(*)
		FROM outbox_events GROUP BY 1`, cut)
	if err != nil {
		t.Fatal(err)
	}
	states = map[string]int{}
	var k string
	var n int
	if _, err := pgx.ForEachRow(rows, []any{&k, &n}, func() error { states[k] = n; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_pending p WHERE NOT EXISTS (SELECT FROM outbox o WHERE o.id = p.id)`).Scan(&orphans); err != nil {
		t.Fatal(err)
	}
	return states, orphans
}

// With no relay anywhere, a pass bounds the outbox: published rows go after
// kafka.outbox_retention, unpublished ones (pending or failed) after
// retention.outbox_unpublished with their pending entries, newer ones stay, and no entry is
// left pointing at nothing. A second pass finds nothing.
func TestPruneBoundsTheOutboxWithoutARelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	const day = 24 * time.Hour
	seedOutbox(t, pool, []outboxRow{
		{"published", 30 * day, 3}, {"pending", 10 * day, 3}, {"failed", 10 * day, 2},
		{"published", 5 * day, 2}, {"pending", 5 * day, 2}, {"failed", 2 * time.Hour, 1},
		{"published", time.Hour, 2}, {"pending", time.Hour, 3},
	})
	cfg := FromConfig(config.Default())
	// Published rows kept 3 days, unpublished 7: a 5-day-old pending row outlives a published one.
	cfg.OutboxRetention, cfg.OutboxUnpublished, cfg.OutboxBatch = 3*day, 7*day, 2

	res, err := Prune(ctx, pool, cfg, 0)
	if err != nil || res.OutboxPublished != 3+2 || res.OutboxExpired != 3+2 || res.More {
		t.Fatalf("pass: %+v %v; want 5 published and 5 unpublished rows deleted", res, err)
	}
	states, orphans := outboxStates(t, pool, 3*day)
	want := map[string]int{"published new": 2, "pending old": 2, "pending new": 3, "failed new": 1}
	if !maps.Equal(states, want) || orphans != 0 {
		t.Fatalf("left %v with %d orphan pending entries; want %v and none", states, orphans, want)
	}
	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_pending`).Scan(&pending); err != nil || pending != 5 {
		t.Fatalf("%d outbox_pending entries (%v), want the 5 pending rows'", pending, err)
	}
	if res, err := Prune(ctx, pool, cfg, 0); err != nil || res.Total() != 0 {
		t.Fatalf("second pass: %+v %v", res, err)
	}
}

// With the defaults, a pass drops no unpublished event however old, so a relay down or run
// elsewhere costs consumers nothing; published ones still go after kafka.outbox_retention.
func TestDefaultsKeepUnpublishedEventsUntilPublished(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	seedOutbox(t, pool, []outboxRow{{"published", 400 * 24 * time.Hour, 2}, {"pending", 400 * 24 * time.Hour, 2}, {"failed", 400 * 24 * time.Hour, 1}})
	res, err := Prune(ctx, pool, FromConfig(config.Default()), 0)
	if err != nil || res.OutboxPublished != 2 || res.OutboxExpired != 0 {
		t.Fatalf("pass: %+v %v; want the 2 published rows deleted, nothing expired", res, err)
	}
	states, orphans := outboxStates(t, pool, 24*time.Hour)
	if want := map[string]int{"pending old": 2, "failed old": 1}; !maps.Equal(states, want) || orphans != 0 {
		t.Fatalf("left %v with %d orphans; want %v", states, orphans, want)
	}
}

// Expiring unpublished events is the operator's choice: off by default, and a chosen age too
// short to ride out a relay's restart names the key and its environment variable.
func TestOutboxUnpublishedIsOffUnlessChosen(t *testing.T) {
	cfg := config.Default()
	if cfg.Retention.OutboxUnpublished != 0 {
		t.Fatalf("retention.outbox_unpublished defaults to %s, want 0 (off)", cfg.Retention.OutboxUnpublished)
	}
	cfg.Retention.OutboxUnpublished = time.Hour
	if err := cfg.Validate(); err != nil {
		t.Fatalf("1h, the shortest age allowed, refused: %v", err)
	}
	cfg.Retention.OutboxUnpublished = 30 * time.Minute
	err := cfg.Validate()
	for _, want := range []string{"retention.outbox_unpublished", "COLLECTOR_RETENTION_OUTBOX_UNPUBLISHED", "30m"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

// The pruner's loop works a backlog off in turns of TurnStatements statements, a short wait
// apart, then waits Interval; each turn is heard by OnTurn.
func TestPrunerWorksABacklogOffInTurns(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	seedOutbox(t, pool, []outboxRow{{"published", 30 * 24 * time.Hour, 5}})
	cfg := FromConfig(config.Default())
	cfg.OutboxBatch, cfg.TurnStatements, cfg.Interval, cfg.BacklogWait = 2, 1, time.Millisecond, time.Millisecond
	p, err := New(pool, cfg)
	if err != nil {
		t.Fatal(err)
	}
	var turns testsignal.Signal[Result]
	turns.Init(t)
	p.OnTurn = func(res Result, err error) {
		if err != nil {
			t.Errorf("turn: %v", err)
		}
		turns.Signal(res)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); p.Start(ctx) }()
	var deleted []int64
	for _, wantMore := range []bool{true, true, false} {
		res := turns.Wait(t)
		if res.More != wantMore {
			t.Fatalf("turn %d: %+v, want more=%v", len(deleted)+1, res, wantMore)
		}
		deleted = append(deleted, res.OutboxPublished)
	}
	cancel()
	testkit.Recv(t, done, testkit.Timeout, "the pruner to stop")
	if !slices.Equal(deleted, []int64{2, 2, 1}) {
		t.Fatalf("turns deleted %v, want [2 2 1]", deleted)
	}
	if _, err := New(pool, Config{Batch: -1}); err == nil {
		t.Fatal("a negative batch was accepted")
	}
}

// A table whose statement fails (a lock on the outbox held past lock_timeout) is named in the
// error and left for the next pass; the tables after it are pruned still.
func TestATableThatCannotBePrunedHoldsBackNoOther(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	if _, err := pool.Exec(ctx, `
		INSERT INTO item_interest (item_id, kind, occurred_at)
		SELECT 'item-1', 'view', now() - d * interval '1 day' FROM generate_series(1, 30) d`); err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx) //nolint:errcheck
	if _, err := holder.Exec(ctx, `LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SET lock_timeout = '50ms'`); err != nil {
		t.Fatal(err)
	}
	defer conn.Exec(ctx, `RESET lock_timeout`) //nolint:errcheck
	cfg := Config{RetentionConfig: config.Default().Retention}
	cfg.Interest, cfg.OutboxRetention = 10*24*time.Hour+time.Hour, 7*24*time.Hour
	res, err := Prune(ctx, conn, cfg, 0)
	if err == nil || !strings.Contains(err.Error(), "published outbox rows") {
		t.Fatalf("prune with the outbox locked: %v, want an error naming the published outbox rows", err)
	}
	if res.Interest != 20 {
		t.Fatalf("pruned %d interest events behind the locked outbox, want 20", res.Interest)
	}
}
