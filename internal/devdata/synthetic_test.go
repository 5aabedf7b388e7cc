package devdata

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// purgedTables are the tables purge:synthetic purges, in its order: a purge in a transaction
// rolled back names them all, deleting nothing.
func purgedTables(t *testing.T, db catalog.DB) []string {
	t.Helper()
	tx, err := db.Begin(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(context.Background()) }()
	res, err := PurgeSynthetic(context.Background(), tx, 0)
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for _, c := range res {
		tables = append(tables, c.Table)
	}
	return tables
}

// tableCounts counts synthetic and real rows per item-keyed table.
func tableCounts(t *testing.T, db catalog.DB) (synthetic, real map[string]int64) {
	t.Helper()
	synthetic, real = map[string]int64{}, map[string]int64{}
	for _, table := range purgedTables(t, db) {
		var s, r int64
		err := db.QueryRow(context.Background(), `SELECT count(*) FILTER (WHERE synthetic_item(item_id)),
			count(*) FILTER (WHERE NOT synthetic_item(item_id)) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&s, &r)
		if err != nil {
			t.Fatal(err)
		}
		synthetic[table], real[table] = s, r
	}
	return synthetic, real
}

// realItemWithHistory writes one real item with a row in every item-keyed table.
func realItemWithHistory(t *testing.T, db catalog.DB, id string) {
	t.Helper()
	storetest.Items(t, db, storetest.Item{ID: id, Name: "real", Tier: tiers.Warm})
	storetest.Snapshots(t, db, storetest.Snapshot{ItemID: id, Tier: tiers.Warm, ListingCount: 3, ListingQuantity: 30})
	storetest.Sales(t, db, storetest.Sale{ItemID: id, UnitPrice: 5})
	storetest.Interests(t, db, storetest.Interest{ItemID: id, Kind: "view"})
	if _, err := db.Exec(context.Background(), `
		WITH o AS (INSERT INTO outbox (event_type, item_id, payload) VALUES ('t', $1, '{}') RETURNING id, lane)
		INSERT INTO outbox_pending (id, lane) SELECT id, lane FROM o`, id); err != nil {
		t.Fatal(err)
	}
}

// thresholdsPolicy is the default configuration under the thresholds policy.
func thresholdsPolicy() catalog.Policy {
	c := config.Default()
	p := catalog.PolicyFromConfig(c.Catalog, budget.ConfiguredPlanLimit(c), packing.Model{})
	p.Mode = config.PolicyThresholds
	return p
}

func TestSeedSyntheticThenPurge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	realID := "785e56a0ed4e3efd573da1f56a45217d" // a real (32 hex) id
	realItemWithHistory(t, pool, realID)
	// An integration-test fixture is synthetic too, and has an outbox row.
	realItemWithHistory(t, pool, "integration-item-7")

	// Both runs share one hour, so the test holds even if the clock crosses an hour between them.
	var until time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&until); err != nil {
		t.Fatal(err)
	}
	first, err := SeedSynthetic(ctx, pool, SyntheticOptions{Items: 6, Days: 2, Until: until})
	if err != nil {
		t.Fatal(err)
	}
	if first.Inserted != 6 || first.Snapshots != 6*48 || first.Sales == 0 || first.Interest != 2*3 {
		t.Fatalf("first seed = %+v", first)
	}
	// Idempotent: a re-run inserts nothing (a run in a later hour adds only the new hours).
	again, err := SeedSynthetic(ctx, pool, SyntheticOptions{Items: 6, Days: 2, Until: until})
	if err != nil {
		t.Fatal(err)
	}
	if again.Inserted != 0 || again.Snapshots != 0 || again.Sales != 0 || again.Interest != 0 {
		t.Errorf("re-run inserted %+v, want nothing", again)
	}
	// Fixtures are never scheduled.
	var scheduled int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM tracked_items WHERE item_id LIKE 'seed-%' AND next_collect_at IS NOT NULL`).Scan(&scheduled); err != nil || scheduled != 0 {
		t.Errorf("%d fixtures scheduled (%v)", scheduled, err)
	}

	// While fixtures exist, read paths that rank or summarise never return them.
	items, err := catalog.ListItems(ctx, pool, catalog.ItemsQuery{})
	if err != nil {
		t.Fatal(err)
	}
	if len(items) != 1 || items[0].ItemID != realID {
		t.Errorf("ListItems = %+v, want only the real item", items)
	}
	all, err := catalog.ListItems(ctx, pool, catalog.ItemsQuery{IncludeSynthetic: true})
	if err != nil || len(all) != 8 {
		t.Errorf("ListItems(IncludeSynthetic) = %d rows, %v; want 8", len(all), err)
	}
	res, err := catalog.RecalculatePopularity(ctx, pool, thresholdsPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if res.Scored != 1 {
		t.Errorf("recalculation scored %d items, want only the real one", res.Scored)
	}
	for _, c := range res.Changes {
		if strings.HasPrefix(c.ItemID, catalog.SyntheticPrefix) {
			t.Errorf("recalculation changed fixture %s", c.ItemID)
		}
	}

	synthBefore, realBefore := tableCounts(t, pool)
	purged, err := PurgeSynthetic(ctx, pool, 7) // small batches: many rounds
	if err != nil {
		t.Fatal(err)
	}
	synthAfter, realAfter := tableCounts(t, pool)
	for _, c := range purged {
		if c.Deleted != synthBefore[c.Table] {
			t.Errorf("%s: purged %d rows, there were %d synthetic", c.Table, c.Deleted, synthBefore[c.Table])
		}
		if synthAfter[c.Table] != 0 {
			t.Errorf("%s: %d synthetic rows left", c.Table, synthAfter[c.Table])
		}
		if realAfter[c.Table] != realBefore[c.Table] {
			t.Errorf("%s: real rows %d → %d", c.Table, realBefore[c.Table], realAfter[c.Table])
		}
	}
	if len(purged) != len(purgedTables(t, pool)) || purged.Total() == 0 {
		t.Errorf("purge result %+v", purged)
	}
	// The purged outbox rows were pending: their entries left the relay's pending list with
	// them (no orphan entry left behind), the real one's did not.
	var queued []string
	var entries int
	if err := pool.QueryRow(ctx, `
		SELECT (SELECT coalesce(array_agg(o.item_id), '{}') FROM outbox_pending p JOIN outbox o ON o.id = p.id),
		       (SELECT count(*) FROM outbox_pending)`).Scan(&queued, &entries); err != nil {
		t.Fatal(err)
	}
	if len(queued) != 1 || queued[0] != realID || entries != 1 {
		t.Errorf("relay's pending list holds %v (%d entries) after the purge, want only %s", queued, entries, realID)
	}
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM tracked_items WHERE item_id = $1 AND collection_tier = 'WARM_5M'`, realID).Scan(&n); err != nil || n != 1 {
		t.Errorf("real item gone or changed (%d, %v)", n, err)
	}

	// Nothing left: a second purge deletes nothing.
	if again, err := PurgeSynthetic(ctx, pool, 0); err != nil || again.Total() != 0 {
		t.Errorf("second purge = %+v, %v", again, err)
	}
}

// seed:synthetic takes a million items and writes them in batches that each commit: other
// connections see the fixtures as they are written, progress is reported per batch, and an
// interrupted run keeps what it wrote.
// Without --until the history ends on the database's hour in UTC, whatever the session's time
// zone: truncated in Asia/Kolkata's (+05:30) it ended at half past, and a re-run in another
// zone matched none of the rows it had written and seeded every fixture's history again.
func TestSeedSyntheticIsTheSameInEveryTimeZone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	utc, url := storetest.NewPool(t)
	kolkata, err := pgxpool.New(ctx, url+"&timezone=Asia/Kolkata")
	if err != nil {
		t.Fatal(err)
	}
	defer kolkata.Close()
	hour := func() (h time.Time) {
		if err := utc.QueryRow(ctx, `SELECT date_trunc('hour', now(), 'UTC')`).Scan(&h); err != nil {
			t.Fatal(err)
		}
		return h
	}
	before := hour()
	if _, err := SeedSynthetic(ctx, kolkata, SyntheticOptions{Items: 1, Days: 1}); err != nil {
		t.Fatal(err)
	}
	again, err := SeedSynthetic(ctx, utc, SyntheticOptions{Items: 1, Days: 1})
	if err != nil {
		t.Fatal(err)
	}
	if hour() != before {
		t.Skip("a UTC hour began between the runs: the second run rightly adds it")
	}
	if again.Snapshots != 0 || again.Sales != 0 {
		t.Fatalf("a re-run in UTC after one in Asia/Kolkata inserted %+v, want nothing", again)
	}
}

func TestSeedSyntheticMillionItemsInBatches(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	if _, err := SeedSynthetic(context.Background(), pool, SyntheticOptions{Items: MaxSyntheticItems + 1}); err == nil ||
		!strings.Contains(err.Error(), "at most 1000000 items") {
		t.Fatalf("1,000,001 items: %v, want the limit named", err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var calls, seenDone, visible int
	_, err := SeedSynthetic(ctx, pool, SyntheticOptions{Items: MaxSyntheticItems, Days: 1,
		Progress: func(done, total int) {
			calls++
			seenDone = done
			if total != MaxSyntheticItems {
				t.Errorf("progress total %d", total)
			}
			// Another connection already sees the batch.
			if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM tracked_items WHERE item_id LIKE 'seed-%'`).Scan(&visible); err != nil {
				t.Error(err)
			}
			cancel() // stop after the first batch
		}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("interrupted run: %v, want context.Canceled", err)
	}
	if calls != 1 || seenDone <= 0 || seenDone >= MaxSyntheticItems || visible != seenDone {
		t.Fatalf("progress calls %d, done %d, visible %d: want one committed batch, visible to others", calls, seenDone, visible)
	}
	var last string
	if err := pool.QueryRow(context.Background(), `SELECT max(item_id) FROM tracked_items WHERE item_id LIKE 'seed-%'`).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("seed-%04d", seenDone); last != want {
		t.Errorf("last fixture %s, want %s", last, want)
	}
}

// A table that gains an item_id column must be purged too, or fixtures would linger in it.
func TestPurgeCoversEveryItemKeyedTable(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	rows, _ := pool.Query(context.Background(), `
		SELECT c.table_name::text FROM information_schema.columns c
		JOIN information_schema.tables t USING (table_schema, table_name)
		WHERE c.column_name = 'item_id' AND c.table_schema = current_schema() AND t.table_type = 'BASE TABLE'
		  AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = (c.table_schema || '.' || c.table_name)::regclass)
		ORDER BY 1`) // a partition is purged through its partitioned table
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	purged := map[string]bool{}
	for _, table := range purgedTables(t, pool) {
		purged[table] = true
	}
	// A table whose item_id references tracked_items ON DELETE CASCADE goes with its items.
	rows, _ = pool.Query(context.Background(), `
		SELECT conrelid::regclass::text FROM pg_constraint
		WHERE contype = 'f' AND confrelid = 'tracked_items'::regclass AND confdeltype = 'c'`)
	cascaded, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range cascaded {
		purged[table] = true
	}
	for _, table := range tables {
		if !purged[table] {
			t.Errorf("table %s has an item_id column but purge:synthetic leaves it alone", table)
		}
	}
	if len(tables) != len(purgedTables(t, pool))+len(cascaded) {
		t.Errorf("item-keyed tables %v, purged %v, cascaded %v", tables, purgedTables(t, pool), cascaded)
	}
}
