package outbox

import (
	"context"
	"os"
	"runtime"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/duecollector/duecollector/internal/kafkaconn"
)

// The benchmarks share one broker, so the relay and the raw writer it is compared with talk
// to the same broker in the same run:
//
//	go test -run '^$' -bench 'Relay$|RawKafkaGoWriter|RelayLatency' -benchtime 20000x ./internal/outbox/
//	go test -run '^$' -bench RelayVsRaw -benchtime 10x ./internal/outbox/
var bench struct {
	once   sync.Once
	broker *kfake.Cluster
	err    error
}

func TestMain(m *testing.M) {
	runVictimIfAsked()
	code := m.Run()
	if bench.broker != nil {
		bench.broker.Close()
	}
	os.Exit(code)
}

func benchBroker(b *testing.B) *kfake.Cluster {
	bench.once.Do(func() {
		// kfake keeps each partition's active segment in one in-memory buffer that doubles as
		// it grows: with the default 100 MiB segments, a doubling copies tens of MiB and
		// stalls whoever is producing at that moment for a few hundred milliseconds. Small
		// segments, trimmed by retention between timed runs (trimBroker), give every run the
		// same broker state, like a real broker appending to files.
		bench.broker, bench.err = kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(12, testTopic),
			kfake.BrokerConfigs(map[string]string{"log.segment.bytes": "1048576", "log.retention.bytes": "1048576"}))
	})
	if bench.err != nil {
		b.Fatal(bench.err)
	}
	return bench.broker
}

// trimBroker drops what earlier runs left in the broker (retention) and collects garbage, so
// that a timed run does not pay for the one before it.
func trimBroker(b *testing.B) {
	benchBroker(b).ApplyRetention()
	runtime.GC()
}

func benchConfig(b *testing.B) RelayConfig {
	cfg := testConfig(benchBroker(b).ListenAddrs(), "bench")
	cfg.BatchSize = 500 // the default
	return cfg
}

// benchRows enqueues n snapshot events (50 items), benchTxRows per transaction, and returns
// the pool.
func benchRows(b *testing.B, n int) *pgxpool.Pool {
	b.Helper()
	pool := newDB(b)
	evs := snapshotEvents(50, (n+49)/50)[:n]
	for chunk := range slices.Chunk(evs, benchTxRows()) {
		enqueue(b, pool, chunk)
	}
	analyze(b, pool)
	return pool
}

// analyze gives a fresh benchmark database the statistics autovacuum keeps in production.
func analyze(b *testing.B, pool *pgxpool.Pool) {
	b.Helper()
	if _, err := pool.Exec(context.Background(), "ANALYZE outbox, outbox_pending"); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkRelay: one RunOnce draining b.N pending rows (read, publish with acks=all, mark).
func BenchmarkRelay(b *testing.B) {
	pool := benchRows(b, b.N)
	r, _ := newTestRelay(b, pool, benchConfig(b))
	if err := r.checkTopic(context.Background()); err != nil {
		b.Fatal(err)
	}
	trimBroker(b)
	cpu := startCPU()
	b.ResetTimer()
	res, err := r.RunOnce(context.Background())
	b.StopTimer()
	cpu.report(b)
	if err != nil || res.Published != int64(b.N) {
		b.Fatalf("%+v %v", res, err)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkRawKafkaGoWriter: the same messages, the same writer settings and batch size,
// written straight from memory: the ceiling the relay is measured against.
func BenchmarkRawKafkaGoWriter(b *testing.B) {
	cfg := benchConfig(b)
	msgs := pendingMessages(b, benchRows(b, b.N), cfg)
	w := rawWriter(b, cfg)
	// One message first, so that connecting and reading metadata stay out of the timing.
	if err := w.WriteMessages(context.Background(), msgs[0]); err != nil {
		b.Fatal(err)
	}
	trimBroker(b)
	cpu := startCPU()
	b.ResetTimer()
	writeAll(b, w, msgs, cfg.BatchSize)
	b.StopTimer()
	cpu.report(b)
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
}

// rawWriter is a writer with the relay's settings, for writing messages straight from memory.
func rawWriter(b *testing.B, cfg RelayConfig) *kafka.Writer {
	t, err := kafkaconn.Transport(cfg.KafkaConfig, cfg.Dial)
	if err != nil {
		b.Fatal(err)
	}
	w := newWriter(cfg, t)
	b.Cleanup(func() { _ = w.Close() })
	return w
}

// cpuTimes reads the machine's busy and total CPU time from /proc/stat (Linux), so that the
// benchmarks can say how much of the machine they used: the broker, the relay and PostgreSQL
// share the same cores here.
type cpuTimes struct{ busy, total int64 }

func readCPU() (cpuTimes, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return cpuTimes{}, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	var t cpuTimes
	for i, f := range strings.Fields(line)[1:] {
		v, _ := strconv.ParseInt(f, 10, 64)
		t.total += v
		if i != 3 && i != 4 { // idle, iowait
			t.busy += v
		}
	}
	return t, true
}

type cpuMeter struct {
	start    cpuTimes
	ok       bool
	self, pg int64
	wall     time.Time
}

func startCPU() cpuMeter {
	t, ok := readCPU()
	self, pg := procTicks()
	return cpuMeter{t, ok, self, pg, time.Now()}
}

// procTicks sums the CPU time (utime+stime, in clock ticks) of this process and of every
// process named postgres.
func procTicks() (self, pg int64) {
	ticks := func(path string) (string, int64) {
		b, err := os.ReadFile(path)
		if err != nil {
			return "", 0
		}
		s := string(b)
		open, close := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || close < 0 {
			return "", 0
		}
		f := strings.Fields(s[close+2:])
		u, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		return s[open+1 : close], u + st
	}
	_, self = ticks("/proc/self/stat")
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		if name, t := ticks("/proc/" + d.Name() + "/stat"); name == "postgres" {
			pg += t
		}
	}
	return self, pg
}

// report adds "cores-busy": how many of the machine's cores were busy on average, counting
// every process (the database server too), and of those "go-cores" for this process (the
// relay or writer, and the in-process broker) and "pg-cores" for PostgreSQL's processes.
func (m cpuMeter) report(b *testing.B) {
	end, ok := readCPU()
	if !m.ok || !ok || end.total == m.start.total {
		return
	}
	b.ReportMetric(float64(end.busy-m.start.busy)/float64(end.total-m.start.total)*float64(runtime.NumCPU()), "cores-busy")
	self, pg := procTicks()
	secs := time.Since(m.wall).Seconds() * 100 // USER_HZ
	b.ReportMetric(float64(self-m.self)/secs, "go-cores")
	b.ReportMetric(float64(pg-m.pg)/secs, "pg-cores")
}

// BenchmarkRelayVsRaw alternates rounds of the two above (20,000 messages each, one database
// and one relay throughout) so that both see the same machine load, and reports their rates
// and the relay's share of the raw rate. BENCH_BROKER_RTT (a duration, default 0) puts the
// broker at that network distance from both.
func BenchmarkRelayVsRaw(b *testing.B) {
	const perRound = 20000
	cfg := benchConfig(b)
	if rtt := benchRTT(b); rtt > 0 {
		cfg.Dial = delayedDial(rtt)
	}
	pool := newDB(b)
	r, _ := newTestRelay(b, pool, cfg)
	if err := r.checkTopic(context.Background()); err != nil {
		b.Fatal(err)
	}
	w := rawWriter(b, cfg)
	var relayTime, rawTime time.Duration
	var relayGo, relayPG, rawGo int64 // CPU clock ticks
	var relayGC, rawGC float64
	var ratios []float64 // per round: the machine's load drifts, a round's two halves see the same
	for range b.N {
		if _, err := pool.Exec(context.Background(), "TRUNCATE outbox, outbox_pending"); err != nil {
			b.Fatal(err)
		}
		for chunk := range slices.Chunk(snapshotEvents(50, perRound/50), benchTxRows()) {
			enqueue(b, pool, chunk)
		}
		analyze(b, pool)
		trimBroker(b)
		// Reading /proc takes a millisecond or two: before the clock starts, after it stops.
		goTicks, pgTicks := procTicks()
		g0 := gcCPU()
		start := time.Now()
		if res, err := r.RunOnce(context.Background()); err != nil || res.Published != perRound {
			b.Fatalf("%+v %v", res, err)
		}
		relayRound := time.Since(start)
		relayTime += relayRound
		relayGC += gcCPU() - g0
		goEnd, pgEnd := procTicks()
		relayGo, relayPG = relayGo+goEnd-goTicks, relayPG+pgEnd-pgTicks
		// The raw writer's messages exist only for its own round: built before the relay's,
		// 20,000 messages and their headers were memory the collector had to scan while the
		// relay ran.
		msgs := pendingMessages(b, pool, cfg)
		trimBroker(b)
		goTicks, _ = procTicks()
		g0 = gcCPU()
		start = time.Now()
		writeAll(b, w, msgs, cfg.BatchSize)
		rawRound := time.Since(start)
		rawTime += rawRound
		ratios = append(ratios, 100*rawRound.Seconds()/relayRound.Seconds())
		rawGC += gcCPU() - g0
		goEnd, _ = procTicks()
		rawGo += goEnd - goTicks
	}
	n := float64(b.N * perRound)
	b.ReportMetric(n/relayTime.Seconds(), "relay-msgs/s")
	b.ReportMetric(n/rawTime.Seconds(), "raw-msgs/s")
	b.ReportMetric(100*rawTime.Seconds()/relayTime.Seconds(), "relay-%-of-raw")
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "median-round-%")
	// CPU time per message: this process (relay or writer, and the in-process broker) and
	// PostgreSQL, in microseconds (clock ticks are 10 ms).
	perMsg := func(ticks int64) float64 { return float64(ticks) * 1e4 / n }
	b.ReportMetric(perMsg(relayGo), "relay-go-µs/msg")
	b.ReportMetric(perMsg(relayPG), "relay-pg-µs/msg")
	b.ReportMetric(perMsg(rawGo), "raw-go-µs/msg")
	// Of which the garbage collector (the relay's part includes the broker's and the writer's).
	b.ReportMetric(relayGC*1e6/n, "relay-gc-µs/msg")
	b.ReportMetric(rawGC*1e6/n, "raw-gc-µs/msg")
	b.ReportMetric(0, "ns/op")
}

// gcCPU is the CPU time the Go runtime estimates it spent collecting garbage so far, in
// seconds (brought up to date at the end of each collection).
func gcCPU() float64 {
	s := []metrics.Sample{{Name: "/cpu/classes/gc/total:cpu-seconds"}}
	metrics.Read(s)
	return s[0].Value.Float64()
}

func benchRTT(b *testing.B) time.Duration {
	v := os.Getenv("BENCH_BROKER_RTT")
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		b.Fatalf("BENCH_BROKER_RTT=%q: %v", v, err)
	}
	return d
}

// pendingMessages builds, from the outbox rows, the exact messages the relay sends.
func pendingMessages(b *testing.B, pool *pgxpool.Pool, cfg RelayConfig) []kafka.Message {
	b.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT id, event_id, event_type, item_id, payload::text, created_at FROM outbox ORDER BY id`)
	if err != nil {
		b.Fatal(err)
	}
	msgs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (kafka.Message, error) {
		var row pendingRow
		err := r.Scan(&row.ID, &row.EventID, &row.EventType, &row.ItemID, &row.Payload, &row.CreatedAt)
		return message(row, cfg.Source), err
	})
	if err != nil {
		b.Fatal(err)
	}
	return msgs
}

func writeAll(b *testing.B, w *kafka.Writer, msgs []kafka.Message, batch int) {
	for chunk := range slices.Chunk(msgs, batch) {
		if err := w.WriteMessages(context.Background(), chunk...); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRelayLatency: a following relay while snapshots commit one per transaction at a
// steady 500/s; reports commit→published (acknowledged and marked) latency percentiles.
func BenchmarkRelayLatency(b *testing.B) {
	pool := newDB(b)
	r, sig := newTestRelay(b, pool, benchConfig(b))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()
	sig.Idle.Wait(b)

	var mu sync.Mutex
	committed := make(map[int64]time.Time, b.N)
	latencies := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	// The producer has its own context and is waited for before the relay is cancelled: the
	// relay may publish a row before its Commit returns.
	produced := make(chan struct{})
	go func() {
		defer close(produced)
		ctx := context.Background()
		tick := time.NewTicker(2 * time.Millisecond)
		defer tick.Stop()
		for i := 0; i < b.N; i++ {
			<-tick.C
			var id int64
			tx, err := pool.Begin(ctx)
			if err == nil {
				err = EnqueueSnapshots(ctx, tx, snapshotEvents(1+i%26, 1)[i%26:])
			}
			if err == nil {
				err = tx.QueryRow(ctx, `SELECT max(id) FROM outbox`).Scan(&id)
			}
			// Stamped as COMMIT is sent: the relay may publish the row before Commit returns.
			mu.Lock()
			committed[id] = time.Now()
			mu.Unlock()
			if err == nil {
				err = tx.Commit(ctx)
			}
			if err != nil {
				b.Error(err)
				return
			}
		}
	}()
	timeout := time.After(time.Minute + time.Duration(b.N)*10*time.Millisecond)
	for len(latencies) < b.N {
		select {
		case <-sig.Idle.C(): // drained, so that a long run does not fill the signal's buffer
		case ids := <-sig.Published.C():
			now := time.Now()
			mu.Lock()
			for _, id := range ids {
				latencies = append(latencies, now.Sub(committed[id]))
			}
			mu.Unlock()
		case <-timeout:
			b.Fatalf("only %d of %d events published", len(latencies), b.N)
		}
	}
	b.StopTimer()
	<-produced
	cancel()
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	slices.Sort(latencies)
	pct := func(p float64) float64 {
		return float64(latencies[int(p*float64(len(latencies)-1))]) / float64(time.Millisecond)
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(0, "ns/op")
}

// benchTxRows is how many events one transaction enqueues in the benchmarks: a write-back of
// the collector's dispatcher.FlushSizeDefault.
// BENCH_OUTBOX_TX overrides it.
func benchTxRows() int {
	if v, _ := strconv.Atoi(os.Getenv("BENCH_OUTBOX_TX")); v > 0 {
		return v
	}
	return 50
}
