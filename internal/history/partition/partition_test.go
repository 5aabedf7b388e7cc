package partition_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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
