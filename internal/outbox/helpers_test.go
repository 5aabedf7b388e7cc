package outbox

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

const testTopic = "test.auction-snapshots.v1"

// newBroker starts an in-process Kafka-protocol broker on loopback with the test topic.
func newBroker(tb testing.TB, opts ...kfake.Opt) *kfake.Cluster {
	tb.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1), kfake.SeedTopics(4, testTopic)}, opts...)...)
	if err != nil {
		tb.Fatalf("start kfake: %v", err)
	}
	tb.Cleanup(c.Close)
	return c
}

// testConfig is a relay configuration sized for tests: small batches, fast retries, and a
// lease that leaves room for a slow, loaded machine.
func testConfig(brokers []string, owner string) RelayConfig {
	k := config.Default().Kafka
	k.Brokers, k.Topic, k.BatchSize = brokers, testTopic, 100
	k.WriteTimeout, k.Lease, k.PollInterval = 3*time.Second, 9*time.Second, 100*time.Millisecond
	k.Retry.BackoffMax = 200 * time.Millisecond
	return RelayConfig{KafkaConfig: k, Owner: owner, RetryAttempts: 3, RetryBackoffMin: 10 * time.Millisecond}
}

// waitPublished takes the relays' Published signals, in whatever order they come, until they
// add up to n ids (each row is marked published once), and returns what each relay's added up
// to.
func waitPublished(t *testing.T, n int, sigs ...*TestSignals) []int {
	t.Helper()
	cases := make([]reflect.SelectCase, 0, len(sigs)+1)
	for _, s := range sigs {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(s.Published.C())})
	}
	timeout := time.NewTimer(testkit.Timeout)
	defer timeout.Stop()
	cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(timeout.C)})
	each := make([]int, len(sigs))
	for got := 0; got < n; {
		i, v, _ := reflect.Select(cases)
		if i == len(sigs) {
			t.Fatalf("timed out after %s: %d of %d ids published", testkit.Timeout, got, n)
		}
		each[i] += v.Len()
		got += v.Len()
	}
	return each
}

func newTestRelay(tb testing.TB, pool *pgxpool.Pool, cfg RelayConfig) (*Relay, *TestSignals) {
	tb.Helper()
	var log *zap.Logger
	if t, ok := tb.(*testing.T); ok && testing.Verbose() {
		log = zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel))
	}
	return newLoggedRelay(tb, pool, cfg, log)
}

// newLoggedRelay is newTestRelay logging to log.
func newLoggedRelay(tb testing.TB, pool *pgxpool.Pool, cfg RelayConfig, log *zap.Logger) (*Relay, *TestSignals) {
	tb.Helper()
	sig := &TestSignals{}
	sig.Init(tb)
	cfg.Test = sig
	r, err := NewRelay(pool, cfg, log)
	if err != nil {
		tb.Fatalf("NewRelay: %v", err)
	}
	tb.Cleanup(func() { _ = r.Close() })
	return r, sig
}

// publishedSince counts the rows sig reported published that the test has not taken yet.
func publishedSince(sig *TestSignals) int {
	for n := 0; ; {
		select {
		case ids := <-sig.Published.C():
			n += len(ids)
		default:
			return n
		}
	}
}

var snapshotSeq atomic.Int64

// snapshotEvents makes perItem events for each of items, interleaved round by round the way
// collection produces them.
func snapshotEvents(items, perItem int) []SnapshotEvent {
	base := time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)
	var out []SnapshotEvent
	for round := 0; round < perItem; round++ {
		for i := 0; i < items; i++ {
			low, med := int64(1000+round), int64(1100+round)
			w := 1050.5 + float64(round)
			ev := SnapshotEvent{
				SnapshotID:        snapshotSeq.Add(1),
				ItemID:            fmt.Sprintf("item-%03d", i),
				ItemName:          fmt.Sprintf("Item %d", i),
				Tier:              "HOT_1M",
				CollectedAt:       base.Add(time.Duration(round) * time.Minute),
				ListingCount:      round % 7,
				ListingQuantity:   int64(round * 3),
				LowestUnitPrice:   &low,
				MedianUnitPrice:   &med,
				WeightedUnitPrice: &w,
				SalesCount:        round % 3,
				SalesQuantity:     int64(round % 5),
			}
			if round%2 == 1 {
				ev.LowestUnitPrice, ev.MedianUnitPrice, ev.WeightedUnitPrice = nil, nil, nil
				avg, vwap := int64(990), 991.25
				ev.APIAveragePrice, ev.SalesVWAP = &avg, &vwap
			}
			out = append(out, ev)
		}
	}
	return out
}

// enqueue writes events the way collect-due does: in a transaction, through EnqueueSnapshots.
func enqueue(tb testing.TB, pool *pgxpool.Pool, events []SnapshotEvent) {
	tb.Helper()
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	if err := EnqueueSnapshots(ctx, tx, events); err != nil {
		tb.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		tb.Fatal(err)
	}
}

// outboxRow is what the tests compare Kafka records against.
type outboxRow struct {
	ID        int64
	EventID   string
	ItemID    string
	Payload   string
	CreatedAt time.Time
	Published bool
	Failed    bool
	Attempts  int
	LastError *string
}

func outboxRows(tb testing.TB, pool *pgxpool.Pool) []outboxRow {
	tb.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT id, event_id::text, item_id, payload::text, created_at, state = 'published', state = 'failed', attempts, last_error
		FROM outbox_events ORDER BY id`)
	if err != nil {
		tb.Fatal(err)
	}
	defer rows.Close()
	var out []outboxRow
	for rows.Next() {
		var r outboxRow
		if err := rows.Scan(&r.ID, &r.EventID, &r.ItemID, &r.Payload, &r.CreatedAt, &r.Published, &r.Failed, &r.Attempts, &r.LastError); err != nil {
			tb.Fatal(err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		tb.Fatal(err)
	}
	return out
}

// countWhere counts outbox rows through the outbox_events view, so cond may use state.
func countWhere(tb testing.TB, pool *pgxpool.Pool, cond string) int {
	tb.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), "SELECT count(*) FROM outbox_events WHERE "+cond).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}

// topicSize is how many records the broker holds for the topic.
func topicSize(c *kfake.Cluster, topic string) int64 {
	var n int64
	for _, p := range c.PartitionInfos(topic) {
		n += p.HighWatermark - p.LogStartOffset
	}
	return n
}

// consumeAll reads every record of the topic with a real consumer, in offset order within
// each partition.
func consumeAll(tb testing.TB, c *kfake.Cluster, topic string) []*kgo.Record {
	tb.Helper()
	want := topicSize(c, topic)
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(c.ListenAddrs()...),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxWait(200*time.Millisecond),
	)
	if err != nil {
		tb.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var recs []*kgo.Record
	for int64(len(recs)) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			tb.Fatalf("consumed %d of %d records before the deadline", len(recs), want)
		}
		fs.EachError(func(topic string, p int32, err error) {
			tb.Logf("fetch %s/%d: %v", topic, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) { recs = append(recs, r) })
	}
	return recs
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// checkDelivery asserts that every row in rows was delivered, that each item's events arrive
// in outbox id order once duplicates are dropped, and that a duplicate is always the same
// event (same ce_id, same key and value). It returns the number of duplicates.
func checkDelivery(tb testing.TB, rows []outboxRow, recs []*kgo.Record) int {
	tb.Helper()
	byEvent := map[string]outboxRow{}
	for _, r := range rows {
		byEvent[r.EventID] = r
	}
	seen := map[string]*kgo.Record{}
	lastID := map[string]int64{}
	dups := 0
	for _, rec := range recs {
		ceID, _ := header(rec, "ce_id")
		row, ok := byEvent[ceID]
		if !ok {
			tb.Fatalf("record with unknown ce_id %q", ceID)
		}
		if first, ok := seen[ceID]; ok {
			dups++
			if string(first.Key) != string(rec.Key) || string(first.Value) != string(rec.Value) {
				tb.Fatalf("duplicate ce_id %s carries a different message", ceID)
			}
			continue
		}
		seen[ceID] = rec
		if string(rec.Key) != row.ItemID {
			tb.Fatalf("ce_id %s: key %q, want item %q", ceID, rec.Key, row.ItemID)
		}
		if prev := lastID[row.ItemID]; row.ID < prev {
			tb.Fatalf("item %s: outbox row %d arrived after row %d", row.ItemID, row.ID, prev)
		}
		lastID[row.ItemID] = row.ID
	}
	var missing []int64
	for _, r := range rows {
		if _, ok := seen[r.EventID]; !ok && !r.Failed {
			missing = append(missing, r.ID)
		}
	}
	if len(missing) > 0 {
		sort.Slice(missing, func(i, j int) bool { return missing[i] < missing[j] })
		tb.Fatalf("%d rows never delivered, first ids %v", len(missing), missing[:min(10, len(missing))])
	}
	return dups
}

func newDB(tb testing.TB) *pgxpool.Pool {
	tb.Helper()
	pool, _ := storetest.NewPool(tb)
	return pool
}

// dequeue takes the rows matching cond off the pending list, as if a relay had published
// them, and returns their ids.
func dequeue(tb testing.TB, pool *pgxpool.Pool, cond string) []int64 {
	tb.Helper()
	rows, _ := pool.Query(context.Background(), `
		DELETE FROM outbox_pending WHERE id IN (SELECT id FROM outbox WHERE `+cond+`) RETURNING id`)
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		tb.Fatal(err)
	}
	return out
}

// A stop note of an owner that has not noted it again for an hour is of a process gone since
// (every start has a new name): the next stop noted drops it, so collector status does not
// list a line per restart for good.
func TestStopNotesOfGoneRelaysAreDropped(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `INSERT INTO outbox_relay_stops (owner, reason, stopped_at) VALUES
		('host:1-gone', 'topic missing', now() - interval '2 hours'), ('host:2-recent', 'topic missing', now() - interval '5 minutes')`); err != nil {
		t.Fatal(err)
	}
	if err := recordStop(ctx, pool, "host:3-me", "topic missing"); err != nil {
		t.Fatal(err)
	}
	rows, err := pool.Query(ctx, `SELECT owner FROM outbox_relay_stops ORDER BY owner`)
	if err != nil {
		t.Fatal(err)
	}
	owners, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !slices.Equal(owners, []string{"host:2-recent", "host:3-me"}) {
		t.Fatalf("stop notes %v (%v), want the recent one and this relay's", owners, err)
	}
}

// leasedRows is a relay holding every lane, the n pending rows it reads, and the size of the
// largest of their messages: one publish step, taken apart. The lanes go back when the test ends.
func leasedRows(t *testing.T, pool *pgxpool.Pool, cfg RelayConfig, n int) (*Relay, []pendingRow, int64) {
	t.Helper()
	r, _ := newTestRelay(t, pool, cfg)
	ctx := context.Background()
	if _, _, err := r.lanes.renew(ctx, true); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.releaseLanes(ctx, 0) })
	rows, err := readPending(ctx, pool, r.lanes.tokens(), 0, cfg.BatchSize, "{}")
	if err != nil || len(rows) != n {
		t.Fatalf("read %d rows: %v", len(rows), err)
	}
	var largest int64
	for _, row := range rows {
		largest = max(largest, messageSize(message(row, r.cfg.Source)))
	}
	return r, rows, largest
}
