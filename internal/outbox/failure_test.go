package outbox

import (
	"context"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

// Messages the broker refuses (one over the topic's max.message.bytes, one over the relay's
// own batch_bytes) are marked failed with the reason, and every other row, including later
// events of the same item, is published in order. `outbox retry` puts them back in line.
func TestRelayMarksRejectedMessagesFailed(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	const topic = "small-messages"
	if err := broker.CreateTopic(topic, 2, map[string]string{"max.message.bytes": "3000"}); err != nil {
		t.Fatal(err)
	}
	events := snapshotEvents(4, 6)
	events[9].ItemName = strings.Repeat("x", 5000)   // item-001, round 2: the broker refuses it
	events[14].ItemName = strings.Repeat("y", 20000) // item-002, round 3: over batch_bytes
	enqueue(t, pool, events)

	cfg := testConfig(broker.ListenAddrs(), "relay-a")
	cfg.Topic = topic
	cfg.BatchBytes = 10000
	r, sig := newTestRelay(t, pool, cfg)
	res, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if res.Failed != 2 || res.Published != int64(len(events)-2) {
		t.Fatalf("result %+v, want 2 failed and the rest published", res)
	}
	if len(sig.PublishError.C()) != 0 {
		t.Fatal("a rejected message must not count as a failed attempt to back off from")
	}
	rows := outboxRows(t, pool)
	for _, row := range rows {
		var want string
		switch row.ID {
		case rows[9].ID:
			want = "Message Size Too Large"
		case rows[14].ID:
			want = "larger than kafka.batch_bytes"
		default:
			if !row.Published {
				t.Fatalf("row %d not published", row.ID)
			}
			continue
		}
		if !row.Failed || row.Published || row.LastError == nil || !strings.Contains(*row.LastError, want) {
			t.Fatalf("row %d: failed=%v published=%v last_error=%v, want failed with %q", row.ID, row.Failed, row.Published, row.LastError, want)
		}
	}
	recs := consumeAll(t, broker, topic)
	if len(recs) != len(events)-2 {
		t.Fatalf("topic holds %d records, want %d", len(recs), len(events)-2)
	}
	checkDelivery(t, rows, recs)

	ctx := context.Background()
	failed, err := List(ctx, pool, ListOptions{FailedOnly: true})
	if err != nil || len(failed) != 2 || failed[0].ID != rows[9].ID || failed[0].FailedAt == nil || failed[0].LastError == nil {
		t.Fatalf("List failed: %+v %v", failed, err)
	}
	if n, err := RetryFailed(ctx, pool, []int64{rows[9].ID, rows[0].ID}); err != nil || n != 1 {
		t.Fatalf("RetryFailed: %d %v, want only the failed row reset", n, err)
	}
	b, err := ReadBacklog(ctx, pool, true)
	if err != nil || b.Pending != 1 || b.Failed != 1 || b.Published != int64(len(events)-2) || b.Oldest <= 0 {
		t.Fatalf("ReadBacklog: %+v %v", b, err)
	}
	if pending, err := List(ctx, pool, ListOptions{}); err != nil || len(pending) != 2 || pending[0].ID != rows[9].ID || pending[0].FailedAt != nil {
		t.Fatalf("List: %+v %v, want the retried row then the failed one", pending, err)
	}
	if n, err := RetryFailed(ctx, pool, nil); err != nil || n != 1 {
		t.Fatalf("RetryFailed(all): %d %v", n, err)
	}
	// Still too large: rejected again, still not blocking anything.
	if res, err := r.RunOnce(ctx); err != nil || res.Failed != 2 || res.Published != 0 {
		t.Fatalf("after retry: %+v %v", res, err)
	}
}

// Pruning deletes only published rows older than the retention, in small statements, oldest
// first: a statement that deletes fewer than its limit has found the last of them. It stops at
// the oldest pending row, so a backlog is never read to find published rows beyond it: one of
// those waits until the rows before it are published.
func TestPruneKeepsUnpublishedRows(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	enqueue(t, pool, snapshotEvents(10, 2)) // 20 rows: failed when id % 4 = 2, pending 15 and 19, the rest published
	// Ids follow creation: the first 12 are a month old, the rest a day.
	if _, err := pool.Exec(ctx, `
		UPDATE outbox SET created_at = now() - CASE WHEN id > 12 THEN interval '1 day' ELSE interval '30 days' END,
			failed_at = CASE WHEN id = ANY ($1::bigint[]) THEN now() - interval '9 days' END`, dequeue(t, pool, "id % 4 = 2")); err != nil {
		t.Fatal(err)
	}
	dequeue(t, pool, "id NOT IN (15, 19)")
	const old = "state = 'published' AND id <= 12" // 1, 3, 4, 5, 7, 8, 9, 11, 12
	if n, err := DeletePublished(ctx, pool, 7*24*time.Hour, 2); err != nil || n != 2 || countWhere(t, pool, old) != 9-2 {
		t.Fatalf("one prune statement of 2 rows: %d %v, %d old rows left", n, err, countWhere(t, pool, old))
	}
	n, err := DeletePublished(ctx, pool, 7*24*time.Hour, 10)
	if err != nil || n != 7 {
		t.Fatalf("DeletePublished: %d %v, want the 7 old ones of the 8 published below the pending 15", n, err)
	}
	if left := countWhere(t, pool, "true"); left != 11 || countWhere(t, pool, old) != 0 {
		t.Fatalf("%d rows left, want 11", left)
	}
	if n := countWhere(t, pool, "state = 'published'"); n != 4 {
		t.Fatalf("%d recently published rows left, want 4", n)
	}
	if b, err := ReadBacklog(ctx, pool, true); err != nil || b.Pending != 2 || b.Failed != 5 || b.Published != 4 {
		t.Fatalf("ReadBacklog after prune: %+v %v", b, err)
	}
	if b, err := ReadBacklog(ctx, pool, false); err != nil || b.Published != 0 || b.Pending != 2 || b.Oldest < 23*time.Hour {
		t.Fatalf("ReadBacklog without the published rows: %+v %v", b, err)
	}
	if n, err := DeletePublished(ctx, pool, 7*24*time.Hour, 2); err != nil || n != 0 {
		t.Fatalf("second DeletePublished: %d %v", n, err)
	}

	// A month-old published row above the pending 15 waits for it, then goes.
	if _, err := pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '30 days' WHERE id = 16`); err != nil {
		t.Fatal(err)
	}
	if n, err := DeletePublished(ctx, pool, 7*24*time.Hour, 10); err != nil || n != 0 {
		t.Fatalf("DeletePublished with 15 pending: %d %v, want 16 kept", n, err)
	}
	dequeue(t, pool, "id = 15")
	if n, err := DeletePublished(ctx, pool, 7*24*time.Hour, 10); err != nil || n != 1 || countWhere(t, pool, "id = 16") != 0 {
		t.Fatalf("DeletePublished once 15 is published: %d %v, want 16 deleted", n, err)
	}
}

// A pending entry whose outbox row was deleted by hand is never read by a relay: it must not
// hold pruning back for good nor hide the age of the events after it (the lag alert's
// figure), and the prune deletes it.
func TestPruneIgnoresAPendingEntryWithoutItsRow(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	enqueue(t, pool, snapshotEvents(5, 1))
	dequeue(t, pool, "id IN (2, 3, 4)")
	if _, err := pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '30 days'; DELETE FROM outbox WHERE id = 1`); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadBacklog(ctx, pool, false); err != nil || b.Oldest < 29*24*time.Hour {
		t.Fatalf("backlog behind an orphan entry: %+v %v, want the age of the pending row 5 (30 days)", b, err)
	}
	if n, err := DeletePublished(ctx, pool, 7*24*time.Hour, 10); err != nil || n != 3 {
		t.Fatalf("DeletePublished above an orphan pending entry: %d %v, want the 3 published rows", n, err)
	}
	rows, _ := pool.Query(ctx, `SELECT id FROM outbox_pending ORDER BY id`)
	entries, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || !slices.Equal(entries, []int64{5}) {
		t.Fatalf("pending entries after the prune: %v %v, want only 5's: the orphan deleted", entries, err)
	}
}

// A backlog with no relay (or Kafka down for a day) is not read by the pruner: it looks for
// published rows only below the oldest pending one, so its statement reads next to nothing
// however many events wait. Counted from the transaction's own table statistics.
func TestPruneDoesNotReadTheBacklog(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	enqueue(t, pool, snapshotEvents(100, 20))
	// Analyzed, as autovacuum keeps a table this size: the plan is the one a backlog gets.
	if _, err := pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '30 days'; ANALYZE outbox, outbox_pending`); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// The backend's counts not yet flushed include earlier transactions': the difference is
	// this statement's.
	fetched := func() int64 {
		var n int64
		if err := tx.QueryRow(ctx, `SELECT coalesce(seq_tup_read, 0) + coalesce(idx_tup_fetch, 0) FROM pg_stat_xact_user_tables
			WHERE relid = 'outbox'::regclass`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := fetched()
	if n, err := DeletePublished(ctx, tx, 7*24*time.Hour, 100); err != nil || n != 0 {
		t.Fatalf("DeletePublished over 2,000 pending rows: %d %v, want none deleted", n, err)
	}
	read := fetched() - before
	if read > 10 {
		t.Fatalf("the prune statement read %d outbox rows of a backlog of 2,000 pending ones, want next to none", read)
	}
}

// A missing topic is an error naming it, unless the relay may create it.
func TestRelayTopicMustExistOrBeCreated(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	enqueue(t, pool, snapshotEvents(3, 1))
	cfg := testConfig(broker.ListenAddrs(), "relay-a")
	cfg.Topic = "not-there"

	r, sig := newTestRelay(t, pool, cfg)
	_, err := r.RunOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "kafka topic not-there does not exist") || !strings.Contains(err.Error(), "kafka.create_topic") {
		t.Fatalf("err = %v, want one naming the topic and kafka.create_topic", err)
	}
	if len(sig.PublishError.C()) != 1 {
		t.Fatal("a missing topic is not worth retrying")
	}
	if err := r.Run(context.Background()); err == nil || !strings.Contains(err.Error(), "not-there") {
		t.Fatalf("Run: %v, want it to stop on the missing topic", err)
	}
	// Stopped for good: down, with the reason, also for `collector status`.
	if up, reason := r.Health(); up || !strings.Contains(reason, "not-there") {
		t.Fatalf("Health: up=%v %q, want down naming the topic", up, reason)
	}
	st, err := ReadRelayState(context.Background(), pool)
	if err != nil || len(st.Stops) != 1 || st.Stops[0].Owner != "relay-a" || !strings.Contains(st.Stops[0].Reason, "not-there") {
		t.Fatalf("relay state %+v %v, want relay-a's stop recorded", st, err)
	}

	cfg.CreateTopic, cfg.Partitions, cfg.ReplicationFactor = true, 3, 1
	r, _ = newTestRelay(t, pool, cfg)
	res, err := r.RunOnce(context.Background())
	if err != nil || res.Published != 3 {
		t.Fatalf("with create_topic: %+v %v", res, err)
	}
	if st, err := ReadRelayState(context.Background(), pool); err != nil || len(st.Stops) != 0 {
		t.Fatalf("relay state %+v %v: a working relay clears the stop notes", st, err)
	}
	if n := len(broker.PartitionInfos("not-there")); n != 3 {
		t.Fatalf("created topic has %d partitions, want 3", n)
	}
}

// --once against a broker that is down gives up after the configured attempts with an error
// naming the broker, and leaves every row pending.
func TestRunOnceFailsWhileBrokerDown(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	addr := broker.ListenAddrs()[0]
	r, sig := newTestRelay(t, pool, testConfig([]string{addr}, "relay-a"))
	if _, err := r.RunOnce(context.Background()); err != nil { // the topic is checked while it is up
		t.Fatal(err)
	}
	broker.Close()
	enqueue(t, pool, snapshotEvents(5, 2))

	_, err := r.RunOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "gave up after 3 attempts") || !strings.Contains(err.Error(), addr) {
		t.Fatalf("err = %v, want it to give up after 3 attempts naming the broker", err)
	}
	if n := len(sig.PublishError.C()); n != 3 {
		t.Fatalf("%d attempts reported, want 3", n)
	}
	if n := countWhere(t, pool, "state = 'pending' AND attempts = 3"); n != 10 {
		t.Fatalf("%d rows pending after 3 attempts, want 10", n)
	}
	if n := countWhere(t, pool, "true"); n != 10 {
		t.Fatal(n)
	}

	// Nothing listening at all: the topic check itself gives up the same way.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := ln.Addr().String()
	_ = ln.Close()
	r, _ = newTestRelay(t, pool, testConfig([]string{nobody}, "relay-b"))
	if _, err := r.RunOnce(context.Background()); err == nil || !strings.Contains(err.Error(), nobody) {
		t.Fatalf("err = %v, want the unreachable broker named", err)
	}
}

// --once leaves lanes another relay holds to it, and exits without error; it publishes the
// lanes it can take. ReadRelayState then says who holds the rest, with how much pending.
func TestRunOnceLeavesLanesHeldElsewhere(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	ctx := context.Background()
	enqueue(t, pool, snapshotEvents(40, 2))
	if _, err := pool.Exec(ctx, `
		UPDATE outbox_relay_lanes SET owner = 'daemon', lease_token = gen_random_uuid(),
		       lease_expires_at = now() + interval '1 hour', acquired_at = now()`); err != nil {
		t.Fatal(err)
	}
	r, _ := newTestRelay(t, pool, testConfig(broker.ListenAddrs(), "cron"))
	res, err := r.RunOnce(ctx)
	st, serr := ReadRelayState(ctx, pool)
	if err != nil || serr != nil || res.Published != 0 || st.LanesHeld != Lanes || st.Pending != 80 || !slices.Equal(st.Owners, []string{"daemon"}) {
		t.Fatalf("all lanes busy: %+v %v, state %+v %v", res, err, st, serr)
	}

	if _, err := pool.Exec(ctx, `UPDATE outbox_relay_lanes SET owner = NULL, lease_token = NULL, lease_expires_at = NULL WHERE lane < 8`); err != nil {
		t.Fatal(err)
	}
	inFree := countWhere(t, pool, "lane < 8")
	res, err = r.RunOnce(ctx)
	st, serr = ReadRelayState(ctx, pool)
	if err != nil || serr != nil || res.Published != int64(inFree) || st.LanesHeld != 8 || st.Pending != int64(80-inFree) {
		t.Fatalf("half the lanes free: %+v %v, state %+v %v (want %d published)", res, err, st, serr, inFree)
	}
	if n := countWhere(t, pool, "state = 'published' AND lane >= 8"); n != 0 {
		t.Fatalf("%d rows published from lanes held elsewhere", n)
	}
	if recs := consumeAll(t, broker, testTopic); len(recs) != inFree {
		t.Fatalf("topic holds %d records, want the %d of the free lanes", len(recs), inFree)
	}
	var held int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_relay_lanes WHERE owner = 'cron'`).Scan(&held); err != nil || held != 0 {
		t.Fatalf("%d lanes still held after RunOnce (%v)", held, err)
	}
	if n := countWhere(t, pool, "state = 'pending'"); n != 80-inFree {
		t.Fatalf("%d rows pending, want the %d rows of the busy lanes", n, 80-inFree)
	}

	if _, err := pool.Exec(ctx, `UPDATE outbox_relay_lanes SET owner = NULL, lease_token = NULL, lease_expires_at = NULL`); err != nil {
		t.Fatal(err)
	}
	res, err = r.RunOnce(ctx)
	if err != nil || res.Published != int64(80-inFree) {
		t.Fatalf("all lanes free: %+v %v (want %d published)", res, err, 80-inFree)
	}
	if n := countWhere(t, pool, "state <> 'published'"); n != 0 {
		t.Fatalf("%d rows left unpublished", n)
	}
	checkDelivery(t, outboxRows(t, pool), consumeAll(t, broker, testTopic))
}

// Follow mode publishes rows as they commit, and leaves old published rows to the one pruner
// (internal/retention).
func TestRunFollowsAndLeavesPruning(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	enqueue(t, pool, snapshotEvents(2, 1))
	if _, err := pool.Exec(ctx, `UPDATE outbox SET created_at = now() - interval '9 days'`); err != nil {
		t.Fatal(err)
	}
	dequeue(t, pool, "true")
	cfg := testConfig(broker.ListenAddrs(), "daemon")
	cfg.PollInterval = time.Hour // only the notification can wake it
	r, sig := newTestRelay(t, pool, cfg)
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	sig.Idle.Wait(t)
	if n := countWhere(t, pool, "true"); n != 2 {
		t.Fatalf("%d old published rows left, want the 2: the relay does not prune", n)
	}
	enqueue(t, pool, snapshotEvents(3, 2))
	got := 0
	for got < 6 {
		got += len(sig.Published.Wait(t))
	}
	cancel()
	if err := testkit.Recv(t, done, testkit.Timeout, "the relay to return"); err != nil {
		t.Fatal(err)
	}
	if got += publishedSince(sig); got != 6 {
		t.Fatalf("%d rows published, want 6", got)
	}
	var held int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox_relay_lanes WHERE lease_token IS NOT NULL`).Scan(&held); err != nil || held != 0 {
		t.Fatalf("%d lanes still leased after Run returned (%v)", held, err)
	}
}

// The relay takes the kafka.* keys as loaded; what config or the connection settings reject,
// NewRelay rejects too, naming the key.
func TestRelayConfigFromKafkaKeys(t *testing.T) {
	pool := newDB(t)
	good := config.Default().Kafka
	good.Brokers = []string{"k1:9092"}
	r, err := NewRelay(pool, RelayConfig{KafkaConfig: good}, nil)
	if err != nil {
		t.Fatalf("defaults must be valid: %v", err)
	}
	_ = r.Close()
	k := good
	k.TLS.Enabled, k.TLS.CAFile = true, "/nonexistent/ca.pem"
	if _, err := NewRelay(pool, RelayConfig{KafkaConfig: k}, nil); err == nil || !strings.Contains(err.Error(), "kafka.tls.ca_file") {
		t.Fatalf("err = %v, want kafka.tls.ca_file named", err)
	}

	bad := config.Default()
	bad.Kafka.Brokers = []string{"k1:9092"}
	bad.Kafka.Lease, bad.Kafka.WriteTimeout = 10*time.Second, 5*time.Second
	bad.Kafka.Compression = "brotli"
	bad.Kafka.Retry.BackoffMax = time.Millisecond
	verr := bad.Validate()
	_, rerr := NewRelay(pool, RelayConfig{KafkaConfig: bad.Kafka}, nil)
	for _, key := range []string{"kafka.lease", "kafka.compression", "kafka.retry.backoff_max"} {
		if verr == nil || !strings.Contains(verr.Error(), key) || rerr == nil || !strings.Contains(rerr.Error(), key) {
			t.Fatalf("Validate: %v, NewRelay: %v, want %s named by both", verr, rerr, key)
		}
	}
	if _, err := NewRelay(pool, RelayConfig{KafkaConfig: config.Default().Kafka}, nil); err == nil || !strings.Contains(err.Error(), "kafka.brokers") {
		t.Fatalf("err = %v, want kafka.brokers named", err)
	}
}

// The lane column, the lanes table and the Lanes constant agree.
func TestLanesMatchSchema(t *testing.T) {
	pool := newDB(t)
	enqueue(t, pool, snapshotEvents(200, 1))
	var lanes, minLane, maxLane, distinct int
	if err := pool.QueryRow(context.Background(), `
		SELECT (SELECT count(*) FROM outbox_relay_lanes), min(lane), max(lane), count(DISTINCT lane) FROM outbox`).
		Scan(&lanes, &minLane, &maxLane, &distinct); err != nil {
		t.Fatal(err)
	}
	if lanes != Lanes || minLane != 0 || maxLane != Lanes-1 || distinct != Lanes {
		t.Fatalf("lanes table %d, rows in lanes %d..%d (%d distinct), want 0..%d", lanes, minLane, maxLane, distinct, Lanes-1)
	}
}

// A broker that refuses the relay's authorization stops it for good, as a missing topic
// does: retrying cannot fix it, so it must show as down instead of backing off for ever.
func TestRefusedAuthorizationStopsTheRelay(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	enqueue(t, pool, snapshotEvents(3, 1))
	broker.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: testTopic, Err: kerr.TopicAuthorizationFailed})
	cfg := testConfig(broker.ListenAddrs(), "relay-a")
	var reasons []string
	cfg.OnError = func(reason string) { reasons = append(reasons, reason) }
	r, _ := newTestRelay(t, pool, cfg)
	err := r.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "Topic Authorization Failed") {
		t.Fatalf("Run: %v, want it to stop on the refused authorization", err)
	}
	if up, reason := r.Health(); up || !strings.Contains(reason, "Authorization") {
		t.Fatalf("Health: up=%v %q", up, reason)
	}
	if len(reasons) != 1 || reasons[0] != "authorization" {
		t.Fatalf("error reasons %v, want one authorization", reasons)
	}
	// kafka-go sends a request per partition: the refused one's rows stay pending, not failed.
	if n := countWhere(t, pool, "state = 'pending'"); n == 0 || countWhere(t, pool, "state = 'failed'") != 0 {
		t.Fatalf("%d rows pending, %d failed; want the refused ones pending", n, countWhere(t, pool, "state = 'failed'"))
	}
}

// The relay's refused database writes reach the daemon's write health; a broker that is down
// does not, being no state of the database.
func TestRelayReportsTheDatabasesRefusalsOnly(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	ctx := context.Background()
	enqueue(t, pool, snapshotEvents(5, 1))
	cfg := testConfig(broker.ListenAddrs(), "relay-a")
	cfg.WriteHealth = store.NewWriteHealth()
	r, _ := newTestRelay(t, pool, cfg)
	free := storetest.FillDisk(t, pool, "outbox_relay_lanes")
	if _, err := r.RunOnce(ctx); err == nil {
		t.Fatal("a pass whose lane leases the database refused succeeded")
	}
	if s := cfg.WriteHealth.State(); s.Cause != store.CauseDiskFull {
		t.Fatalf("write state after the relay's refused lease: %+v, want disk_full", s)
	}
	free()
	cfg.WriteHealth.ObserveSpace(nil)

	broker.Close()
	if _, err := r.RunOnce(ctx); err == nil {
		t.Fatal("a pass with the broker down succeeded")
	}
	if s := cfg.WriteHealth.State(); !s.Writable {
		t.Fatalf("write state after the broker went down: %+v, want writable", s)
	}
}

// Lanes given back after a failed send stay free for no one until it can no longer land; the
// relay state counts them apart, not as held (their owner is gone), and still reads.
func TestRelayStateCountsLanesGivenBackAfterAFailedSend(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	ctx := context.Background()
	r, _ := newTestRelay(t, pool, testConfig(broker.ListenAddrs(), "relay-a"))
	if _, _, err := r.lanes.renew(ctx, true); err != nil {
		t.Fatal(err)
	}
	if err := r.lanes.release(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	st, err := ReadRelayState(ctx, pool)
	if err != nil || st.LanesHeld != 0 || len(st.Owners) != 0 || st.Cooling != Lanes {
		t.Fatalf("relay state %+v %v, want no lane held and all %d cooling", st, err, Lanes)
	}
}

// What a broker error means for the event and the relay: only what the event is makes it fail
// for good; a timestamp is the relay host's own clock (kafka-go stamps it at send), so it is
// retried; SASL refusals of any kind stop the relay as an authorization problem.
func TestBrokerErrorsAreJudgedByWhoseFaultTheyAre(t *testing.T) {
	for _, c := range []struct {
		err       kafka.Error
		rejected  bool
		reason    string
		permanent bool
	}{
		{kafka.MessageSizeTooLarge, true, "broker", false},
		{kafka.InvalidRecord, true, "broker", false},
		{kafka.InvalidTimestamp, false, "broker", false},
		{kafka.NotLeaderForPartition, false, "broker", false},
		{kafka.TopicAuthorizationFailed, false, "authorization", true},
		{kafka.UnsupportedSASLMechanism, false, "authorization", true},
		{kafka.IllegalSASLState, false, "authorization", true},
	} {
		reason, permanent := classify(brokerError(c.err))
		if rejected(c.err) != c.rejected || reason != c.reason || permanent != c.permanent {
			t.Errorf("%s: rejected %v, %s, permanent %v; want %v, %s, %v", c.err.Title(), rejected(c.err), reason, permanent,
				c.rejected, c.reason, c.permanent)
		}
	}
}
