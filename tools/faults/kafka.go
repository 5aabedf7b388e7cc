package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

const topic = "market.auction-snapshots.v1"

// relayEnv points the relay at the broker and keeps its backoff short enough that recovery
// after the outage is measured in seconds, not in the 30 s default cap.
func relayEnv(broker string) []string {
	return []string{
		"COLLECTOR_KAFKA_BROKERS=" + broker,
		"COLLECTOR_KAFKA_RETRY_BACKOFF_MAX=1s",
		"COLLECTOR_KAFKA_WRITE_TIMEOUT=3s",
	}
}

// scenarioKafkaDown: the relay follows the outbox while the broker is down (and more events
// are written meanwhile); once the broker is back every event arrives, in order per item.
func scenarioKafkaDown(ctx context.Context, h *harness, r *report) error {
	d := h.outboxDB
	if d == nil {
		// Scenario 2 did not leave an outbox: make a smaller one.
		var err error
		if d, err = h.newDB(ctx, "kafka"); err != nil {
			return err
		}
		if err := d.insertDue(ctx, h.catalog[:500], "COLD_10M"); err != nil {
			return err
		}
		h.runCollectDue(ctx, r, d, "kafka-fill", 2*time.Minute, nil)
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	broker := fmt.Sprintf("127.0.0.1:%d", port)
	env := h.env(d.url, relayEnv(broker)...)

	// --once against a dead broker gives up with a non-zero exit and says why.
	once, err := h.start(ctx, "relay-once-down", env, "relay-outbox", "--once")
	if err != nil {
		return err
	}
	code, err := once.wait(ctx, 2*time.Minute)
	errLine := lastErrorLine(once.output())
	r.check(err == nil && code != 0, "relay-outbox --once with the broker down: exit %d %v, want non-zero", code, err)
	r.check(strings.Contains(errLine, broker), "relay-outbox --once error does not name the broker %s: %q", broker, errLine)
	r.num("--once down: exit %d %q", code, truncate(errLine, 110))

	relay, err := h.start(ctx, "relay-follow", env, "relay-outbox")
	if err != nil {
		return err
	}
	downSince := time.Now()
	// Events written during the outage: 100 items collected twice more, so order per item
	// has something to prove (three events for each of them).
	again := h.catalog[:100]
	for i := range 2 {
		if err := d.makeDue(ctx, again); err != nil {
			return err
		}
		h.runCollectDue(ctx, r, d, fmt.Sprintf("kafka-more-%d", i), 2*time.Minute, nil)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-relay.done:
		return fmt.Errorf("relay exited (%d) while the broker was down: %s", relay.code, relay.tail())
	case <-time.After(time.Until(downSince.Add(h.o.kafkaDown))):
	}
	published, err := d.count(ctx, `SELECT count(*) FROM outbox_events WHERE state = 'published'`)
	if err != nil {
		return err
	}
	r.check(published == 0, "%d events marked published while the broker was down", published)
	r.check(!relay.exited(), "relay exited while the broker was down: %s", relay.tail())

	cluster, err := kfake.NewCluster(kfake.Ports(port), kfake.SeedTopics(6, topic))
	if err != nil {
		return fmt.Errorf("restart kfake on %s: %w", broker, err)
	}
	h.extraCleanup = append(h.extraCleanup, cluster.Close)
	up := time.Now()
	downFor := up.Sub(downSince)
	total, err := d.count(ctx, `SELECT count(*) FROM outbox`)
	if err != nil {
		return err
	}
	if err := poll(ctx, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
		n, err := d.count(ctx, `SELECT count(*) FROM outbox_events WHERE state <> 'published'`)
		return n == 0 || relay.exited(), err
	}); err != nil {
		return fmt.Errorf("outbox not drained after the broker came back: %w: %s", err, relay.tail())
	}
	drained := time.Since(up)
	relay.signal(syscall.SIGTERM)
	code, err = relay.wait(ctx, 30*time.Second)
	r.check(err == nil && code == 0, "relay exit %d %v after SIGTERM, want 0: %s", code, err, relay.tail())
	failed, err := d.count(ctx, `SELECT count(*) FROM outbox_events WHERE state <> 'published'`)
	if err != nil {
		return err
	}
	r.check(failed == 0, "%d outbox rows failed or unpublished", failed)

	consumed, err := consumeAll(ctx, broker, total)
	if err != nil {
		r.check(false, "consume: %v", err)
	}
	lost, dupes, misordered, err := compareOutbox(ctx, d, consumed)
	if err != nil {
		return err
	}
	r.check(lost == 0, "%d events lost", lost)
	r.check(misordered == 0, "%d items out of order", misordered)
	r.num("broker down %s (flag -kafka-down)", downFor.Round(time.Second))
	r.num("%d events, %d consumed, lost %d, duplicates %d, items out of order %d", total, len(consumed), lost, dupes, misordered)
	r.num("drained %s after broker back; SIGTERM exit %d", drained.Round(100*time.Millisecond), code)
	return nil
}

type record struct{ key, id string }

// consumeAll reads the topic from the start until want distinct events arrived or a minute
// passed.
func consumeAll(ctx context.Context, broker string, want int) ([]record, error) {
	var out []record
	seen := map[string]bool{}
	err := readTopic(ctx, broker, func() bool { return len(seen) < want }, func(rec *kgo.Record) error {
		var id string
		for _, hd := range rec.Headers {
			if hd.Key == "ce_id" {
				id = string(hd.Value)
			}
		}
		out = append(out, record{key: string(rec.Key), id: id})
		seen[id] = true
		return nil
	})
	return out, err
}

// readTopic reads the topic from the start with a real consumer, handing each record to each
// in offset order within its partition, while more says so (asked before every poll) and for
// at most a minute.
func readTopic(ctx context.Context, broker string, more func() bool, each func(*kgo.Record) error) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(300*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	for deadline := time.Now().Add(time.Minute); more() && time.Now().Before(deadline); {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		fs := cl.PollFetches(pctx)
		cancel()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		for _, fe := range fs.Errors() {
			if !errors.Is(fe.Err, context.DeadlineExceeded) {
				return fmt.Errorf("fetch %s/%d: %w", fe.Topic, fe.Partition, fe.Err)
			}
		}
		var bad error
		fs.EachRecord(func(rec *kgo.Record) {
			if bad == nil {
				bad = each(rec)
			}
		})
		if bad != nil {
			return bad
		}
	}
	return nil
}

// compareOutbox checks the consumed records against the outbox: every event present, and for
// each item its events in outbox id order (first delivery of each counts; a redelivery after
// a lost acknowledgement is a duplicate, not a reordering).
func compareOutbox(ctx context.Context, d *database, consumed []record) (lost, dupes, misordered int, err error) {
	rows, err := d.pool.Query(ctx, `SELECT item_id, event_id::text FROM outbox ORDER BY id`)
	if err != nil {
		return 0, 0, 0, err
	}
	want := map[string][]string{}
	for rows.Next() {
		var item, id string
		if err := rows.Scan(&item, &id); err != nil {
			return 0, 0, 0, err
		}
		want[item] = append(want[item], id)
	}
	if err := rows.Err(); err != nil {
		return 0, 0, 0, err
	}
	got := map[string][]string{}
	seen := map[string]bool{}
	for _, rec := range consumed {
		if seen[rec.id] {
			dupes++
			continue
		}
		seen[rec.id] = true
		got[rec.key] = append(got[rec.key], rec.id)
	}
	for item, ids := range want {
		for _, id := range ids {
			if !seen[id] {
				lost++
			}
		}
		if !slices.Equal(ids, got[item]) && len(ids) == len(got[item]) {
			misordered++
		}
	}
	return lost, dupes, misordered, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// lastErrorLine is the error main reports before a non-zero exit: under log.format=json (what
// the harness sets) a "command failed" line with an error field, otherwise an "error: ..." line.
func lastErrorLine(out []byte) string {
	lines := bytes.Split(out, []byte("\n"))
	for i := len(lines) - 1; i >= 0; i-- {
		line := bytes.TrimSpace(lines[i])
		var rec struct{ Msg, Error string }
		if json.Unmarshal(line, &rec) == nil && rec.Msg == "command failed" {
			return "error: " + rec.Error
		}
		if bytes.HasPrefix(line, []byte("error: ")) {
			return string(line)
		}
	}
	return ""
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
