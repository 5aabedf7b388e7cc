package daemon

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// With kafka.brokers set the daemon relays the outbox in follow mode, and on shutdown it
// publishes what the last write-backs (calls finishing in the grace period) produced.
func TestRelayFollowsAndFlushesOnShutdown(t *testing.T) {
	const n = 24
	broker := snapshotsBroker(t)
	e := newEnv(t, n, neoplesim.Options{Latency: 200 * time.Millisecond})
	e.track(t, 0, n, tiers.Cold, -time.Second)
	cfg := testConfig()
	cfg.Dispatch.Concurrency = 4
	cfg.Dispatch.BatchSize = n
	cfg.Daemon.ShutdownGrace = 10 * time.Second
	cfg.Relay = relayConfig(broker.ListenAddrs(), "test.snapshots")
	r := e.start(t, cfg, nil)
	testkit.Eventually(t, 20*time.Second, "the first events published", func() bool {
		return count(t, e.pool, `SELECT count(*) FROM outbox_events WHERE state = 'published'`) > 0
	})
	if err := r.shutdown(t); err != nil {
		t.Fatal(err)
	}
	collected := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_collected_at IS NOT NULL`)
	events := count(t, e.pool, `SELECT count(*) FROM outbox`)
	pending := count(t, e.pool, `SELECT count(*) FROM outbox_events WHERE state <> 'published'`)
	t.Logf("collected %d of %d, events %d, unpublished after shutdown %d", collected, n, events, pending)
	if events != collected || pending != 0 {
		t.Fatalf("%d events for %d collections, %d left unpublished: the relay was not flushed", events, collected, pending)
	}
	if got := testutil.CollectAndCount(r.d.Metrics().PublishLatency); got != 1 {
		t.Fatalf("publish latency histogram not exported (%d series)", got)
	}
	var m dto.Metric
	if err := r.d.Metrics().PublishLatency.Write(&m); err != nil {
		t.Fatal(err)
	}
	if int(m.GetHistogram().GetSampleCount()) != events {
		t.Fatalf("publish latency observed %d events, want %d", m.GetHistogram().GetSampleCount(), events)
	}
}

// With Kafka failing every produce at shutdown, the final flush publishes nothing. The daemon
// still stops, and says how many events it left for the next relay instead of "outbox flushed".
func TestShutdownWithKafkaDownSaysWhatItLeft(t *testing.T) {
	broker := snapshotsBroker(t)
	broker.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Err: kerr.NotEnoughReplicas, Count: -1})
	e := newEnv(t, 4, neoplesim.Options{})
	e.track(t, 0, 4, tiers.Cold, -time.Second)
	cfg := testConfig()
	cfg.Daemon.ShutdownGrace = time.Second
	cfg.Relay = relayConfig(broker.ListenAddrs(), "test.snapshots")
	cfg.Relay.Test = &outbox.TestSignals{}
	cfg.Relay.Test.PublishError.Init(t)
	core, logs := zapobserver.New(zapcore.InfoLevel)
	r := e.start(t, cfg, zap.New(core))
	cfg.Relay.Test.PublishError.Wait(t)
	if err := r.shutdown(t); err != nil {
		t.Fatal(err)
	}
	pending := count(t, e.pool, `SELECT count(*) FROM outbox_pending`)
	if pending == 0 {
		t.Fatal("nothing pending after shutdown: the broker's fault did not hold")
	}
	if n := logs.FilterMessage("outbox flushed").Len(); n != 0 {
		t.Fatalf("logged \"outbox flushed\" with %d events unpublished", pending)
	}
	said := logs.Filter(func(e zapobserver.LoggedEntry) bool {
		return e.Level == zapcore.WarnLevel && strings.HasPrefix(e.Message, "final outbox flush")
	}).All()
	if len(said) != 1 || said[0].ContextMap()["pending"] != int64(pending) {
		t.Fatalf("final flush logged %v, want one warning with pending=%d", said, pending)
	}
}

// Another relay's lanes are its own to publish: a daemon stopping beside it says "outbox
// flushed", not that it left the other's pending events behind.
func TestTheFinalFlushLeavesOtherRelaysLanesOut(t *testing.T) {
	broker := snapshotsBroker(t)
	e := newEnv(t, 1, neoplesim.Options{})
	if _, err := e.pool.Exec(context.Background(), `
		WITH o AS (INSERT INTO outbox (event_type, item_id, payload) VALUES ('test', 'other-relays-item', '{}') RETURNING id, lane),
		     p AS (INSERT INTO outbox_pending (id, lane) SELECT id, lane FROM o)
		INSERT INTO outbox_relay_lanes (lane, owner, lease_token, lease_expires_at, acquired_at)
		SELECT lane, 'another-relay', gen_random_uuid(), now() + interval '1 hour', now() FROM o
		ON CONFLICT (lane) DO UPDATE SET owner = excluded.owner, lease_token = excluded.lease_token,
			lease_expires_at = excluded.lease_expires_at, acquired_at = excluded.acquired_at`); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Relay = relayConfig(broker.ListenAddrs(), "test.snapshots")
	cfg.Relay.Test = &outbox.TestSignals{}
	cfg.Relay.Test.Idle.Init(t)
	core, logs := zapobserver.New(zapcore.InfoLevel)
	r := e.start(t, cfg, zap.New(core))
	cfg.Relay.Test.Idle.Wait(t) // it holds the other lanes and has nothing to publish in them
	if err := r.shutdown(t); err != nil {
		t.Fatal(err)
	}
	if n := logs.FilterMessage("outbox flushed").Len(); n != 1 {
		t.Fatalf("\"outbox flushed\" logged %d times, want once: %v", n, logs.FilterLevelExact(zapcore.WarnLevel).All())
	}
}

// A notification wakes a daemon that would otherwise sleep its full maximum.
func TestNotificationWakesEarly(t *testing.T) {
	e := newEnv(t, 2, neoplesim.Options{})
	e.track(t, 0, 1, tiers.Cold, time.Hour) // the only wake-up the database knows of is an hour away
	cfg := testConfig()
	cfg.Daemon.Notify = true
	cfg.Daemon.MaxSleep = time.Hour
	cfg.signals.passed.Init(t)
	e.start(t, cfg, nil)
	cfg.signals.passed.Wait(t)
	testkit.Eventually(t, 10*time.Second, "the daemon's LISTEN", func() bool {
		return count(t, e.pool, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND query = 'LISTEN tracked_items_due'`) == 1
	})
	e.track(t, 1, 2, tiers.Cold, 0)
	// Only a notification can wake the loop within the hour (a status change wakes it too, to
	// no effect).
	waitCollected(t, cfg, e.pool, 1)
}

// A relay that stops on an error retrying cannot fix (here: its topic does not exist and it may
// not create it) makes /readyz fail with the reason within its first pass, sets
// collector_relay_up to 0, counts the error by reason, and `collector status` reads the stop
// from the database. Once the topic exists (an operator or a job created it), the daemon's next
// run of the relay publishes, and readiness, the metric and the stop notes are clear again.
func TestStoppedRelayFailsReadinessUntilItRunsAgain(t *testing.T) {
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "some.other.topic"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	e := newEnv(t, 1, neoplesim.Options{})
	cfg := testConfig()
	cfg.Daemon.HTTPAddr = "127.0.0.1:0"
	cfg.Relay = relayConfig(broker.ListenAddrs(), "not.there")
	cfg.RelayRestart = 100 * time.Millisecond
	cfg.signals.passed.Init(t)
	e.track(t, 0, 1, tiers.Cold, -time.Second)
	r := e.start(t, cfg, nil)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + r.d.Addr() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	var body string
	testkit.Eventually(t, 10*time.Second, "/readyz failing", func() bool {
		var code int
		code, body = get("/readyz")
		return code == http.StatusServiceUnavailable
	})
	if !strings.Contains(body, "outbox relay stopped") || !strings.Contains(body, "not.there") {
		t.Fatalf("/readyz says %q, want the relay's reason naming the topic", body)
	}
	testkit.Eventually(t, 10*time.Second, "the relay's metrics", func() bool {
		_, metrics := get("/metrics")
		// The relay is run again every RelayRestart: the count is 1 or more.
		n := regexp.MustCompile(`(?m)^collector_relay_publish_errors_total\{reason="topic"\} ([1-9][0-9]*)$`)
		return strings.Contains(metrics, "collector_relay_up 0") && n.MatchString(metrics)
	})
	st, err := Status(context.Background(), e.pool, "neople")
	if err != nil || len(st.Relay.Stops) == 0 || !strings.Contains(st.Relay.Stops[0].Reason, "not.there") {
		t.Fatalf("status relay %+v %v, want the stop with its reason", st.Relay, err)
	}

	conn, err := kafka.Dial("tcp", broker.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.CreateTopics(kafka.TopicConfig{Topic: "not.there", NumPartitions: 1, ReplicationFactor: 1}); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 30*time.Second, "/readyz ready once the topic exists", func() bool {
		code, _ := get("/readyz")
		return code == http.StatusOK
	})
	waitCollected(t, cfg, e.pool, 1) // its event waited in the outbox while the relay was stopped
	testkit.Eventually(t, 30*time.Second, "the collected item's event published", func() bool {
		return count(t, e.pool, `SELECT count(*) FROM outbox_pending`) == 0
	})
	if _, metrics := get("/metrics"); !strings.Contains(metrics, "collector_relay_up 1") {
		t.Fatal("collector_relay_up is not 1 once the relay publishes again")
	}
	if st, err := Status(context.Background(), e.pool, "neople"); err != nil || len(st.Relay.Stops) != 0 {
		t.Fatalf("status relay %+v %v once it publishes again, want no stops", st.Relay, err)
	}
}

// snapshotsBroker is an in-process Kafka with the 4-partition topic relayConfig names.
func snapshotsBroker(t *testing.T) *kfake.Cluster {
	t.Helper()
	broker, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, "test.snapshots"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	return broker
}

// relayConfig is a relay sized for tests: fast polls and retries, a lease that leaves room for a
// loaded machine.
func relayConfig(brokers []string, topic string) *outbox.RelayConfig {
	k := config.Default().Kafka
	k.Brokers, k.Topic, k.WriteTimeout, k.Lease, k.PollInterval = brokers, topic, 3*time.Second, 9*time.Second, 100*time.Millisecond
	k.Retry.BackoffMax = 200 * time.Millisecond
	return &outbox.RelayConfig{KafkaConfig: k, RetryBackoffMin: 10 * time.Millisecond}
}

// A daemon with no relay says once, at start, that its events wait for a relay elsewhere and
// which keys change that: a deployment that forgot kafka.brokers would otherwise fill the outbox
// with only the lag alert to tell. With outbox.enabled false there is nothing to wait.
func TestDaemonWithoutARelaySaysWhereEventsGo(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	for _, noOutbox := range []bool{false, true} {
		cfg := testConfig()
		cfg.Dispatch.History.NoOutbox = noOutbox
		core, logs := zapobserver.New(zapcore.InfoLevel)
		r := e.start(t, cfg, zap.New(core))
		if err := r.shutdown(t); err != nil {
			t.Fatal(err)
		}
		said := logs.FilterMessageSnippet("events wait in the outbox").All()
		switch {
		case noOutbox && len(said) != 0:
			t.Fatalf("outbox.enabled=false logged %v, want nothing about waiting events", said)
		case !noOutbox && (len(said) != 1 || said[0].ContextMap()["relay_key"] != "kafka.brokers"):
			t.Fatalf("no relay logged %v, want one line naming kafka.brokers", said)
		}
	}
}
