package outbox

import (
	"context"
	"testing"
	"time"
)

// week is a retention.outbox_unpublished an operator might choose.
const week = 7 * 24 * time.Hour

// Rows that expire while a relay has them in flight are published once: the relay's mark finds
// their entries gone and reports them unmarked, without an error, and no later pass sends them
// again.
func TestExpiryUnderAPublishingRelayPublishesOnce(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	ctx := context.Background()
	enqueue(t, pool, snapshotEvents(5, 2))
	if _, err := pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '10 days'`); err != nil {
		t.Fatal(err)
	}
	r, _ := newTestRelay(t, pool, testConfig(broker.ListenAddrs(), "relay"))
	if _, _, err := r.lanes.renew(ctx, true); err != nil {
		t.Fatal(err)
	}
	// One step of the relay, split where retention expires the rows.
	rows, err := readPending(ctx, pool, r.lanes.tokens(), 0, 100, "{}")
	if err != nil || len(rows) != 10 {
		t.Fatalf("read %d pending rows (%v), want 10", len(rows), err)
	}
	if _, err := r.publish(ctx, rows); err != nil {
		t.Fatal(err)
	}
	n, err := DeleteExpired(ctx, pool, week, 1000)
	if err != nil || n != 10 {
		t.Fatalf("expired %d rows (%v), want the 10 in flight", n, err)
	}
	_, lost, err := markSettled(ctx, pool, r.lanes.tokens(), rows, nil)
	if err != nil || !lost {
		t.Fatalf("markSettled after expiry: lost %v, %v; want the rows reported unmarked and no error", lost, err)
	}
	if err := r.lanes.release(ctx, 0); err != nil {
		t.Fatal(err)
	}
	if res, err := r.RunOnce(ctx); err != nil || res.Published != 0 {
		t.Fatalf("the next pass: %+v %v; want nothing left to publish", res, err)
	}
	if recs := consumeAll(t, broker, testTopic); len(recs) != 10 {
		t.Fatalf("the topic holds %d records, want each of the 10 once", len(recs))
	}
	if n := countWhere(t, pool, "true"); n != 0 {
		t.Fatalf("%d outbox rows left", n)
	}
}

// Expiry never waits on a relay that is marking a lane: the rows whose pending entry or outbox
// row it holds are left (entry and row together) for the next pass, the others expire.
func TestExpiryNeverWaitsOnARelayMarking(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	enqueue(t, pool, snapshotEvents(4, 1))
	if _, err := pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '10 days'`); err != nil {
		t.Fatal(err)
	}
	var entry, row int64
	if err := pool.QueryRow(ctx, `SELECT min(id), max(id) FROM outbox`).Scan(&entry, &row); err != nil {
		t.Fatal(err)
	}
	// What markSettled holds: a pending entry it deletes, an outbox row it updates.
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	for _, lock := range []struct {
		sql string
		id  int64
	}{{`SELECT FROM outbox_pending WHERE id = $1 FOR UPDATE`, entry}, {`SELECT FROM outbox WHERE id = $1 FOR UPDATE`, row}} {
		if _, err := tx.Exec(ctx, lock.sql, lock.id); err != nil {
			t.Fatal(err)
		}
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	n, err := DeleteExpired(wctx, pool, week, 1000)
	if err != nil || n != 2 {
		t.Fatalf("expired %d rows (%v), want the 2 nobody holds, without waiting", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if n := countWhere(t, pool, "state = 'pending'"); n != 2 {
		t.Fatalf("%d rows pending, want the 2 held ones with their entries", n)
	}
	var orphans int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_pending p WHERE NOT EXISTS (SELECT FROM outbox o WHERE o.id = p.id)`).Scan(&orphans); err != nil || orphans != 0 {
		t.Fatalf("%d pending entries point at no outbox row (%v)", orphans, err)
	}
	if n, err := DeleteExpired(ctx, pool, week, 1000); err != nil || n != 2 {
		t.Fatalf("the next pass expired %d rows (%v), want the 2 left", n, err)
	}
}
