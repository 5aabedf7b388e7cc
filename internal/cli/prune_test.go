package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/store/storetest"
)

// prune drops sales partitions past the age it is given; with none set it still prunes
// published outbox rows, keeps unpublished ones and the history; an age popularity would miss
// names the key.
func TestPruneCommand(t *testing.T) {
	pool, db := storetest.NewPool(t)
	t.Setenv("COLLECTOR_CONFIG", "")
	ctx := context.Background()
	// Days of partitions instead of the archive a new database keeps its past in.
	if _, err := pool.Exec(ctx, `
		DO $$
		DECLARE
			a text := (SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			           WHERE i.inhparent = 'auction_sales'::regclass AND pg_get_expr(c.relpartbound, c.oid) LIKE '%MINVALUE%');
			today timestamptz := date_bin('1 day', now(), '2000-01-01 00:00:00+00');
		BEGIN
			EXECUTE format('DROP TABLE %I', a);
			FOR d IN 1..11 LOOP
				EXECUTE format('CREATE TABLE auction_sales_d%s PARTITION OF auction_sales FOR VALUES FROM (%L) TO (%L)',
					d, today - d * interval '1 day', today - (d - 1) * interval '1 day');
			END LOOP;
		END $$`); err != nil {
		t.Fatal(err)
	}
	var old []storetest.Sale
	for d := 1; d <= 10; d++ {
		old = append(old, storetest.Sale{ItemID: "item-1", SoldAt: storetest.Ago(time.Duration(d) * 24 * time.Hour), UnitPrice: 5})
	}
	storetest.Sales(t, pool, old...)
	sales := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM auction_sales`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// With the defaults (cron, no relay) an 8-day-old published event goes, the pending one
	// after it waits for a relay, and so does a published one after that, and the sales stay;
	// retention.outbox_unpublished, once chosen, expires the pending one and the other follows.
	if _, err := pool.Exec(ctx, `
		WITH o AS (
		    INSERT INTO outbox (event_type, item_id, snapshot_id, payload, created_at)
		    SELECT 'test', 'item-1', -g, '{}', now() - interval '8 days' FROM generate_series(1, 2) g
		    RETURNING id, lane, snapshot_id)
		INSERT INTO outbox_pending (id, lane) SELECT id, lane FROM o WHERE snapshot_id = -2`); err != nil {
		t.Fatal(err)
	}
	// Partitions that cannot be dropped (no session behind a transaction-pooling PgBouncer)
	// fail the run, naming why, but the rows are pruned all the same.
	t.Setenv("COLLECTOR_DATABASE_QUERY_EXEC_MODE", "simple_protocol")
	out, _, err := runCollector(t, "prune", "--database-url", db, "--sales", "180h")
	if err == nil || !strings.Contains(err.Error(), "database.direct_url") || !strings.Contains(out, "deleted 1 published") || sales() != 10 {
		t.Fatalf("prune without a session: %q %v, %d sales left; want an error naming database.direct_url, the published row deleted and no partition dropped", out, err, sales())
	}
	t.Setenv("COLLECTOR_DATABASE_QUERY_EXEC_MODE", "")
	if _, err := pool.Exec(ctx, `INSERT INTO outbox (event_type, item_id, snapshot_id, payload, created_at)
		VALUES ('test', 'item-1', -3, '{}', now() - interval '8 days')`); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCollector(t, "prune", "--database-url", db)
	var outbox int
	if qerr := pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&outbox); qerr != nil {
		t.Fatal(qerr)
	}
	if err != nil || !strings.Contains(out, "deleted 0 published and 0 unpublished (expired) outbox events") || outbox != 2 || sales() != 10 {
		t.Fatalf("prune with no ages: %q %v, %d outbox rows and %d sales left; want the pending row, the published one after it and the sales kept", out, err, outbox, sales())
	}
	if out, _, err := runCollector(t, "outbox", "list", "--database-url", db); err != nil || !strings.HasPrefix(out, "pending 1 (oldest 192h") {
		t.Fatalf("outbox list with one pending event 8 days old: %q %v", out, err)
	}
	t.Setenv("COLLECTOR_RETENTION_OUTBOX_UNPUBLISHED", "168h")
	out, _, err = runCollector(t, "prune", "--database-url", db)
	if qerr := pool.QueryRow(ctx, `SELECT count(*) FROM outbox`).Scan(&outbox); qerr != nil {
		t.Fatal(qerr)
	}
	if err != nil || !strings.Contains(out, "deleted 1 published and 1 unpublished (expired) outbox events") || outbox != 0 {
		t.Fatalf("prune with retention.outbox_unpublished 168h: %q %v, %d outbox rows left", out, err, outbox)
	}
	if out, _, err := runCollector(t, "outbox", "list", "--database-url", db); err != nil || !strings.HasPrefix(out, "pending 0, failed 0, published (not yet pruned) 0") {
		t.Fatalf("outbox list of an empty outbox: %q %v", out, err)
	}
	t.Setenv("COLLECTOR_RETENTION_OUTBOX_UNPUBLISHED", "")
	if _, _, err := runCollector(t, "prune", "--database-url", db, "--sales", "1h"); err == nil || !strings.Contains(err.Error(), "retention.sales") {
		t.Fatalf("prune --sales 1h (under catalog.dormant_after): %v", err)
	}
	// The days wholly older than 180h (7.5 days) go: the sales of 9 and 10 days ago surely,
	// that of 8 days ago when its day ended before; the 7 younger ones stay.
	out, _, err = runCollector(t, "prune", "--database-url", db, "--sales", "180h")
	if err != nil || !strings.Contains(out, "auction_sales: dropped") {
		t.Fatalf("prune --sales 180h: %q %v", out, err)
	}
	var young, older int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE sold_at > now() - interval '180 hours'),
		count(*) FILTER (WHERE sold_at < now() - interval '204 hours') FROM auction_sales`).Scan(&young, &older); err != nil {
		t.Fatal(err)
	}
	if young != 7 || older != 0 || sales() > 8 {
		t.Fatalf("prune --sales 180h left %d sales younger than 180h (want 7), %d older than a day more (want 0), %d in all", young, older, sales())
	}
}
