package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// newWriter returns the kafka-go writer the relay publishes with: acks from all in-sync
// replicas, keys hashed like the Java client (murmur2), one attempt per call (the relay does
// its own retrying, so it knows what was acknowledged), synchronous.
//
// Batching is sized so that one WriteMessages call of at most BatchSize messages and
// BatchBytes bytes becomes exactly one produce request per partition: the batch never fills
// or overflows midway, and the tiny BatchTimeout only fires after a partition's messages were
// all added (kafka-go adds them under one lock). One request per partition means one item's
// messages in a call are acknowledged or rejected together, which keeps per-item order.
func newWriter(cfg RelayConfig, transport kafka.RoundTripper) *kafka.Writer {
	return &kafka.Writer{
		Addr:                   kafka.TCP(cfg.Brokers...),
		Topic:                  cfg.Topic,
		Balancer:               &kafka.Murmur2Balancer{},
		MaxAttempts:            1,
		BatchSize:              cfg.BatchSize,
		BatchBytes:             cfg.BatchBytes,
		BatchTimeout:           time.Microsecond,
		ReadTimeout:            cfg.WriteTimeout,
		WriteTimeout:           cfg.WriteTimeout,
		RequiredAcks:           kafka.RequireAll,
		Compression:            codecs[cfg.Compression],
		Transport:              transport,
		AllowAutoTopicCreation: false,
	}
}

// message builds the Kafka message of an outbox row: key = item_id, the JSON value, and the
// CloudEvents attributes as ce_ headers (Kafka binding, binary mode; docs/events.md).
func message(r pendingRow, source string) kafka.Message {
	h := func(k, v string) kafka.Header { return kafka.Header{Key: k, Value: []byte(v)} }
	return kafka.Message{Key: []byte(r.ItemID), Value: r.Payload, Time: r.CreatedAt, Headers: []kafka.Header{
		h("ce_specversion", "1.0"), h("ce_id", r.EventID), h("ce_type", r.EventType), h("ce_source", source),
		h("ce_time", r.CreatedAt.UTC().Format(time.RFC3339Nano)), h("ce_subject", r.ItemID),
		h("content-type", "application/json"),
	}}
}

// messageSize is an upper bound of the bytes kafka-go counts for a message against
// BatchBytes (it encodes lengths as varints of at most 5 bytes).
func messageSize(m kafka.Message) int64 {
	n := int64(4+1+1+8) + 4 + int64(len(m.Key)) + 4 + int64(len(m.Value)) + 5
	for _, h := range m.Headers {
		n += 5 + int64(len(h.Key)) + 5 + int64(len(h.Value))
	}
	return n
}

// rejected reports whether the broker refused a message for what it is, so that sending it
// again cannot succeed. Everything else is about the broker or the connection (brokerError).
func rejected(err error) bool {
	var tooLarge kafka.MessageTooLargeError
	var kerr kafka.Error
	return errors.As(err, &tooLarge) || errors.As(err, &kerr) && slices.Contains([]kafka.Error{
		kafka.MessageSizeTooLarge, kafka.RecordListTooLarge, kafka.InvalidRecord, kafka.InvalidTimestamp}, kerr)
}

// ensureTopic checks that the topic exists and creates it when allowed. A missing topic that
// may not be created is a permanent error naming the topic; connection errors are returned
// for the caller to retry.
func (r *Relay) ensureTopic(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	md, err := r.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{r.cfg.Topic}})
	if err != nil {
		return brokerError(fmt.Errorf("read metadata of kafka topic %s from %s: %w", r.cfg.Topic, strings.Join(r.cfg.Brokers, ","), err))
	}
	var topicErr error = kafka.UnknownTopicOrPartition
	for _, t := range md.Topics {
		if t.Name == r.cfg.Topic {
			topicErr = t.Error
		}
	}
	switch {
	case topicErr == nil:
		return nil
	case !errors.Is(topicErr, kafka.UnknownTopicOrPartition):
		return brokerError(fmt.Errorf("kafka topic %s: %w", r.cfg.Topic, topicErr))
	case !r.cfg.CreateTopic:
		return &relayError{reason: "topic", permanent: true, err: fmt.Errorf(
			"kafka topic %s does not exist on %s: create it, or set kafka.create_topic=true to let the relay create it",
			r.cfg.Topic, strings.Join(r.cfg.Brokers, ","))}
	}
	req := &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{{
		Topic:             r.cfg.Topic,
		NumPartitions:     r.cfg.Partitions,
		ReplicationFactor: r.cfg.ReplicationFactor,
	}}}
	for k, v := range r.cfg.TopicConfig {
		req.Topics[0].ConfigEntries = append(req.Topics[0].ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	res, err := r.client.CreateTopics(ctx, req)
	if err != nil {
		return brokerError(fmt.Errorf("create kafka topic %s: %w", r.cfg.Topic, err))
	}
	if err := res.Errors[r.cfg.Topic]; err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		// A bad partition count, replication factor or topic config will not fix itself.
		return &relayError{reason: "topic", permanent: true, err: fmt.Errorf(
			"create kafka topic %s (kafka.partitions=%d, kafka.replication_factor=%d): %w",
			r.cfg.Topic, r.cfg.Partitions, r.cfg.ReplicationFactor, err)}
	}
	r.log.Info("created kafka topic")
	return nil
}

// relayError says what went wrong, for collector_relay_publish_errors_total{reason}. A
// permanent one cannot be fixed by retrying, so even a following relay stops on it.
type relayError struct {
	reason    string // topic, authorization or broker
	permanent bool
	err       error
}

func (e *relayError) Error() string { return e.err.Error() }
func (e *relayError) Unwrap() error { return e.err }

// brokerError classifies a failure talking to Kafka; refused authorization is permanent.
func brokerError(err error) error {
	var kerr kafka.Error
	if errors.As(err, &kerr) && slices.Contains([]kafka.Error{
		kafka.TopicAuthorizationFailed, kafka.ClusterAuthorizationFailed, kafka.SASLAuthenticationFailed}, kerr) {
		return &relayError{reason: "authorization", permanent: true, err: err}
	}
	return &relayError{reason: "broker", err: err}
}

// reasonOf is the metric label of an error RunOnce or Run met: what relayError says, or
// database for everything else (leases, reads, marks and pruning are the relay's only
// other dependencies).
func reasonOf(err error) string {
	var re *relayError
	if errors.As(err, &re) {
		return re.reason
	}
	return "database"
}

func permanent(err error) bool {
	var re *relayError
	return errors.As(err, &re) && re.permanent
}
