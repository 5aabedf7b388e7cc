package outbox

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
)

// holdingTen is a relay named owner holding every lane, and the ten pending events it reads.
func holdingTen(t *testing.T, owner string) (*pgxpool.Pool, *kfake.Cluster, *Relay, []pendingRow) {
	t.Helper()
	pool := newDB(t)
	broker := newBroker(t)
	ctx := context.Background()
	enqueue(t, pool, snapshotEvents(5, 2))
	r, _ := newTestRelay(t, pool, testConfig(broker.ListenAddrs(), owner))
	if _, _, err := r.lanes.renew(ctx, true); err != nil {
		t.Fatal(err)
	}
	rows, err := readPending(ctx, pool, r.lanes.tokens(), r.publishWindow(), 100, "{}")
	if err != nil || len(rows) != 10 {
		t.Fatalf("holding its lanes, the relay read %d rows (%v), want 10", len(rows), err)
	}
	return pool, broker, r, rows
}

// A relay whose own count of its lease says it still holds its lanes (its clock stood still
// while its VM was paused) publishes nothing of lanes the database gave to another relay since:
// the read checks the tokens and the lease by the database's clock, so the other relay's events
// are not published twice and out of order.
func TestARelayWhoseLanesWereTakenOverReadsNothingOfThem(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, broker, r, _ := holdingTen(t, "paused")
	// While it was paused its leases lapsed and another relay took every lane.
	takeEveryLane(t, pool)
	if len(r.lanes.usable(r.publishWindow())) == 0 {
		t.Fatal("the relay's own count already says its lanes are gone: the test proves nothing")
	}
	if n, err := r.step(ctx); err != nil || n != 0 {
		t.Fatalf("woken relay's step read %d rows (%v); want none of lanes it no longer holds", n, err)
	}
	if recs := consumeAll(t, broker, testTopic); len(recs) != 0 {
		t.Fatalf("the topic holds %d records, want none", len(recs))
	}
	// A lease about to lapse by the database's clock is not read either.
	if _, err := pool.Exec(ctx, `UPDATE outbox_relay_lanes SET lease_token = $1::uuid, lease_expires_at = now() + interval '1 second'`,
		r.lanes.tokens()[0]); err != nil {
		t.Fatal(err)
	}
	if rows, err := readPending(ctx, pool, r.lanes.tokens(), r.publishWindow(), 100, "{}"); err != nil || len(rows) != 0 {
		t.Fatalf("with a second of lease left the relay read %d rows (%v), want none", len(rows), err)
	}
}

// A relay that woke from a pause after its produce call succeeded marks nothing of lanes the
// database gave to another relay meanwhile: its rows stay pending for the lane's new holder,
// which sends them again in order, and the sleeper hears that they were lost.
func TestAWokenRelayMarksNothingOfLanesItLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, r, rows := holdingTen(t, "paused")
	takeEveryLane(t, pool)
	for i := range rows {
		rows[i].sent = true
	}
	_, lost, err := markSettled(ctx, pool, r.lanes.tokens(), rows, nil)
	if err != nil || !lost {
		t.Fatalf("mark after the takeover: lost %v (%v), want lost", lost, err)
	}
	var pending int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_pending`).Scan(&pending); err != nil || pending != 10 {
		t.Fatalf("%d rows still pending (%v), want all 10 left to the lanes' new holder", pending, err)
	}
	for _, row := range rows {
		if row.sent {
			t.Fatalf("row %d still counts as sent after its mark was refused", row.ID)
		}
	}
}

// A relay that woke from a pause to a failed produce call notes the failure only on rows still
// pending in lanes it holds: another relay took its lanes and published those rows meanwhile,
// and `outbox list` must not show them with the sleeper's error.
func TestAWokenRelaysFailureIsNotNotedOnRowsItLost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _, r, rows := holdingTen(t, "paused")
	takeEveryLane(t, pool)
	dequeue(t, pool, "id = "+fmt.Sprint(rows[0].ID)) // the other relay published the first row
	if _, _, err := markSettled(ctx, pool, r.lanes.tokens(), rows, errors.New("broker: request timed out")); err != nil {
		t.Fatal(err)
	}
	if n := countWhere(t, pool, "attempts > 0 OR last_error IS NOT NULL"); n != 0 {
		t.Fatalf("%d rows carry the woken relay's failure, want none", n)
	}
	// Its own lanes, still held: the failure is noted on every row it did not send.
	pool2, _, r2, rows2 := holdingTen(t, "holder")
	if _, _, err := markSettled(ctx, pool2, r2.lanes.tokens(), rows2, errors.New("broker: request timed out")); err != nil {
		t.Fatal(err)
	}
	if n := countWhere(t, pool2, "attempts = 1 AND last_error = 'broker: request timed out'"); n != 10 {
		t.Fatalf("%d rows carry the holder's failure, want 10", n)
	}
}

// No produce call starts once the relay's context has ended (SIGTERM, the end of the daemon's
// final flush): the stop is not drawn out by a call begun after it, and the rows stay pending.
func TestNoCallStartsAfterTheStop(t *testing.T) {
	t.Parallel()
	pool, broker, r, rows := holdingTen(t, "stopping")
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := r.publish(stopped, rows); err != nil {
		t.Fatal(err)
	}
	for _, row := range rows {
		if row.sent {
			t.Fatalf("row %d was sent after the stop", row.ID)
		}
	}
	if recs := consumeAll(t, broker, testTopic); len(recs) != 0 {
		t.Fatalf("the topic holds %d records, want none", len(recs))
	}
	if n := countWhere(t, pool, "state = 'pending'"); n != 10 {
		t.Fatalf("%d rows pending, want all 10", n)
	}
}

// takeEveryLane gives every lane to another relay, as one does once a sleeper's leases lapsed.
func takeEveryLane(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), `UPDATE outbox_relay_lanes SET owner = 'other', lease_token = gen_random_uuid(),
		lease_expires_at = now() + interval '1 minute', acquired_at = now()`); err != nil {
		t.Fatal(err)
	}
}
