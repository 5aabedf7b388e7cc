package catalog

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/store/storetest"
)

// The reads the daemon makes after every pass and at every probe walk the due index rather
// than the whole table: at 20k items, a few due and a few in flight, their plans hold no
// sequential scan of tracked_items. (Plans, not timings: the cost is what grows with the table.)
func TestPeriodicReadsWalkTheDueIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at, lease_expires_at, lease_token)
		SELECT 'item-' || g, 'Item ' || g, 'COLD_10M', now() + (g % 600) * interval '1 second',
		       CASE WHEN g % 1000 = 0 THEN now() + interval '1 minute' END,
		       CASE WHEN g % 1000 = 0 THEN gen_random_uuid() END
		FROM generate_series(1, 20000) g;
		ANALYZE tracked_items`); err != nil {
		t.Fatal(err)
	}
	var now, first time.Time
	if err := pool.QueryRow(ctx, firstFreeSQL).Scan(&now, &first); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		sql    string
		args   []any
		ranged bool // a range, not the first row of the index
	}{
		{"first free", firstFreeSQL, nil, false},
		{"first lease", firstLeaseSQL, []any{first, int64(0), now}, true},
		{"probe item", probeScheduledSQL, nil, false},
	} {
		var plan string
		rows, err := pool.Query(ctx, "EXPLAIN "+c.sql, c.args...)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan += line + "\n"
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(plan, "Seq Scan on tracked_items") || !strings.Contains(plan, "tracked_items_due_idx") {
			t.Errorf("%s scans the table, not the due index:\n%s", c.name, plan)
		}
		// And the planner knows the range is narrow: an estimate of a third of the table (a
		// bound it could not see) turns into a scan of all of it once the table is larger.
		for _, m := range planRows.FindAllStringSubmatch(plan, -1) {
			if !c.ranged {
				break
			}
			if n, _ := strconv.Atoi(m[1]); n > 200 {
				t.Errorf("%s expects %d rows from the due index, of 20000:\n%s", c.name, n, plan)
			}
		}
	}
	if wait, ok, err := NextClaimable(ctx, pool, 0); err != nil || !ok || wait > time.Minute {
		t.Fatalf("next claimable: %s %t %v", wait, ok, err)
	}
}

// planRows finds the estimated rows of an index scan on the due index in EXPLAIN's text.
var planRows = regexp.MustCompile(`(?:Index|Index Only|Bitmap Index) Scan (?:Backward )?(?:using|on) tracked_items_due_idx[^\n]*rows=(\d+)`)
