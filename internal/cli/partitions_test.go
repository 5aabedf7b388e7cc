package cli

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/store/storetest"
)

// daysLeft counts the laid-out days (auction_*_dayN) still partitions of the table.
func daysLeft(t *testing.T, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
		WHERE i.inhparent = $1::regclass AND c.relname LIKE '%\_day%'`, table).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

var partitionsLine = regexp.MustCompile(`(?m)^(auction_\w+): (\d+) partitions, ready (\S+) ahead, oldest from (\S+); created (\d+), dropped (\d+)`)

// collector partitions creates a week ahead and drops the days past retention; run again, it
// finds nothing to do.
func TestPartitionsCommand(t *testing.T) {
	pool, db := storetest.NewPool(t)
	t.Setenv("COLLECTOR_CONFIG", "")
	t.Setenv("COLLECTOR_RETENTION_SNAPSHOTS", "72h")
	storetest.PartitionDays(t, pool, -10, 1, "auction_snapshots", "auction_sales")
	out, errOut, err := runCollector(t, "partitions", "--database-url", db)
	if err != nil {
		t.Fatalf("partitions: %v\n%s%s", err, out, errOut)
	}
	lines := partitionsLine.FindAllStringSubmatch(out, -1)
	if len(lines) != 2 {
		t.Fatalf("partitions printed %q, want a line per table", out)
	}
	// Snapshots: the 7 days past retention and the archive created below them first; sales: none.
	want := map[string]string{"auction_snapshots": "8", "auction_sales": "0"}
	for _, m := range lines {
		ahead, err := time.ParseDuration(m[3])
		if err != nil || ahead < 7*24*time.Hour || m[5] == "0" || m[6] != want[m[1]] {
			t.Errorf("%q: want days created up to a week ahead, %s dropped", m[0], want[m[1]])
		}
	}
	// Days -10 … -4 end at or before now - 72h; -3 … 0 stay.
	if n := daysLeft(t, pool, "auction_snapshots"); n != 4 {
		t.Errorf("%d snapshot days left, want 4", n)
	}
	if n := daysLeft(t, pool, "auction_sales"); n != 11 {
		t.Errorf("%d sales days left, want all 11 (retention.sales is 0)", n)
	}
	out, _, err = runCollector(t, "partitions", "--database-url", db)
	if err != nil || !strings.Contains(out, "auction_snapshots: ") || !strings.Contains(out, "created 0, dropped 0") {
		t.Fatalf("partitions again: %q %v", out, err)
	}
}

// Through PgBouncer in transaction mode: without database.direct_url, partitions creates but
// refuses to drop, naming the setting; with it, partitions and prune --snapshots drop.
func TestPartitionsAndPruneThroughPgBouncer(t *testing.T) {
	pool, db := storetest.NewPool(t)
	bouncer := storetest.PgBouncer(t, db, 2)
	t.Setenv("COLLECTOR_CONFIG", "")
	t.Setenv("COLLECTOR_DATABASE_QUERY_EXEC_MODE", "simple_protocol")
	t.Setenv("COLLECTOR_RETENTION_SNAPSHOTS", "72h")
	storetest.PartitionDays(t, pool, -10, 1, "auction_snapshots", "auction_sales")

	t.Setenv("COLLECTOR_DATABASE_DIRECT_URL", "")
	out, errOut, err := runCollector(t, "partitions", "--database-url", bouncer)
	if err == nil || !strings.Contains(err.Error(), "database.direct_url") {
		t.Fatalf("partitions through PgBouncer without direct_url: %v, want a refusal naming database.direct_url\n%s%s", err, out, errOut)
	}
	if n := daysLeft(t, pool, "auction_snapshots"); n != 11 || !strings.Contains(out, "auction_snapshots: ") {
		t.Fatalf("%d snapshot days left, want all 11; printed %q", n, out)
	}
	if m := partitionsLine.FindStringSubmatch(out); m == nil || m[5] == "0" {
		t.Fatalf("partitions through PgBouncer created nothing: %q", out)
	}

	t.Setenv("COLLECTOR_DATABASE_DIRECT_URL", db)
	if out, errOut, err := runCollector(t, "partitions", "--database-url", bouncer); err != nil {
		t.Fatalf("partitions through PgBouncer with direct_url: %v\n%s%s", err, out, errOut)
	}
	if n := daysLeft(t, pool, "auction_snapshots"); n != 4 {
		t.Fatalf("%d snapshot days left after partitions, want 4", n)
	}

	storetest.PartitionDays(t, pool, -10, 1, "auction_snapshots", "auction_sales")
	t.Setenv("COLLECTOR_RETENTION_SNAPSHOTS", "")
	out, errOut, err = runCollector(t, "prune", "--database-url", bouncer, "--snapshots", "72h")
	if err != nil || !strings.Contains(out, "auction_snapshots: dropped 8") {
		t.Fatalf("prune --snapshots through PgBouncer: %v\n%s%s", err, out, errOut)
	}
	if n := daysLeft(t, pool, "auction_snapshots"); n != 4 {
		t.Fatalf("%d snapshot days left after prune, want 4", n)
	}
}
