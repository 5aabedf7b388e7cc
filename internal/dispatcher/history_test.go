package dispatcher

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/history"
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
	e := setup(t, n, tiers.Cold, frozen())
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
