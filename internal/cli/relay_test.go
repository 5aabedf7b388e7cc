package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/duecollector/duecollector/internal/testkit"
)

// relay-outbox --once stopped by SIGTERM or Ctrl-C (its context cancelled), here while it backs
// off from a broker nobody answers at, says what it published and exits 0, as collect-due
// does; what it did not publish stays pending for the next run.
func TestRelayOnceStoppedSaysSoAndExitsZero(t *testing.T) {
	db := catalogEnv(t, true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := ln.Addr().String()
	_ = ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs, logw := io.Pipe()
	var out bytes.Buffer // read once the command has returned
	cmd := newRootCmd(&out, logw)
	cmd.SetArgs([]string{"relay-outbox", "--once", "--database-url", db, "--brokers", nobody, "--log-format=console"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); _ = logw.Close() }()
	sc := bufio.NewScanner(logs)
	for sc.Scan() && !strings.Contains(sc.Text(), "relay attempt failed, backing off") {
	}
	cancel() // the signal
	go func() { _, _ = io.Copy(io.Discard, logs) }()
	if err := testkit.Recv(t, done, testkit.Timeout, "relay-outbox --once to stop"); err != nil {
		t.Fatalf("relay-outbox --once stopped: %v, want exit 0", err)
	}
	if !strings.Contains(out.String(), "published 0, failed 0, in 0 batches; interrupted: the rest stays in the outbox") {
		t.Fatalf("relay-outbox --once stopped printed %q", out.String())
	}
}

// Events the broker refuses for what they are are set aside as failed, and the run that met
// them exits 1: a cron-only deployment has no gauge to alert on, and later runs do not see them.
func TestRelayOnceExitsOneWhenTheBrokerRefusesEvents(t *testing.T) {
	db := catalogEnv(t, true)
	if _, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", "../../configs/import-targets.yaml"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCollector(t, "collect-due", "--database-url", db); err != nil {
		t.Fatal(err)
	}
	broker := newBroker(t, "tiny-messages", 1, map[string]string{"max.message.bytes": "100"})
	t.Setenv("COLLECTOR_KAFKA_TOPIC", "tiny-messages")
	out, _, err := runCollector(t, "relay-outbox", "--once", "--database-url", db, "--brokers", broker)
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "the broker refused 12 events") || !strings.Contains(out, "failed 12") {
		t.Fatalf("relay-outbox --once with every event refused: %q, %v; want exit 1 naming the 12 set aside", out, err)
	}
}

// relay-outbox without --once runs the pruner beside it, as collector run does: without a daemon,
// events it published and that are past kafka.outbox_retention still go.
func TestAFollowingRelayPrunesWhatItPublished(t *testing.T) {
	db := catalogEnv(t, true)
	if _, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", "../../configs/import-targets.yaml"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCollector(t, "collect-due", "--database-url", db); err != nil {
		t.Fatal(err)
	}
	pool, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pool.Close(context.Background()) })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var events int64
	// Created past the retention (168h): once published, each may go at the pruner's next turn.
	if err := pool.QueryRow(ctx, `WITH u AS (UPDATE outbox SET created_at = now() - interval '30 days' RETURNING 1)
		SELECT count(*) FROM u`).Scan(&events); err != nil || events == 0 {
		t.Fatalf("%d outbox rows to age: %v", events, err)
	}
	broker := newBroker(t, "market.auction-snapshots.v1", 12, nil)
	followPruneInterval = 10 * time.Millisecond
	t.Cleanup(func() { followPruneInterval = 0 })

	logs, logw := io.Pipe()
	var out bytes.Buffer
	cmd := newRootCmd(&out, logw)
	cmd.SetArgs([]string{"relay-outbox", "--database-url", db, "--brokers", broker, "--log-format=json"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); _ = logw.Close() }()
	// A relay that never prunes is stopped after testkit.Timeout: the scan then ends short.
	stopAfter := time.AfterFunc(testkit.Timeout, cancel)
	defer stopAfter.Stop()
	var pruned int64
	sc := bufio.NewScanner(logs)
	for pruned < events && sc.Scan() {
		var line struct {
			Msg       string `json:"msg"`
			Published int64  `json:"outbox_published"`
		}
		if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "pruned collected history" {
			pruned += line.Published
		}
	}
	cancel()
	go func() { _, _ = io.Copy(io.Discard, logs) }()
	if err := testkit.Recv(t, done, testkit.Timeout, "relay-outbox to stop"); err != nil {
		t.Fatalf("relay-outbox stopped: %v", err)
	}
	var left int64
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM outbox`).Scan(&left); err != nil || pruned != events || left != 0 {
		t.Fatalf("pruned %d of %d published events, %d rows left (%v)", pruned, events, left, err)
	}
	// Stopped, it says what it published, as --once does.
	if want := fmt.Sprintf("published %d, failed 0, in ", events); !strings.HasPrefix(out.String(), want) {
		t.Fatalf("relay-outbox stopped printed %q, want %q…", out.String(), want)
	}
}

// newBroker is an in-process Kafka broker holding topic, stopped when the test ends; it returns
// its address.
func newBroker(t *testing.T, topic string, partitions int32, configs map[string]string) string {
	t.Helper()
	broker, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(broker.Close)
	if err := broker.CreateTopic(topic, partitions, configs); err != nil {
		t.Fatal(err)
	}
	return broker.ListenAddrs()[0]
}
