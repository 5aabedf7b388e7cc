package outbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/duecollector/duecollector/internal/testkit"
)

var ceTimeForm = regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$`)

// N snapshots become N messages, keyed by item, with the CloudEvents headers and the JSON
// value docs/events.md describes, and the rows are marked published.
func TestRelayPublishesSnapshotsAsDocumented(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	events := snapshotEvents(5, 8)
	enqueue(t, pool, events[:15])
	enqueue(t, pool, events[15:])

	// A backlog: the events were created a week ago and are published now.
	if _, err := pool.Exec(context.Background(), `UPDATE outbox SET created_at = created_at - interval '7 days'`); err != nil {
		t.Fatal(err)
	}

	// Batches of 2 rows: many reads, produce calls and marks.
	cfg := testConfig(broker.ListenAddrs(), "relay-a")
	cfg.BatchSize = 2
	r, _ := newTestRelay(t, pool, cfg)
	// Every produce request asks for the acknowledgement of every in-sync replica (acks=all):
	// a row is marked published only once no broker failure can lose it.
	var acksMu sync.Mutex
	var acks []int16
	broker.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		acksMu.Lock()
		defer acksMu.Unlock()
		acks = append(acks, req.(*kmsg.ProduceRequest).Acks)
		return nil, nil, false // the broker answers as usual
	})
	sentFrom := time.Now().Truncate(time.Millisecond)
	res, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	acksMu.Lock()
	if len(acks) == 0 || slices.ContainsFunc(acks, func(a int16) bool { return a != -1 }) {
		t.Errorf("produce requests asked for acks %v, want -1 (all) in each", acks)
	}
	acksMu.Unlock()
	sentTo := time.Now()
	if res.Published != int64(len(events)) || res.Failed != 0 {
		t.Fatalf("result %+v, want %d published", res, len(events))
	}

	rows := outboxRows(t, pool)
	recs := consumeAll(t, broker, testTopic)
	if len(recs) != len(events) {
		t.Fatalf("topic holds %d records, want %d", len(recs), len(events))
	}
	byEventID := map[string]outboxRow{}
	for _, row := range rows {
		if !row.Published || row.Attempts != 0 {
			t.Fatalf("row %d: published=%v failed attempts=%d, want published at the first attempt", row.ID, row.Published, row.Attempts)
		}
		byEventID[row.EventID] = row
	}
	bySnapshot := map[int64]SnapshotEvent{}
	for _, ev := range events {
		ev.SchemaVersion = SchemaVersion
		bySnapshot[ev.SnapshotID] = ev
	}
	for _, rec := range recs {
		ceID, _ := header(rec, "ce_id")
		row, ok := byEventID[ceID]
		if !ok {
			t.Fatalf("record has ce_id %q, which is no outbox event", ceID)
		}
		want := map[string]string{
			"ce_specversion": "1.0",
			"ce_id":          row.EventID,
			"ce_type":        EventTypeSnapshot,
			"ce_source":      "duecollector/neople",
			"ce_time":        row.CreatedAt.UTC().Format(ceTimeLayout),
			"ce_subject":     row.ItemID,
			"content-type":   "application/json",
		}
		if len(rec.Headers) != len(want) {
			t.Fatalf("record has %d headers, want %d: %v", len(rec.Headers), len(want), rec.Headers)
		}
		for k, v := range want {
			if got, _ := header(rec, k); got != v {
				t.Fatalf("header %s = %q, want %q", k, got, v)
			}
		}
		if ts, err := time.Parse(time.RFC3339, want["ce_time"]); err != nil || !ts.Equal(row.CreatedAt) || !ceTimeForm.MatchString(want["ce_time"]) {
			t.Fatalf("ce_time %q is not RFC 3339 in UTC with six fraction digits for %s: %v", want["ce_time"], row.CreatedAt, err)
		}
		// The send time, not the creation: the topic's retention counts from it.
		if string(rec.Key) != row.ItemID || rec.Timestamp.Before(sentFrom) || rec.Timestamp.After(sentTo) {
			t.Fatalf("key %q timestamp %s, want %q and the send time (%s to %s; created %s)", rec.Key, rec.Timestamp, row.ItemID, sentFrom, sentTo, row.CreatedAt)
		}
		var got SnapshotEvent
		dec := json.NewDecoder(bytes.NewReader(rec.Value))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			t.Fatalf("value %s: %v", rec.Value, err)
		}
		if want := bySnapshot[got.SnapshotID]; !reflect.DeepEqual(got, want) {
			t.Fatalf("value decodes to %+v, want %+v", got, want)
		}
		var fields map[string]any
		if err := json.Unmarshal(rec.Value, &fields); err != nil || len(fields) != reflect.TypeFor[SnapshotEvent]().NumField() {
			t.Fatalf("value %s: every field must be present, nulls included (%v)", rec.Value, err)
		}
	}
	checkDelivery(t, rows, recs)

	// Nothing is sent twice: a second pass finds nothing to do.
	res, err = r.RunOnce(context.Background())
	if err != nil || res.Published != 0 || topicSize(broker, testTopic) != int64(len(events)) {
		t.Fatalf("second pass: %+v %v, topic holds %d", res, err, topicSize(broker, testTopic))
	}
}

// Three relays following the outbox at once, with rows arriving while they run, a relay
// stopping midway and a fourth, dead one whose lanes nobody touches until its lease expires:
// every row arrives, each item's events in order, and any duplicate is the same event.
func TestRelaysAtOnceKeepPerItemOrder(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	const items, rounds = 50, 100 // 5,000 rows
	all := snapshotEvents(items, rounds)
	enqueue(t, pool, all[:1000])

	// A relay that died holding lanes 0-3: nobody may publish them until its lease expires.
	if _, err := pool.Exec(context.Background(), `
		UPDATE outbox_relay_lanes SET owner = 'dead-relay', lease_token = gen_random_uuid(),
		       lease_expires_at = now() + interval '1 hour', acquired_at = now()
		WHERE lane < 4`); err != nil {
		t.Fatal(err)
	}
	if countWhere(t, pool, "lane < 4") == 0 {
		t.Fatal("no rows in the dead relay's lanes; the test proves less than it says")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type running struct {
		sig    *TestSignals
		cancel context.CancelFunc
		done   chan error
	}
	var relays []running
	for i := range 3 {
		cfg := testConfig(broker.ListenAddrs(), "relay-"+string(rune('a'+i)))
		cfg.BatchSize = 50
		r, sig := newTestRelay(t, pool, cfg)
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		relays = append(relays, running{sig, rcancel, done})
	}

	// The rest arrives in many small transactions while the relays run.
	var writers sync.WaitGroup
	writers.Go(func() {
		for i := 1000; i < len(all); i += 100 {
			enqueue(t, pool, all[i:i+100])
		}
	})

	// Stop whichever relay holds lanes once a good part is out; the others take its lanes.
	sigs := []*TestSignals{relays[0].sig, relays[1].sig, relays[2].sig}
	each := waitPublished(t, 2000, sigs...)
	published := each[0] + each[1] + each[2]
	var owner string
	if err := pool.QueryRow(ctx, `SELECT owner FROM outbox_relay_lanes WHERE owner LIKE 'relay-%' GROUP BY owner ORDER BY count(*) DESC LIMIT 1`).Scan(&owner); err != nil {
		t.Fatal(err)
	}
	stopped := &relays[owner[len(owner)-1]-'a']
	stopped.cancel()
	if err := testkit.Recv(t, stopped.done, testkit.Timeout, "the stopped relay to return"); err != nil {
		t.Fatalf("stopped relay: %v", err)
	}
	stopped.done = nil
	if n := countWhere(t, pool, "lane < 4 AND state = 'published'"); n != 0 {
		t.Fatalf("%d rows published from lanes leased by another relay", n)
	}
	// The dead relay's lease runs out: its lanes go to the relays still running.
	if _, err := pool.Exec(ctx, `UPDATE outbox_relay_lanes SET lease_expires_at = now() WHERE owner = 'dead-relay'`); err != nil {
		t.Fatal(err)
	}

	writers.Wait()
	for i, n := range waitPublished(t, len(all)-published, sigs...) {
		each[i] += n
	}
	if n := countWhere(t, pool, "state = 'published'"); n != len(all) {
		t.Fatalf("%d rows published, want all %d", n, len(all))
	}
	cancel()
	for _, r := range relays {
		if r.done == nil {
			continue
		}
		if err := testkit.Recv(t, r.done, testkit.Timeout, "the relay to return"); err != nil {
			t.Fatalf("relay: %v", err)
		}
	}

	active := 0
	for i, r := range relays {
		if each[i]+publishedSince(r.sig) > 0 {
			active++
		}
	}
	if active < 2 {
		t.Fatalf("only %d relay published anything; lanes never changed hands", active)
	}

	rows := outboxRows(t, pool)
	recs := consumeAll(t, broker, testTopic)
	dups := checkDelivery(t, rows, recs)
	t.Logf("%d rows, %d records, %d relays published", len(rows), len(recs), active)
	if dups != 0 {
		// Allowed by at-least-once, but a clean stop marks what it delivered and releases its
		// lanes, and no lease ran out here: nothing should have been sent twice.
		t.Fatalf("%d duplicates after a clean hand-over", dups)
	}
	if countWhere(t, pool, "failed_at IS NOT NULL") != 0 {
		t.Fatal("rows marked failed")
	}
}

// A row whose transaction commits after rows with higher ids were published is still
// published: the relay has no "last published id" cursor.
func TestRelayPublishesRowsCommittedLate(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	ctx := context.Background()
	r, _ := newTestRelay(t, pool, testConfig(broker.ListenAddrs(), "relay-a"))

	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx) //nolint:errcheck
	evs := snapshotEvents(2, 1)
	if err := EnqueueSnapshots(ctx, late, evs[:1]); err != nil {
		t.Fatal(err)
	}
	enqueue(t, pool, evs[1:])
	if res, err := r.RunOnce(ctx); err != nil || res.Published != 1 {
		t.Fatalf("first pass: %+v %v, want the committed row published", res, err)
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if res, err := r.RunOnce(ctx); err != nil || res.Published != 1 {
		t.Fatalf("second pass: %+v %v, want the late row published", res, err)
	}
	rows := outboxRows(t, pool)
	if rows[0].ID > rows[1].ID || !rows[0].Published {
		t.Fatalf("late row %+v", rows[0])
	}
	checkDelivery(t, rows, consumeAll(t, broker, testTopic))
}

// The broker appends a batch but answers with an error (REQUEST_TIMED_OUT): the relay must
// not mark those rows, and sends them again with the same ce_id.
func TestRelayResendsWhatWasNotAcknowledged(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	enqueue(t, pool, snapshotEvents(10, 3))
	fault := broker.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: testTopic, Err: kerr.RequestTimedOut})

	r, sig := newTestRelay(t, pool, testConfig(broker.ListenAddrs(), "relay-a"))
	res, err := r.RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if fault.Hits() != 1 {
		t.Fatalf("fault hit %d times", fault.Hits())
	}
	select {
	case err := <-sig.PublishError.C():
		if !errors.Is(err, kerr.RequestTimedOut) && !strings.Contains(err.Error(), "Timed Out") {
			t.Fatalf("publish error %v", err)
		}
	default:
		t.Fatal("no failed attempt reported")
	}
	rows := outboxRows(t, pool)
	resent := 0
	for _, row := range rows {
		if row.Attempts == 1 { // one failed attempt, then published
			resent++
			if row.LastError == nil || !strings.Contains(*row.LastError, "Timed Out") {
				t.Fatalf("row %d: last_error %v", row.ID, row.LastError)
			}
		}
	}
	recs := consumeAll(t, broker, testTopic)
	dups := checkDelivery(t, rows, recs)
	if res.Published != int64(len(rows)) || resent == 0 || dups != resent {
		t.Fatalf("published %d of %d, %d rows re-sent, %d duplicates in the topic", res.Published, len(rows), resent, dups)
	}
}

// The broker goes away mid-run and comes back on the same address with its data: the
// following relay backs off, marks nothing while the broker is down, and then delivers
// everything in order.
func TestRelaySurvivesBrokerRestart(t *testing.T) {
	pool := newDB(t)
	dir := t.TempDir()
	broker := newBroker(t, kfake.DataDir(dir))
	addrs := broker.ListenAddrs()
	_, port, _ := net.SplitHostPort(addrs[0])
	enqueue(t, pool, snapshotEvents(30, 50))

	cfg := testConfig(addrs, "relay-a")
	cfg.BatchSize = 20
	r, sig := newTestRelay(t, pool, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	before := 0
	for range 3 {
		before += len(sig.Published.Wait(t))
	}
	broker.Close()
	sig.PublishError.Wait(t)
	marked := countWhere(t, pool, "state = 'published'")
	for range 3 {
		sig.PublishError.Wait(t)
	}
	if now := countWhere(t, pool, "state = 'published'"); now != marked {
		t.Fatalf("rows marked published while the broker was down: %d, then %d", marked, now)
	}
	if marked == 1500 {
		t.Fatal("everything was published before the broker stopped; the test proves nothing")
	}

	p, _ := strconv.Atoi(port)
	restarted, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.Ports(p), kfake.DataDir(dir))
	if err != nil {
		t.Fatalf("restart kfake on port %d: %v", p, err)
	}
	defer restarted.Close()

	waitPublished(t, 1500-before, sig)
	if n := countWhere(t, pool, "state = 'published'"); n != 1500 {
		t.Fatalf("%d rows published after the restart, want all 1500", n)
	}
	cancel()
	if err := testkit.Recv(t, done, testkit.Timeout, "the relay to return"); err != nil {
		t.Fatal(err)
	}
	checkDelivery(t, outboxRows(t, pool), consumeAll(t, restarted, testTopic))
}

// A batch is several produce calls when its events exceed kafka.batch_bytes. The lanes' lease
// is checked before each of them, the first too (the read before it may have been slow): when
// it runs short, the rest of the batch is not sent (it stays pending, with no error) rather
// than published under a lease another relay may take over.
func TestPublishStopsWhenTheLeaseRunsShort(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	enqueue(t, pool, snapshotEvents(1, 4))
	cfg := testConfig(broker.ListenAddrs(), "relay-a")
	r, rows, largest := leasedRows(t, pool, cfg, 4)
	ctx := context.Background()
	r.cfg.BatchBytes = largest * 5 / 2 // two events per produce call
	// Just under the window: no call goes.
	r.lanes.validUntil = time.Now().Add(r.publishWindow() - time.Second)
	if _, err := r.publish(ctx, rows); err != nil {
		t.Fatal(err)
	}
	for i, row := range rows {
		if row.sent || row.reason != "" {
			t.Fatalf("row %d: sent=%v %q with the lease under the window, want it pending", i, row.sent, row.reason)
		}
	}
	// Enough for one call: the first goes, the second must not.
	r.lanes.validUntil = time.Now().Add(r.publishWindow() + time.Second)
	r.afterCall = func() { r.lanes.validUntil = time.Now().Add(r.publishWindow() - time.Second) }
	if _, err := r.publish(ctx, rows); err != nil {
		t.Fatal(err)
	}
	for i, row := range rows {
		if row.sent != (i < 2) || row.reason != "" {
			t.Fatalf("row %d: sent=%v %q, want the first 2 rows published and the last 2 pending", i, row.sent, row.reason)
		}
	}
	if recs := consumeAll(t, broker, testTopic); len(recs) != 2 {
		t.Fatalf("topic holds %d records, want 2", len(recs))
	}
}

// RelayConfig.Dial opens every broker connection the relay makes (a proxy, or the benchmarks'
// simulated network distance).
func TestRelayDialsThroughConfiguredDial(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	enqueue(t, pool, snapshotEvents(2, 2))
	cfg := testConfig(broker.ListenAddrs(), "relay-dial")
	var dials atomic.Int64
	cfg.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		dials.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, address)
	}
	r, _ := newTestRelay(t, pool, cfg)
	res, err := r.RunOnce(context.Background())
	if err != nil || res.Published != 4 {
		t.Fatalf("result %+v, %v; want 4 published", res, err)
	}
	if dials.Load() == 0 {
		t.Fatal("the relay reached the broker without calling RelayConfig.Dial")
	}
}

// Two relays, one handing its lanes to the other, with a transaction that commits late in
// between: its rows have lower ids than rows already published, and they are still delivered,
// each item's events in order.
func TestTwoRelaysDeliverLateCommitsInOrder(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	ctx := context.Background()
	round0, round1 := snapshotEvents(20, 2)[:20], snapshotEvents(20, 2)[20:]
	for i := range round1 {
		round1[i].SnapshotID = snapshotSeq.Add(1)
	}

	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx)                                         //nolint:errcheck
	if err := EnqueueSnapshots(ctx, late, round0[:10]); err != nil { // items 0-9, not yet committed
		t.Fatal(err)
	}
	enqueue(t, pool, round0[10:]) // items 10-19, higher ids, committed

	run := func(owner string) (*TestSignals, context.CancelFunc, chan error) {
		r, sig := newTestRelay(t, pool, testConfig(broker.ListenAddrs(), owner))
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- r.Run(rctx) }()
		return sig, cancel, done
	}
	sigA, stopA, doneA := run("relay-a")
	gotA := 0
	for gotA < 10 {
		gotA += len(sigA.Published.Wait(t))
	}
	sigB, stopB, doneB := run("relay-b")
	defer stopB()
	stopA()
	if err := testkit.Recv(t, doneA, testkit.Timeout, "relay A to return"); err != nil {
		t.Fatal(err)
	}

	for more := true; more; { // what A published after the ten, until it stopped
		select {
		case ids := <-sigA.Published.C():
			gotA += len(ids)
		default:
			more = false
		}
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	enqueue(t, pool, round1) // every item's next event, after the late ones committed
	gotB := waitPublished(t, 40-gotA, sigB)[0]
	if n := countWhere(t, pool, "state = 'published'"); n != 40 {
		t.Fatalf("%d rows published, want all 40", n)
	}
	stopB()
	if err := testkit.Recv(t, doneB, testkit.Timeout, "relay B to return"); err != nil {
		t.Fatal(err)
	}
	if gotB += publishedSince(sigB); gotA != 10 || gotB != 30 {
		t.Fatalf("relay a published %d, relay b %d; want 10 and 30", gotA, gotB)
	}
	rows := outboxRows(t, pool)
	if dups := checkDelivery(t, rows, consumeAll(t, broker, testTopic)); dups != 0 {
		t.Fatalf("%d duplicates after a clean hand-over", dups)
	}
}

// A partition's batch the broker refuses whole (one message over the topic's limit refuses
// them all) is sent again message by message, each a call that starts only while the lease
// leaves room for it: the rest stays pending, not failed, for whoever holds the lanes next,
// and nothing is sent past the lease.
func TestResendingARefusedBatchStopsAtTheLease(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	enqueue(t, pool, snapshotEvents(1, 6)) // one item: one partition, one batch
	cfg := testConfig(broker.ListenAddrs(), "relay-a")
	cfg.Topic = "small-batches"
	r, rows, largest := leasedRows(t, pool, cfg, 6)
	ctx := context.Background()
	// Room for one event, not for the batch of six.
	limit := strconv.FormatInt(largest*3/2, 10)
	if err := broker.CreateTopic(cfg.Topic, 1, map[string]string{"max.message.bytes": limit}); err != nil {
		t.Fatal(err)
	}
	calls := 0
	r.afterCall = func() { // the batch, then the first event alone; then the lease runs short
		if calls++; calls == 2 {
			r.lanes.validUntil = time.Now().Add(r.publishWindow() - time.Second)
		}
	}
	// Room for both calls however long a loaded machine takes to reach them (the topic, the
	// first dial): only the lease the hook shortens is to stop the third.
	r.lanes.validUntil = time.Now().Add(r.publishWindow() + time.Minute)
	if _, err := r.publish(ctx, rows); err != nil {
		t.Fatal(err)
	}
	if calls != 2 {
		t.Fatalf("%d produce calls, want the refused batch and one event alone", calls)
	}
	for i, row := range rows {
		if row.sent != (i == 0) || row.reason != "" {
			t.Fatalf("row %d: sent=%v %q, want the first published and the rest pending", i, row.sent, row.reason)
		}
	}
	if recs := consumeAll(t, broker, cfg.Topic); len(recs) != 1 {
		t.Fatalf("topic holds %d records, want 1", len(recs))
	}
}
