package outbox

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/testkit"
)

// One partition out of service (too few in-sync replicas: every produce to it refused) holds
// back its own items' events only: a following relay publishes every other item's, keeps the
// partition's in the outbox however many pile up, and delivers them in each item's order once
// the partition takes writes again.
func TestAPartitionOutOfServiceHoldsBackOnlyItsItems(t *testing.T) {
	pool, broker, cfg, heldBack, fault := partitionOutOfService(t)
	core, logs := observer.New(zapcore.InfoLevel)
	r, sig := newLoggedRelay(t, pool, cfg, zap.New(core))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- r.Run(ctx) }()

	waitPublished(t, (items-len(heldBack))*perItem, sig)
	// Retries of the held-back items, refused again: the partition is still out, which is no
	// failure of the relay's to back off from or to tell as one.
	wctx, wcancel := context.WithTimeout(ctx, testkit.Timeout)
	defer wcancel()
	if err := fault.Wait(wctx, fault.Hits()+3); err != nil {
		t.Fatalf("no retries of the held-back items: %v", err)
	}
	if n := countWhere(t, pool, fmt.Sprintf("state = 'published' AND item_id IN ('%s')", strings.Join(heldBack, "', '"))); n != 0 {
		t.Fatalf("%d events of the partition out of service marked published", n)
	}
	if n := logs.FilterMessage("relay attempt failed, backing off").Len(); n != 0 {
		t.Fatalf("%d 'relay attempt failed' lines: the relay backed off for one partition", n)
	}
	if n := logs.FilterMessageSnippet("kafka refuses some items' events").Len(); n != 1 {
		t.Fatalf("%d lines telling of the held-back items, want 1 a minute", n)
	}
	fault.Remove()
	waitPublished(t, len(heldBack)*perItem, sig)
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	checkDelivery(t, outboxRows(t, pool), consumeAll(t, broker, testTopic))
	if n := logs.FilterMessage("kafka takes every item's events again").Len(); n != 1 {
		t.Fatalf("%d lines telling the held-back items went through, want 1", n)
	}
}

// A pass publishes the other items' events, retries the held-back ones as its attempts, and
// fails saying why, leaving them in the outbox.
func TestAPassPublishesAroundAPartitionOutOfService(t *testing.T) {
	pool, _, cfg, heldBack, _ := partitionOutOfService(t)
	r, _ := newTestRelay(t, pool, cfg)
	res, err := r.RunOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "NOT_ENOUGH_REPLICAS") {
		t.Fatalf("pass: %v, want it to fail for the partition out of service", err)
	}
	if want := int64((items - len(heldBack)) * perItem); res.Published != want {
		t.Fatalf("pass published %d events, want the %d of the partitions in service", res.Published, want)
	}
	if n := countWhere(t, pool, fmt.Sprintf("state = 'pending' AND item_id IN ('%s')", strings.Join(heldBack, "', '"))); n != len(heldBack)*perItem {
		t.Fatalf("%d of the held-back items' %d events pending", n, len(heldBack)*perItem)
	}
}

const items, perItem = 40, 30

// partitionOutOfService enqueues perItem events for each of items and makes the broker refuse
// every produce to the partition of item-000, whose items it returns.
func partitionOutOfService(t *testing.T) (*pgxpool.Pool, *kfake.Cluster, RelayConfig, []string, *kfake.FaultHandle) {
	pool := newDB(t)
	broker := newBroker(t)
	enqueue(t, pool, snapshotEvents(items, perItem))
	balancer := &kafka.Murmur2Balancer{} // the relay's writer's, over newBroker's 4 partitions
	partition := func(item string) int { return balancer.Balance(kafka.Message{Key: []byte(item)}, 0, 1, 2, 3) }
	down := partition("item-000")
	var heldBack []string
	for i := range items {
		if item := fmt.Sprintf("item-%03d", i); partition(item) == down {
			heldBack = append(heldBack, item)
		}
	}
	cfg := testConfig(broker.ListenAddrs(), "relay-a")
	if n := len(heldBack) * perItem; n <= cfg.BatchSize || n == items*perItem {
		t.Fatalf("%d of %d events on the partition out of service: the test needs more than a produce call's worth and fewer than all", n, items*perItem)
	}
	fault := broker.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: testTopic, Partitions: []int32{int32(down)},
		Err: kerr.NotEnoughReplicas, Count: -1})
	return pool, broker, cfg, heldBack, fault
}

// Kafka cut off while a partition's items are parked: the other items' calls fail without a
// word from Kafka, so the relay counts failed attempts and, after a lease of them, hands its
// lanes back as in any outage, parked items or not.
func TestKafkaCutOffAfterAPartitionStillHandsTheLanesBack(t *testing.T) {
	pool, broker, _, heldBack, _ := partitionOutOfService(t)
	proxy := startCutProxy(t, broker.ListenAddrs()[0])
	sig, stop, done := followRelay(t, pool, broker.ListenAddrs(), "relay-a", proxy.dial)
	defer stop()
	waitPublished(t, (items-len(heldBack))*perItem, sig)
	proxy.cut()
	enqueue(t, pool, snapshotEvents(items, 1))
	if handed := sig.HandedBack.Wait(t); len(handed) != Lanes {
		t.Fatalf("handed back lanes %v, want all %d", handed, Lanes)
	}
	stop()
	if err := testkit.Recv(t, done, testkit.Timeout, "the relay to return"); err != nil {
		t.Fatal(err)
	}
}

// Behind a transaction-pooling PgBouncer (the simple protocol: no parameter types) the parked
// items still reach the read.
func TestAPassAroundAPartitionInTheSimpleProtocol(t *testing.T) {
	pool, _, cfg, heldBack, _ := partitionOutOfService(t)
	pc := pool.Config()
	pc.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	simple, err := pgxpool.NewWithConfig(context.Background(), pc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(simple.Close)
	r, _ := newTestRelay(t, simple, cfg)
	res, err := r.RunOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "NOT_ENOUGH_REPLICAS") {
		t.Fatalf("pass: %v, want it to fail for the partition out of service", err)
	}
	if want := int64((items - len(heldBack)) * perItem); res.Published != want {
		t.Fatalf("pass published %d events, want the %d of the partitions in service", res.Published, want)
	}
}

// A pass counts its retries of the held-back items however many new events of other items it
// publishes between them: with events arriving all the time it still gives up.
func TestAPassGivesUpOnAPartitionWhileEventsKeepComing(t *testing.T) {
	pool, _, cfg, heldBack, fault := partitionOutOfService(t)
	r, _ := newTestRelay(t, pool, cfg)
	healthy := slices.IndexFunc(snapshotEvents(items, 1), func(e SnapshotEvent) bool { return !slices.Contains(heldBack, e.ItemID) })
	const most = 50
	fed, refused := 0, 0
	r.afterCall = func() { // a new event of an item in service after every refused produce call
		if n := fault.Hits(); n > refused && fed < most {
			refused = n
			fed++
			enqueue(t, pool, snapshotEvents(items, 1)[healthy:healthy+1])
		}
	}
	_, err := r.RunOnce(context.Background())
	if err == nil || !strings.Contains(err.Error(), "gave up after") {
		t.Fatalf("pass: %v, want it to give up", err)
	}
	if fed == most {
		t.Fatalf("the pass gave up only once no new events came (%d fed)", fed)
	}
}
