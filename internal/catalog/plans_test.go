package catalog

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

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
	if err := pool.QueryRow(ctx, firstFreeSQL, tierOrder).Scan(&now, &first); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		sql    string
		args   []any
		ranged bool // a range, not the first row of the index
	}{
		{"first free", firstFreeSQL, []any{tierOrder}, false},
		{"first lease", firstLeaseSQL, []any{first, int64(0), now, tierOrder}, true},
		{"probe item", probeScheduledSQL, []any{tierOrder, ""}, false},
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

// A claim and the console's overdue page read about the rows they return, however large the
// due backlog: at 20k items of four tiers, half of them due, no step of their plans (as run,
// EXPLAIN ANALYZE) handles more rows than a page from each tier. One ORDER BY over tier and due
// time read and sorted all 10k due rows at every claim.
func TestClaimsAndTheOverduePageReadTheirRowsNotTheBacklog(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		SELECT 'item-' || g, 'Item ' || g, (ARRAY['HOT_1M','ACTIVE_3M','WARM_5M','COLD_10M'])[1 + g % 4],
		       now() + CASE WHEN g % 2 = 0 THEN -1 ELSE 1 END * (60 + g % 3600) * interval '1 second'
		FROM generate_series(1, 20000) g;
		ANALYZE tracked_items`); err != nil {
		t.Fatal(err)
	}
	const batch = 50
	bound := len(tierOrder) * (batch + 1)
	for _, c := range []struct {
		name string
		args []any
	}{
		{"claim", []any{batch, int64(60000), "plan", int64(0), tierOrder, nil, int64(0), false}},
		{"claim by cost", []any{batch, int64(60000), "plan", int64(0), tierOrder, 20.0, int64(30000), false}},
		{"claim of the top tier", []any{batch, int64(60000), "plan", int64(0), tierOrder, 20.0, int64(30000), true}},
	} {
		if n, node := mostRowsOfAStep(t, pool, claimSQL, c.args...); n > bound {
			t.Errorf("%s: a step (%s) handled %d rows, for %d claimed", c.name, node, n, batch)
		}
	}
	r := &planReader{t: t, pool: pool}
	page, next, err := BrowseItems(ctx, r, BrowseQuery{Filter: BrowseOverdue, Limit: batch})
	if err != nil || len(page) != batch || next == nil {
		t.Fatalf("overdue page: %d rows, next %v, %v", len(page), next, err)
	}
	for i := 1; i < len(page); i++ {
		if page[i].NextCollectAt.Before(*page[i-1].NextCollectAt) {
			t.Fatalf("overdue page out of due order at row %d", i)
		}
	}
	if r.most > bound {
		t.Errorf("overdue page: a step (%s) handled %d rows, for a page of %d", r.node, r.most, batch)
	}
}

// planReader runs each query under EXPLAIN ANALYZE first and keeps the largest step.
type planReader struct {
	t    *testing.T
	pool *pgxpool.Pool
	most int
	node string
}

func (r *planReader) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if n, node := mostRowsOfAStep(r.t, r.pool, sql, args...); n > r.most {
		r.most, r.node = n, node
	}
	return r.pool.Query(ctx, sql, args...)
}

func (r *planReader) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return r.pool.QueryRow(ctx, sql, args...)
}

// mostRowsOfAStep runs sql under EXPLAIN (ANALYZE, FORMAT JSON) and returns the most rows any
// node of the plan handled over all its loops (returned or removed by its filter), and the node.
func mostRowsOfAStep(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) (int, string) {
	t.Helper()
	var out []struct{ Plan planNode }
	if err := pool.QueryRow(context.Background(), "EXPLAIN (ANALYZE, FORMAT JSON) "+sql, args...).Scan(&out); err != nil || len(out) != 1 {
		t.Fatalf("explain: %v", err)
	}
	most, node := 0, ""
	var walk func(n planNode)
	walk = func(n planNode) {
		if rows := int((n.ActualRows + n.RemovedByFilter) * n.ActualLoops); rows > most {
			most, node = rows, strings.TrimSpace(n.NodeType+" "+n.RelationName)
		}
		for _, c := range n.Plans {
			walk(c)
		}
	}
	walk(out[0].Plan)
	return most, node
}

type planNode struct {
	NodeType        string     `json:"Node Type"`
	RelationName    string     `json:"Relation Name"`
	ActualRows      float64    `json:"Actual Rows"`
	ActualLoops     float64    `json:"Actual Loops"`
	RemovedByFilter float64    `json:"Rows Removed by Filter"`
	Plans           []planNode `json:"Plans"`
}
