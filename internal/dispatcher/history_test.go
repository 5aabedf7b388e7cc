package dispatcher

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// frozen answers every request as the simulator first answered it: a market that never moves.
func frozen() func(next http.Handler) http.Handler {
	var mu sync.Mutex
	seen := map[string]*httptest.ResponseRecorder{}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			rec, ok := seen[r.URL.String()]
			if !ok {
				rec = httptest.NewRecorder()
				next.ServeHTTP(rec, r)
				seen[r.URL.String()] = rec
			}
			mu.Unlock()
			for k, v := range rec.Header() {
				w.Header()[k] = v
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
		})
	}
}

func (e *env) due(t *testing.T) {
	t.Helper()
	if _, err := e.pool.Exec(context.Background(), `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
}

// An unchanged market writes no snapshot and no event, only the time it was seen; the
// heartbeat writes one anyway once the last is old enough; every mode writes each collection.
func TestUnchangedCollectionsWriteNothingButTheirTimeUntilTheHeartbeat(t *testing.T) {
	const n = 20
	e := setupSim(t, n, tiers.Cold, stoppedMarket(), frozen())
	ctx := context.Background()
	stored := &storedCounts{n: map[history.Reason]int{}}
	pass := func(cfg Config) {
		t.Helper()
		cfg.Observer = stored
		e.due(t)
		if s, err := e.dispatcher(t, cfg, nil).RunOnce(ctx); err != nil || s.Collected != n {
			t.Fatalf("pass: %s %v", s, err)
		}
	}
	rows := func(reason string) (snaps, events int) {
		t.Helper()
		return count(t, e.pool, `SELECT count(*) FROM auction_snapshots WHERE reason = $1`, reason),
			count(t, e.pool, `SELECT count(*) FROM outbox WHERE payload->>'reason' = $1`, reason)
	}
	pass(Config{})
	if s, ev := rows("first"); s != n || ev != n {
		t.Fatalf("first collections: %d snapshots, %d events; want %d each", s, ev, n)
	}
	var firstSeen time.Time
	if err := e.pool.QueryRow(ctx, `SELECT max(last_collected_at) FROM tracked_items`).Scan(&firstSeen); err != nil {
		t.Fatal(err)
	}

	pass(Config{})
	if got := stored.get(history.Skip); got != n {
		t.Fatalf("the observer heard %d collections seen unchanged, want %d", got, n)
	}
	if total := count(t, e.pool, `SELECT count(*) FROM auction_snapshots`); total != n {
		t.Fatalf("an unchanged market wrote %d snapshots in all, want the %d first ones", total, n)
	}
	if total := count(t, e.pool, `SELECT count(*) FROM outbox`); total != n {
		t.Fatalf("an unchanged market wrote %d events in all", total)
	}
	// Seen unchanged: last_collected_at moved on past the last snapshot, which stayed.
	if k := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_collected_at > $1 AND last_snapshot_at < last_collected_at`, firstSeen); k != n {
		t.Fatalf("%d of %d items record that they were seen unchanged", k, n)
	}

	// The last snapshots are two hours old as far as the items know: the heartbeat is due.
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET last_snapshot_at = last_snapshot_at - interval '2 hours'`); err != nil {
		t.Fatal(err)
	}
	pass(Config{})
	if s, ev := rows("heartbeat"); s != n || ev != n {
		t.Fatalf("heartbeat: %d snapshots, %d events; want %d each", s, ev, n)
	}
	var prev, until *time.Time
	if err := e.pool.QueryRow(ctx, `SELECT (payload->>'previous_snapshot_at')::timestamptz, (payload->>'unchanged_until')::timestamptz
		FROM outbox WHERE payload->>'reason' = 'heartbeat' LIMIT 1`).Scan(&prev, &until); err != nil || prev == nil || until == nil || !until.After(*prev) {
		t.Fatalf("a heartbeat event says since when it was unchanged: previous %v, until %v (%v)", prev, until, err)
	}

	pass(Config{History: everyCollection})
	if s, ev := rows("repeat"); s != n || ev != n {
		t.Fatalf("history.mode every: %d repeat snapshots, %d events; want %d each", s, ev, n)
	}
	if f, h, r := stored.get(history.First), stored.get(history.Heartbeat), stored.get(history.Repeat); f != n || h != n || r != n {
		t.Fatalf("the observer heard %d first, %d heartbeat, %d repeat snapshots; want %d each", f, h, r, n)
	}
}

// storedCounts is an Observer that counts what history stored, by reason.
type storedCounts struct {
	nopObserver
	mu sync.Mutex
	n  map[history.Reason]int
}

func (s *storedCounts) Stored(r map[history.Reason]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, v := range r {
		s.n[k] += v
	}
}

func (s *storedCounts) get(r history.Reason) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n[r]
}

// A write-back never fails for a missing partition: with partition upkeep stopped long enough
// that no partition holds today, the write creates what it needs and goes through.
func TestAWriteFindingNoPartitionCreatesItAndSucceeds(t *testing.T) {
	const n = 10
	e := setup(t, n, tiers.Cold, nil)
	ctx := context.Background()
	for _, table := range []string{"auction_snapshots", "auction_sales"} {
		rows, err := e.pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = $1::regclass AND pg_get_expr(c.relpartbound, c.oid) NOT LIKE '%MINVALUE%'`, table)
		if err != nil {
			t.Fatal(err)
		}
		names, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range names {
			if _, err := e.pool.Exec(ctx, `DROP TABLE `+pgx.Identifier{name}.Sanitize()); err != nil {
				t.Fatal(err)
			}
		}
	}
	s, err := e.dispatcher(t, Config{}, nil).RunOnce(ctx)
	if err != nil || s.Collected != n || s.Failed != 0 {
		t.Fatalf("pass with no partition for today: %s %v", s, err)
	}
	if got := count(t, e.pool, `SELECT count(*) FROM auction_snapshots WHERE collected_at > now() - interval '1 hour'`); got != n {
		t.Fatalf("%d snapshots stored, want %d", got, n)
	}
	if got := count(t, e.pool, `SELECT count(*) FROM pg_inherits WHERE inhparent = 'auction_snapshots'::regclass`); got < 8 {
		t.Fatalf("%d snapshot partitions after the write created them, want the archive and a week ahead", got)
	}
}

// The series rebuilt from what history.mode changes stored through the whole pass (claim,
// fetch, the fenced write-back that records the last snapshot's market on the item, and the
// next claim reading it back) equals the series history.mode every stored, at every pass, on
// a moving market: the same simulated market and clock for both, collected at the same
// simulated instants.
func TestChangeOnlySeriesThroughThePassEqualsEveryCollection(t *testing.T) {
	const n, passes = 30, 40
	var mu sync.Mutex
	clock := time.Now().Add(-24 * time.Hour)
	now := func() time.Time { mu.Lock(); defer mu.Unlock(); return clock }
	opts := neoplesim.Options{Seed: 5, Market: market.Realistic, Now: now}
	envs := map[string]*env{"every": setupSim(t, n, tiers.Hot, opts, nil), "changes": setupSim(t, n, tiers.Hot, opts, nil)}
	policies := map[string]history.Policy{"every": everyCollection, "changes": {Heartbeat: time.Hour}}
	ctx := context.Background()
	dbNow := map[string][]time.Time{}
	for range passes {
		for _, mode := range []string{"every", "changes"} {
			e := envs[mode]
			e.due(t)
			var at time.Time
			if err := e.pool.QueryRow(ctx, `SELECT now()`).Scan(&at); err != nil {
				t.Fatal(err)
			}
			dbNow[mode] = append(dbNow[mode], at)
			if s, err := e.dispatcher(t, Config{History: policies[mode]}, nil).RunOnce(ctx); err != nil || s.Collected != n {
				t.Fatalf("%s pass: %s %v", mode, s, err)
			}
		}
		mu.Lock()
		clock = clock.Add(3 * time.Minute)
		mu.Unlock()
	}
	// Each mode's series at pass k, item by item: every mode's snapshot of that pass, and the
	// latest change-only snapshot at or before it (its new sales only if it is of that pass).
	series := func(mode string, latest bool) map[string]string {
		t.Helper()
		bounds := append(dbNow[mode][1:], time.Now().Add(time.Hour))
		rows, err := envs[mode].pool.Query(ctx, `
			WITH p AS (SELECT k, lo, hi FROM unnest($1::timestamptz[], $2::timestamptz[]) WITH ORDINALITY AS p(lo, hi, k))
			SELECT p.k || '/' || i.item_id,
			       coalesce(s.lowest_unit_price::text, '-') || '/' || coalesce(s.median_unit_price::text, '-') || '/' ||
			       coalesce(s.weighted_unit_price::text, '-') || '/' || coalesce(s.api_average_price::text, '-') || '/' ||
			       s.listing_count || '/' || s.listing_quantity || '/' || s.listings_truncated || '/' ||
			       CASE WHEN s.collected_at >= p.lo THEN s.sales_count || '/' || s.sales_quantity ELSE '0/0' END
			FROM p CROSS JOIN tracked_items i
			CROSS JOIN LATERAL (SELECT * FROM auction_snapshots s WHERE s.item_id = i.item_id AND s.collected_at < p.hi
			                    AND ($3 OR s.collected_at >= p.lo) ORDER BY collected_at DESC LIMIT 1) s`, dbNow[mode], bounds, latest)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]string{}
		var k, v string
		if _, err := pgx.ForEachRow(rows, []any{&k, &v}, func() error { out[k] = v; return nil }); err != nil {
			t.Fatal(err)
		}
		return out
	}
	every, changes := series("every", false), series("changes", true)
	if len(every) != n*passes || len(changes) != n*passes {
		t.Fatalf("series of %d and %d points, want %d each", len(every), len(changes), n*passes)
	}
	diffs := 0
	for k, v := range every {
		if changes[k] != v {
			if diffs++; diffs <= 3 {
				t.Errorf("pass/item %s: every %s, changes rebuilt %s", k, v, changes[k])
			}
		}
	}
	written := count(t, envs["changes"].pool, `SELECT count(*) FROM auction_snapshots WHERE reason = 'change'`)
	if diffs > 0 || written == 0 || written >= n*(passes-1) {
		t.Fatalf("%d of %d points differ; %d change snapshots of %d later collections", diffs, n*passes, written, n*(passes-1))
	}
}

// Upkeep stopped before midnight: yesterday's partitions are all there is, and one write-back
// holds rows of both days: the snapshot collected now and a sale at 00:00:00 (today, no
// partition), a sale at 23:59:30 (yesterday's). The write creates today's and stores them all.
func TestAWriteStraddlingMidnightWithNoPartitionForTheNewDaySucceeds(t *testing.T) {
	var sold string // set before the pass starts
	e := setup(t, 1, tiers.Cold, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction-sold" {
				_, _ = w.Write([]byte(strings.ReplaceAll(sold, `"itemId":"X"`, `"itemId":"`+r.URL.Query().Get("itemId")+`"`)))
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	ctx := context.Background()
	today := storetest.PartitionDays(t, e.pool, -1, 0, "auction_snapshots", "auction_sales")
	// A sale at midnight read within history.SalesSettle of it is held back for the next
	// collection: a run in the first seconds of a day waits those out.
	if wait := time.Until(today.Add(history.SalesSettle + time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	row := func(at time.Time) string {
		return `{"soldDate":"` + at.In(provider.KST).Format("2006-01-02 15:04:05") + `","itemId":"X","itemName":"n","count":1,"price":10,"unitPrice":10}`
	}
	sold = `{"rows":[` + row(today) + `,` + row(today.Add(-30*time.Second)) + `]}`
	s, err := e.dispatcher(t, Config{}, nil).RunOnce(ctx)
	if err != nil || s.Collected != 1 || s.Failed != 0 {
		t.Fatalf("pass across midnight with no partition for today: %s %v", s, err)
	}
	if got := count(t, e.pool, `SELECT count(*) FROM auction_snapshots WHERE collected_at >= date_bin('1 day', now(), '2000-01-01 00:00:00+00')`); got != 1 {
		t.Fatalf("%d snapshots stored today, want 1", got)
	}
	if y, all := count(t, e.pool, `SELECT count(*) FROM auction_sales_day99`), count(t, e.pool, `SELECT count(*) FROM auction_sales`); y != 1 || all != 2 {
		t.Fatalf("%d sales in yesterday's partition of %d stored, want 1 of 2", y, all)
	}
}
