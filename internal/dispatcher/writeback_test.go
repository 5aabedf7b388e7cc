package dispatcher

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// A write-back PostgreSQL refuses on one item's data is split: the batch-mates are stored and
// the refused item is rescheduled as failed with the error, nothing left leased.
func TestRefusedItemDoesNotStrandItsBatchMates(t *testing.T) {
	t.Parallel()
	e := setup(t, 6, tiers.Active, nil)
	bad := e.items[3].ItemID
	ctx := context.Background()
	// A constraint this one item's snapshot breaks, as a real data error would.
	_, err := e.pool.Exec(ctx, `
		CREATE FUNCTION refuse_one() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.item_id = '`+bad+`' THEN RAISE EXCEPTION 'value out of range for item' USING ERRCODE = '22003'; END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER refuse_one BEFORE INSERT ON auction_snapshots FOR EACH ROW EXECUTE FUNCTION refuse_one();`)
	if err != nil {
		t.Fatal(err)
	}
	s, err := e.dispatcher(t, Config{FlushSize: 50, Concurrency: 1}, nil).RunOnce(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if s.Collected != 5 || s.Failed != 1 {
		t.Fatalf("summary %s: want 5 collected, 1 failed", s)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL`); n != 0 {
		t.Fatalf("%d items still leased", n)
	}
	if n := count(t, e.pool, `SELECT count(DISTINCT item_id) FROM auction_snapshots`); n != 5 {
		t.Fatalf("%d items have a snapshot, want the 5 good ones", n)
	}
	var outcome, lastErr string
	if err := e.pool.QueryRow(ctx, `SELECT last_outcome, last_error FROM tracked_items WHERE item_id = $1 AND next_collect_at > now()`,
		bad).Scan(&outcome, &lastErr); err != nil {
		t.Fatalf("refused item not rescheduled: %v", err)
	}
	if outcome != "write_refused" || !strings.Contains(lastErr, "22003") {
		t.Fatalf("refused item: outcome %q, error %q", outcome, lastErr)
	}
}

// A write-back whose connection is killed mid-transaction is retried while the leases are
// still ours: every result is stored, nothing is left leased.
func TestWriteBackRetriesAKilledConnection(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var e *env
	var lockTx pgx.Tx
	var lockOnce sync.Once
	locked := make(chan struct{}, 1)
	e = setup(t, 4, tiers.Active, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction" && r.URL.Query().Get("itemId") == e.items[0].ItemID {
				// Hold the item's row so the write-back blocks where the test can kill it.
				lockOnce.Do(func() {
					tx, err := e.pool.Begin(ctx)
					if err == nil {
						_, err = tx.Exec(ctx, `SELECT 1 FROM tracked_items WHERE item_id = $1 FOR UPDATE`, e.items[0].ItemID)
					}
					if err != nil {
						t.Error(err)
					}
					lockTx = tx
					locked <- struct{}{}
				})
			}
			next.ServeHTTP(w, r)
		})
	})
	done := make(chan struct{}, 1)
	var s Summary
	var runErr error
	go func() {
		defer func() { done <- struct{}{} }()
		s, runErr = e.dispatcher(t, Config{Concurrency: 1, FlushSize: 50}, nil).RunOnce(ctx)
	}()
	testkit.Recv(t, locked, 20*time.Second, "the item's row to be held")
	testkit.Eventually(t, 20*time.Second, "the write-back to block on the held row, then its connection killed", func() bool {
		var killed bool
		err := e.pool.QueryRow(ctx, `
			SELECT pg_terminate_backend(pid) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%est_n, est_x, est_c, est_u, est_sales)%'
			LIMIT 1`).Scan(&killed)
		if err != nil && err != pgx.ErrNoRows {
			t.Fatal(err)
		}
		return killed
	})
	if err := lockTx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	testkit.Recv(t, done, time.Minute, "the pass to end")
	if runErr != nil || s.Collected != 4 {
		t.Fatalf("summary %s, %v: want all 4 collected after the retry", s, runErr)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL`); n != 0 {
		t.Fatalf("%d items still leased", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM auction_snapshots`); n != 4 {
		t.Fatalf("%d snapshots, want 4", n)
	}
}

// A write-back that fails on a lost connection, while every lease of its group passed to
// another collector (this process was stopped past them), is fenced out, not a failed pass:
// the retry's renewal finds none of the leases its own, and nothing may be written.
func TestAWriteBackWhoseLeasesAllPassedIsFencedOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, 3, tiers.Active, nil)
	d := e.dispatcher(t, Config{Concurrency: 1, FlushSize: 50, MaxBatches: 1}, nil)
	var once sync.Once
	d.inWrite = func([]result) {
		once.Do(func() {
			// Taken by another collector, then this transaction's session ended mid-way.
			if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET lease_token = gen_random_uuid(), leased_by = 'taker',
				lease_expires_at = now() + interval '1 hour'`); err != nil {
				t.Error(err)
			}
			if _, err := e.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND state = 'idle in transaction'`); err != nil {
				t.Error(err)
			}
		})
	}
	s, err := d.RunOnce(ctx)
	if err != nil || s.Fenced != 3 || s.Failed != 0 || s.Collected != 0 {
		t.Fatalf("summary %s, %v: want all 3 fenced out and no error", s, err)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM auction_snapshots`); n != 0 {
		t.Fatalf("%d snapshots written for items another collector holds", n)
	}
}

// After the pass ended (shutdown), a write-back that fails transiently is retried only while
// its leases hold: eight attempts of up to 30 s each, per group, kept a daemon from exiting for
// minutes behind a database that dropped traffic. The claim's lease alone does not decide it:
// renewals while the batch ran may have extended it, so the database is asked.
func TestAShutdownWriteBackRetriesOnlyWhileItsLeasesHold(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, c := range []struct {
		name         string
		renewable    bool
		taken        bool // another collector holds the items now
		wantAttempts int
	}{
		{"the database cannot renew", false, false, 1},
		{"the leases were renewed meanwhile", true, false, 2},
		{"the items passed to another collector", true, true, 1},
	} {
		e := setup(t, 2, tiers.Active, nil)
		d := e.dispatcher(t, Config{}, nil)
		claims, err := catalog.ClaimDue(ctx, e.pool, 2, time.Minute, "test", 0)
		if err != nil || len(claims) != 2 {
			t.Fatalf("claimed %d: %v", len(claims), err)
		}
		var results []result
		d.clock.set(claims[0].DBNow)
		for _, cl := range claims {
			results = append(results, d.fetchOne(ctx, cl))
		}
		// The claim's lease is over by the dispatcher's clock, as after a long batch or outage.
		d.clock.set(claims[0].DBNow.Add(2 * time.Minute))
		if !c.renewable {
			// Every update of the items fails as a lost session would: write-backs and renewals.
			if _, err := e.pool.Exec(ctx, `
				CREATE FUNCTION refuse_updates() RETURNS trigger LANGUAGE plpgsql AS $$
				BEGIN RAISE EXCEPTION 'test: connection lost' USING ERRCODE = '08006'; END $$;
				CREATE TRIGGER refuse_updates BEFORE UPDATE ON tracked_items FOR EACH ROW EXECUTE FUNCTION refuse_updates();`); err != nil {
				t.Fatal(err)
			}
		}
		if c.taken {
			if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET lease_token = gen_random_uuid(), leased_by = 'taker'`); err != nil {
				t.Fatal(err)
			}
		}
		attempts := 0
		d.inWrite = func([]result) {
			attempts++
			if attempts > 1 {
				return
			}
			if _, err := e.pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
				WHERE datname = current_database() AND state = 'idle in transaction'`); err != nil {
				t.Error(err)
			}
		}
		pass, stop := context.WithCancel(ctx)
		stop() // the shutdown
		w := &writer{d: d, pass: pass}
		ws, err := w.writeRetrying(ctx, results)
		if attempts != c.wantAttempts {
			t.Fatalf("%s: %d attempts after the shutdown, want %d", c.name, attempts, c.wantAttempts)
		}
		if c.taken && (err != nil || len(ws.fenced) != 2 || len(ws.stored) != 0) {
			t.Fatalf("%s: %d fenced, %d stored, %v; want both fenced out and no error", c.name, len(ws.fenced), len(ws.stored), err)
		}
		if c.renewable && !c.taken && (err != nil || len(ws.stored) != 2) {
			t.Fatalf("%s: %d stored, %v; want both written on the second attempt", c.name, len(ws.stored), err)
		}
		if !c.renewable && err == nil {
			t.Fatalf("%s: the write-back succeeded", c.name)
		}
	}
}

// A server at max_connections (53300) refuses the session a write-back needs, not the write:
// the write-back is retried for as long as its leases hold, as for a refusal, not given up
// after writeAttempts with answers already paid for. (Its back-off is real: ~16 s.)
func TestAWriteBackOutlastsAServerWithNoSessionToSpare(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, 2, tiers.Active, nil)
	d := e.dispatcher(t, Config{}, nil)
	claims, err := catalog.ClaimDue(ctx, e.pool, 2, time.Minute, "test", 0)
	if err != nil || len(claims) != 2 {
		t.Fatalf("claimed %d: %v", len(claims), err)
	}
	d.clock.set(claims[0].DBNow)
	var results []result
	for _, cl := range claims {
		results = append(results, d.fetchOne(ctx, cl))
	}
	// Write-backs (which move next_collect_at) fail as a dial to a full server does; lease
	// renewals between them go through.
	if _, err := e.pool.Exec(ctx, `
		CREATE FUNCTION no_session() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.next_collect_at IS DISTINCT FROM OLD.next_collect_at THEN
				RAISE EXCEPTION 'sorry, too many clients already' USING ERRCODE = '53300';
			END IF;
			RETURN NEW;
		END $$;
		CREATE TRIGGER no_session BEFORE UPDATE ON tracked_items FOR EACH ROW EXECUTE FUNCTION no_session();`); err != nil {
		t.Fatal(err)
	}
	attempts := 0
	d.inWrite = func([]result) {
		if attempts++; attempts == writeAttempts+1 {
			if _, err := e.pool.Exec(ctx, `DROP TRIGGER no_session ON tracked_items`); err != nil {
				t.Error(err)
			}
		}
	}
	w := &writer{d: d, pass: ctx}
	ws, err := w.writeRetrying(ctx, results)
	if err != nil || len(ws.stored) != 2 || attempts != writeAttempts+1 {
		t.Fatalf("%d stored after %d attempts, %v; want both stored once the server had a session", len(ws.stored), attempts, err)
	}
}

// A pass whose write-back fails as it does behind a mismatched PgBouncer (prepared statement
// errors) hands its claims back at once, instead of leaving them leased until expiry, and
// its error names the setting to change.
func TestPoolerMismatchReleasesClaimsAtOnce(t *testing.T) {
	e := setup(t, 4, tiers.Active, nil)
	ctx := context.Background()
	_, err := e.pool.Exec(ctx, `
		CREATE FUNCTION fail_like_pgbouncer() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			RAISE EXCEPTION 'prepared statement "stmtcache_1" does not exist' USING ERRCODE = '26000';
		END $$;
		CREATE TRIGGER fail_like_pgbouncer BEFORE INSERT ON auction_snapshots FOR EACH ROW EXECUTE FUNCTION fail_like_pgbouncer();`)
	if err != nil {
		t.Fatal(err)
	}
	// One item a claim: the failed write-back hands its item back while the pass could still
	// claim, and the pass must end rather than fetch the same items again and again.
	s, err := e.dispatcher(t, Config{FlushSize: 50, Concurrency: 1, Lease: time.Hour, BatchSize: 1}, nil).RunOnce(ctx)
	if err == nil || !strings.Contains(err.Error(), "database.query_exec_mode") {
		t.Fatalf("pass error %v: want one naming database.query_exec_mode", err)
	}
	if s.Claimed > 4 {
		t.Fatalf("the pass claimed %d times for 4 items: it went on claiming what its failed write-backs handed back", s.Claimed)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL`); n != 0 {
		t.Fatalf("%d items still leased (for an hour) after the failed pass", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE next_collect_at <= now() AND last_collected_at IS NULL`); n != 4 {
		t.Fatalf("%d items due again, want all 4 with their schedule untouched", n)
	}
}

// A write-back whose commit went through but whose answer was lost is retried with the same
// results: the retry finds the lease tokens gone, so it is fenced out and stores nothing
// twice (one snapshot, one event and one count in each candle per claim).
func TestARetriedWriteBackAfterALostCommitStoresNothingTwice(t *testing.T) {
	const n = 3
	e := setup(t, n, tiers.Active, nil)
	ctx := context.Background()
	d := e.dispatcher(t, Config{}, nil)
	claims, err := catalog.ClaimDue(ctx, e.pool, n, time.Minute, "test", 0)
	if err != nil || len(claims) != n {
		t.Fatalf("claimed %d: %v", len(claims), err)
	}
	d.clock.set(claims[0].DBNow)
	var results []result
	for _, c := range claims {
		results = append(results, d.fetchOne(ctx, c))
	}
	first, err := writeBack(ctx, e.pool, d.cfg.History, results, nil)
	if err != nil || len(first.fenced) != 0 || len(first.stored) != n {
		t.Fatalf("first write-back: %+v, %v", first, err)
	}
	retry, err := writeBack(ctx, e.pool, d.cfg.History, results, nil)
	if err != nil || len(retry.fenced) != n {
		t.Fatalf("the retry should be fenced out whole: %+v, %v", retry, err)
	}
	snaps := count(t, e.pool, `SELECT count(*) FROM auction_snapshots`)
	events := count(t, e.pool, `SELECT count(*) FROM outbox`)
	inCandles := count(t, e.pool, `SELECT coalesce(sum(snapshots), 0) FROM price_candles WHERE resolution = '1h'`)
	if snaps != n || events != n || inCandles != n {
		t.Fatalf("after the retry: %d snapshots, %d events, %d in hourly candles; want %d each", snaps, events, inCandles, n)
	}
}

// Statements that lock several tracked_items rows take them in item_id order, as the
// recalculation and the import do: while one waits for a row another holds, it holds no row
// after it. In arrival order, a write-back holding B and waiting for A deadlocked with a
// recalculation holding A and reaching B, which lost the whole recalculation.
func TestRowLockersTakeItemsInIdOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, 2, tiers.Active, nil)
	d := e.dispatcher(t, Config{}, nil)
	for _, c := range []struct {
		what string
		lock func(claims []catalog.Claim, results []result) error
	}{
		{"write-back", func(_ []catalog.Claim, results []result) error {
			_, err := writeBack(ctx, e.pool, d.cfg.History, results, nil)
			return err
		}},
		{"lease renewal", func(claims []catalog.Claim, _ []result) error {
			_, err := catalog.RenewLeases(ctx, e.pool, claims, time.Minute)
			return err
		}},
		{"lease release", func(claims []catalog.Claim, _ []result) error {
			_, err := catalog.ReleaseLeases(ctx, e.pool, claims)
			return err
		}},
	} {
		if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now(), lease_token = NULL, lease_expires_at = NULL`); err != nil {
			t.Fatal(err)
		}
		claims, err := catalog.ClaimDue(ctx, e.pool, 2, time.Minute, "test", 0)
		if err != nil || len(claims) != 2 {
			t.Fatalf("claimed %d: %v", len(claims), err)
		}
		d.clock.set(claims[0].DBNow)
		slices.SortFunc(claims, func(a, b catalog.Claim) int { return -strings.Compare(a.ItemID, b.ItemID) }) // B, A
		var results []result
		for _, cl := range claims {
			results = append(results, d.fetchOne(ctx, cl))
		}
		first, second := claims[1].ItemID, claims[0].ItemID
		holder, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := holder.Exec(ctx, `SELECT 1 FROM tracked_items WHERE item_id = $1 FOR UPDATE`, first); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- c.lock(claims, results) }()
		testkit.Eventually(t, 20*time.Second, c.what+" to wait for the held row", func() bool {
			var n int
			if err := e.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%tracked_items%'`).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n > 0
		})
		// The later row is free while it waits for the earlier one.
		probe, err := e.pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, perr := probe.Exec(ctx, `SELECT 1 FROM tracked_items WHERE item_id = $1 FOR UPDATE NOWAIT`, second)
		_ = probe.Rollback(ctx)
		if err := holder.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		if err := testkit.Recv(t, done, testkit.Timeout, c.what); err != nil {
			t.Fatal(err)
		}
		if perr != nil {
			t.Errorf("%s held %s while waiting for %s: %v", c.what, second, first, perr)
		}
	}
}

// A failed collection records the attempt and nothing it did not see: the item's last
// collection, the market it last saw (what /latest serves) and its count of sales gaps stay;
// its attempt, outcome and failure streak move, and it is rescheduled.
func TestAFailedCollectionKeepsWhatWasLastSeen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, 2, tiers.Active, nil)
	d := e.dispatcher(t, Config{}, nil)
	type row struct {
		Collected, Attempted, Next time.Time
		Lowest                     *int64
		Gaps, Streak               int
		Outcome                    string
	}
	read := func() map[string]row {
		rows, _ := e.pool.Query(ctx, `SELECT item_id, last_collected_at, last_attempt_at, next_collect_at, seen_lowest_price,
			sales_gaps, failure_streak, last_outcome FROM tracked_items`)
		out := map[string]row{}
		for rows.Next() {
			var id string
			var r row
			if err := rows.Scan(&id, &r.Collected, &r.Attempted, &r.Next, &r.Lowest, &r.Gaps, &r.Streak, &r.Outcome); err != nil {
				t.Fatal(err)
			}
			out[id] = r
		}
		if rows.Err() != nil {
			t.Fatal(rows.Err())
		}
		return out
	}
	claimAll := func() []catalog.Claim {
		if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now()`); err != nil {
			t.Fatal(err)
		}
		claims, err := catalog.ClaimDue(ctx, e.pool, 2, time.Minute, "test", 0)
		if err != nil || len(claims) != 2 {
			t.Fatalf("claimed %d: %v", len(claims), err)
		}
		return claims
	}
	var results []result
	claims := claimAll()
	d.clock.set(claims[0].DBNow)
	for _, c := range claims {
		results = append(results, d.fetchOne(ctx, c))
	}
	if _, err := writeBack(ctx, e.pool, d.cfg.History, results, nil); err != nil {
		t.Fatal(err)
	}
	seen := read()
	results = results[:0]
	for _, c := range claimAll() {
		// A failure flagged with a sales gap as well: a gap needs a sales page that was read.
		results = append(results, result{claim: c, at: c.DBNow.Add(time.Second), err: errors.New("test: connection reset"),
			outcome: "transient", salesGap: true, window: d.cfg.EstimateWindow})
	}
	if _, err := writeBack(ctx, e.pool, d.cfg.History, results, nil); err != nil {
		t.Fatal(err)
	}
	for id, after := range read() {
		before := seen[id]
		if before.Lowest == nil {
			t.Fatalf("%s: no market seen by the first collection", id)
		}
		if !after.Collected.Equal(before.Collected) || after.Lowest == nil || *after.Lowest != *before.Lowest || after.Gaps != before.Gaps {
			t.Errorf("%s after a failure: last collected %s (was %s), lowest %v (was %d), sales gaps %d (was %d); want them kept",
				id, after.Collected, before.Collected, after.Lowest, *before.Lowest, after.Gaps, before.Gaps)
		}
		if !after.Attempted.After(before.Attempted) || after.Outcome != "transient" || after.Streak != 1 || !after.Next.After(after.Attempted) {
			t.Errorf("%s after a failure: attempted %s, outcome %q, streak %d, next %s; want a new attempt, transient, 1, rescheduled",
				id, after.Attempted, after.Outcome, after.Streak, after.Next)
		}
	}
}

// An item whose tier moved while it was being collected (a recalculation promoted it and made it
// due at once) keeps the schedule the move gave it: the write-back of the old tier's claim does
// not put it back in that tier's next slot.
func TestAWriteBackKeepsTheScheduleATierMoveGave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, 1, tiers.Cold, nil)
	d := e.dispatcher(t, Config{}, nil)
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now()`); err != nil {
		t.Fatal(err)
	}
	claims, err := catalog.ClaimDue(ctx, e.pool, 1, time.Minute, "test", 0)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claimed %d: %v", len(claims), err)
	}
	d.clock.set(claims[0].DBNow)
	r := d.fetchOne(ctx, claims[0])
	var promoted time.Time
	if err := e.pool.QueryRow(ctx, `UPDATE tracked_items SET collection_tier = 'HOT_1M', next_collect_at = now() + interval '5 seconds'
		RETURNING next_collect_at`).Scan(&promoted); err != nil {
		t.Fatal(err)
	}
	ws, err := writeBack(ctx, e.pool, d.cfg.History, []result{r}, nil)
	if err != nil || len(ws.stored) != 1 {
		t.Fatalf("write-back: %d stored, %v", len(ws.stored), err)
	}
	var next time.Time
	var leased bool
	if err := e.pool.QueryRow(ctx, `SELECT next_collect_at, lease_token IS NOT NULL FROM tracked_items`).Scan(&next, &leased); err != nil {
		t.Fatal(err)
	}
	if !next.Equal(promoted) || leased {
		t.Fatalf("after the write-back: due %s, leased %v; want the promotion's %s, released", next, leased, promoted)
	}
}
