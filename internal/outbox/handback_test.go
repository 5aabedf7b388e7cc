package outbox

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/kafkaconn"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

// cutProxy passes TCP connections through to a broker until cut: then it closes every one and
// each new one at once, as a partition or a broken DNS or TLS setup does from the relay's side,
// until restored. It keeps its port, so a relay dials the same address throughout.
type cutProxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup
	mu     sync.Mutex
	down   bool
	conns  map[net.Conn]bool
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.pipe(c) })
		}
	})
	t.Cleanup(func() { _ = ln.Close(); p.cut(); p.wg.Wait() })
	return p
}

// dial is a RelayConfig.Dial that reaches every broker through the proxy.
func (p *cutProxy) dial(ctx context.Context, network, _ string) (net.Conn, error) {
	return (&net.Dialer{}).DialContext(ctx, network, p.ln.Addr().String())
}

func (p *cutProxy) pipe(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	if !p.track(true, c, s) {
		return
	}
	defer p.track(false, c, s)
	var copies sync.WaitGroup
	for _, dir := range [][2]net.Conn{{s, c}, {c, s}} {
		copies.Go(func() { _, _ = io.Copy(dir[0], dir[1]); _ = c.Close(); _ = s.Close() })
	}
	copies.Wait()
}

// track adds (or removes) conns, unless the proxy is cut.
func (p *cutProxy) track(add bool, conns ...net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if add && p.down {
		return false
	}
	for _, c := range conns {
		if add {
			p.conns[c] = true
		} else {
			delete(p.conns, c)
		}
	}
	return true
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		_ = c.Close()
	}
}

func (p *cutProxy) restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = false
}

// handBackLease is the test relays' kafka.lease: a relay cut off from Kafka hands its lanes
// back after about that long, and takes lanes again a lease later. A short write timeout keeps
// the lanes usable between renewals (publishWindow) on a loaded machine: a turn that finds no
// usable lane is idle, and starts the count of failures again.
const (
	handBackLease        = 3 * time.Second
	handBackWriteTimeout = 500 * time.Millisecond
)

// followRelay runs a following relay until the returned cancel; dial nil dials the broker.
func followRelay(t *testing.T, pool *pgxpool.Pool, brokers []string, owner string, dial kafkaconn.Dial, log ...*zap.Logger) (*TestSignals, context.CancelFunc, chan error) {
	t.Helper()
	cfg := testConfig(brokers, owner)
	cfg.Lease, cfg.WriteTimeout, cfg.Dial = handBackLease, handBackWriteTimeout, dial
	var r *Relay
	var sig *TestSignals
	if len(log) > 0 {
		r, sig = newLoggedRelay(t, pool, cfg, log[0])
	} else {
		r, sig = newTestRelay(t, pool, cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	return sig, cancel, done
}

// pendingIDs lists the pending rows' ids in order.
func pendingIDs(t *testing.T, pool *pgxpool.Pool) []int64 {
	t.Helper()
	rows, _ := pool.Query(context.Background(), `SELECT id FROM outbox_pending ORDER BY id`)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// A following relay cut off from Kafka while the database answers (DNS, TLS, a partition on
// its host alone) hands its lanes back after about a lease of failures, and a relay that can
// publish takes them while the first still runs, and publishes their rows from the oldest
// unpublished one, each item in order. The first takes lanes again, once Kafka is back within
// its reach, when the other stops.
func TestRelayCutOffFromKafkaHandsItsLanesBack(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	proxy := startCutProxy(t, broker.ListenAddrs()[0])
	ctx := context.Background()

	sigA, stopA, doneA := followRelay(t, pool, broker.ListenAddrs(), "relay-a", proxy.dial)
	defer stopA()
	sigA.Idle.Wait(t) // its first look took every lane, nobody else being there
	if st, err := ReadRelayState(ctx, pool); err != nil || st.LanesHeld != Lanes || !slices.Equal(st.Owners, []string{"relay-a"}) {
		t.Fatalf("relay state %+v %v, want every lane held by relay-a", st, err)
	}
	sigB, stopB, doneB := followRelay(t, pool, broker.ListenAddrs(), "relay-b", nil)
	defer stopB()
	sigB.Idle.Wait(t) // running, with no lane of its own
	enqueue(t, pool, snapshotEvents(20, 1))
	waitPublished(t, 20, sigA) // through the proxy

	proxy.cut()
	enqueue(t, pool, snapshotEvents(20, 2))
	pending := pendingIDs(t, pool)
	var byB []int64
	timeout := time.NewTimer(testkit.Timeout)
	defer timeout.Stop()
	for len(byB) < len(pending) {
		select {
		case ids := <-sigB.Published.C():
			byB = append(byB, ids...)
		case ids := <-sigA.Published.C():
			t.Fatalf("relay A published %v with its path to Kafka cut", ids)
		case err := <-doneA:
			t.Fatalf("relay A returned: %v; it must keep running", err)
		case <-timeout.C:
			t.Fatalf("relay B published %d of %d rows within %s: relay A kept its lanes", len(byB), len(pending), testkit.Timeout)
		}
	}
	if handed := sigA.HandedBack.Wait(t); len(handed) != Lanes {
		t.Fatalf("relay A handed back lanes %v, want all %d", handed, Lanes)
	}
	if len(pending) != 40 || byB[0] != pending[0] || !slices.Equal(slices.Sorted(slices.Values(byB)), pending) {
		t.Fatalf("relay B published %v, want the pending rows %v from the oldest", byB, pending)
	}
	if n := countWhere(t, pool, "attempts > 0"); n == 0 {
		t.Fatal("relay A never tried the rows; the test proves nothing")
	}
	select {
	case err := <-doneA:
		t.Fatalf("relay A returned: %v; it must keep running", err)
	default:
	}
	if st, err := ReadRelayState(ctx, pool); err != nil || st.LanesHeld != Lanes || !slices.Equal(st.Owners, []string{"relay-b"}) {
		t.Fatalf("relay state %+v %v, want every lane with relay-b", st, err)
	}

	// Kafka within A's reach again, B gone: A takes the lanes back and publishes.
	proxy.restore()
	stopB()
	if err := testkit.Recv(t, doneB, testkit.Timeout, "relay B to return"); err != nil {
		t.Fatal(err)
	}
	enqueue(t, pool, snapshotEvents(20, 1))
	waitPublished(t, 20, sigA)
	stopA()
	if err := testkit.Recv(t, doneA, testkit.Timeout, "relay A to return"); err != nil {
		t.Fatal(err)
	}
	if n := countWhere(t, pool, "state <> 'published'"); n != 0 {
		t.Fatalf("%d rows left unpublished", n)
	}
	checkDelivery(t, outboxRows(t, pool), consumeAll(t, broker, testTopic))
}

// A relay that reaches the database, and so renews its lanes, but cannot read its rows (here its
// sessions find a broken outbox_pending first on their search_path, as a role without rights or
// a statement failing on the rows would) hands its lanes back after a lease of failures, as one
// cut off from Kafka does, for a relay that can publish them.
func TestRelayThatCannotReadItsRowsHandsItsLanesBack(t *testing.T) {
	pool, url := storetest.NewPool(t)
	broker := newBroker(t)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `CREATE SCHEMA broken;
		CREATE VIEW broken.outbox_pending AS SELECT id, lane FROM public.outbox_pending WHERE 1 / (id - id) = 1`); err != nil {
		t.Fatal(err)
	}
	brokenPool, err := pgxpool.New(ctx, url+"&options=-c%20search_path%3Dbroken,public")
	if err != nil {
		t.Fatal(err)
	}
	defer brokenPool.Close()
	enqueue(t, pool, snapshotEvents(20, 1))
	core, logs := observer.New(zapcore.InfoLevel)
	sigA, stopA, doneA := followRelay(t, brokenPool, broker.ListenAddrs(), "relay-a", nil, zap.New(core))
	defer stopA()
	sigA.PublishError.Wait(t) // it holds every lane, nobody else being there, and fails on them
	sigB, stopB, doneB := followRelay(t, pool, broker.ListenAddrs(), "relay-b", nil)
	defer stopB()
	if handed := sigA.HandedBack.Wait(t); len(handed) != Lanes {
		t.Fatalf("relay A handed back lanes %v, want all %d", handed, Lanes)
	}
	// The attempts of a lease (a dozen at the test's back-off) are one line, not one each.
	if n, attempts := logs.FilterMessage("relay attempt failed, backing off").Len(), len(sigA.PublishError.C()); n != 1 {
		t.Fatalf("%d 'relay attempt failed' lines for %d more failed attempts within a minute, want 1", n, attempts)
	}
	waitPublished(t, 20, sigB)
	stopA()
	stopB()
	for _, done := range []chan error{doneA, doneB} {
		if err := testkit.Recv(t, done, testkit.Timeout, "the relays to return"); err != nil {
			t.Fatal(err)
		}
	}
	checkDelivery(t, outboxRows(t, pool), consumeAll(t, broker, testTopic))
}

// Alone and cut off from Kafka, a relay hands its lanes back and takes them again a lease later,
// round after round, so that no lane stays with it for good; once Kafka is within reach again
// it publishes every row, from the oldest unpublished one.
func TestRelayAloneTakesItsLanesBackWhenKafkaReturns(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	proxy := startCutProxy(t, broker.ListenAddrs()[0])
	core, logs := observer.New(zapcore.InfoLevel)
	sig, stop, done := followRelay(t, pool, broker.ListenAddrs(), "relay-a", proxy.dial, zap.New(core))
	defer stop()
	sig.Idle.Wait(t)

	proxy.cut()
	enqueue(t, pool, snapshotEvents(20, 2))
	pending := pendingIDs(t, pool)
	for round := range 2 {
		if handed := sig.HandedBack.Wait(t); len(handed) != Lanes {
			t.Fatalf("round %d: handed back lanes %v, want all %d", round, handed, Lanes)
		}
	}
	if n := len(sig.Published.C()); n != 0 {
		t.Fatalf("%d batches published with the path to Kafka cut", n)
	}
	// Each hand-back tells how long publishing has failed, over the rounds: not a first minute
	// again after each.
	handed := logs.FilterMessageSnippet("handing its lanes back").All()
	if len(handed) < 2 {
		t.Fatalf("%d hand-backs logged, want 2", len(handed))
	}
	first, second := handed[0].ContextMap()["failing_seconds"].(time.Duration), handed[1].ContextMap()["failing_seconds"].(time.Duration)
	if second < first+handBackLease {
		t.Fatalf("the second hand-back says failing for %v, the first %v; want a lease more at least", second, first)
	}
	proxy.restore()
	var published []int64
	for len(published) < len(pending) {
		published = append(published, sig.Published.Wait(t)...)
	}

	if len(pending) != 40 || published[0] != pending[0] || !slices.Equal(slices.Sorted(slices.Values(published)), pending) {
		t.Fatalf("published %v, want the pending rows %v from the oldest", published, pending)
	}
	stop()
	if err := testkit.Recv(t, done, testkit.Timeout, "the relay to return"); err != nil {
		t.Fatal(err)
	}
	// Logged once the publishing turn returned, after its rows were signalled: read on return.
	if again := logs.FilterMessage("outbox relay publishing again").All(); len(again) != 1 ||
		again[0].ContextMap()["failed_for_seconds"].(time.Duration) < second {
		t.Fatalf("recovery logged %v; want one line with the outage's length", again)
	}
	checkDelivery(t, outboxRows(t, pool), consumeAll(t, broker, testTopic))
}

// A relay that gives up (a pass out of attempts, a stop, an exit) right after a produce call
// failed does not free its lanes at once: the call may still land until publishWindow, and a
// relay taking the lanes meanwhile would publish their later events before it.
func TestLanesGivenUpAfterAFailedCallAreFreeOnlyOnceItCannotLand(t *testing.T) {
	pool := newDB(t)
	broker := newBroker(t)
	proxy := startCutProxy(t, broker.ListenAddrs()[0])
	ctx := context.Background()
	cfg := testConfig(broker.ListenAddrs(), "relay-a")
	cfg.Dial = proxy.dial
	r, _ := newTestRelay(t, pool, cfg)
	enqueue(t, pool, snapshotEvents(5, 1))
	if res, err := r.RunOnce(ctx); err != nil || res.Published != 5 {
		t.Fatalf("first pass: %+v %v", res, err)
	}
	var free int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_relay_lanes WHERE owner IS NULL AND lease_expires_at IS NULL`).Scan(&free); err != nil || free != Lanes {
		t.Fatalf("after a clean pass %d lanes are free at once (%v), want all %d", free, err, Lanes)
	}

	proxy.cut()
	enqueue(t, pool, snapshotEvents(5, 2))
	if _, err := r.RunOnce(ctx); err == nil {
		t.Fatal("a pass cut off from Kafka succeeded")
	}
	if n := countWhere(t, pool, "attempts > 0"); n == 0 {
		t.Fatal("no produce call was made; the test proves nothing")
	}
	var held, later int
	if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE owner IS NOT NULL),
		count(*) FILTER (WHERE owner IS NULL AND lease_expires_at > now()) FROM outbox_relay_lanes`).Scan(&held, &later); err != nil {
		t.Fatal(err)
	}
	if held != 0 || later != Lanes {
		t.Fatalf("after giving up: %d lanes still owned, %d free only later; want 0 and all %d", held, later, Lanes)
	}
}

// A following relay whose pool runs in the simple protocol (behind a transaction-pooling
// PgBouncer) and has no database.direct_url says once that it polls, and takes no pool
// connection for LISTEN: through the pooler that connection heard nothing, for good.
func TestRelayWithoutASessionPollsInsteadOfListening(t *testing.T) {
	_, url := storetest.NewPool(t)
	ctx := context.Background()
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	broker := newBroker(t)
	core, logs := observer.New(zapcore.InfoLevel)
	sig, stop, done := followRelay(t, pool, broker.ListenAddrs(), "relay-a", nil, zap.New(core))
	sig.Idle.Wait(t)
	enqueue(t, pool, snapshotEvents(1, 1))
	sig.Published.Wait(t)
	var listening int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND query ILIKE 'LISTEN%'`).Scan(&listening); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := testkit.Recv(t, done, testkit.Timeout, "the relay to stop"); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessageSnippet("no session for LISTEN").Len(); n != 1 || listening != 0 {
		t.Fatalf("%d LISTEN sessions, the fallback logged %d times: want none, and once", listening, n)
	}
}
