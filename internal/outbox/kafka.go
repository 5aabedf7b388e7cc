package outbox

import (
	"errors"
	"slices"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/duecollector/duecollector/internal/kafkaconn"
)

// newWriter makes a call of at most BatchSize messages and BatchBytes one request per partition.
func newWriter(cfg RelayConfig, transport kafka.RoundTripper) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Topic:        cfg.Topic,
		Balancer:     &kafka.Murmur2Balancer{},
		MaxAttempts:  1, // the relay retries, so it knows what was acknowledged
		BatchSize:    cfg.BatchSize,
		BatchBytes:   cfg.BatchBytes,
		BatchTimeout: time.Microsecond,
		ReadTimeout:  cfg.WriteTimeout,
		WriteTimeout: cfg.WriteTimeout,
		RequiredAcks: kafka.RequireAll,
		Compression:  kafkaconn.Compression(cfg.Compression),
		Transport:    transport,
	}
}

// message is key = item_id with CloudEvents headers in binary mode (docs/events.md).
func message(r pendingRow, source string) kafka.Message {
	h := func(k, v string) kafka.Header { return kafka.Header{Key: k, Value: []byte(v)} }
	return kafka.Message{Key: []byte(r.ItemID), Value: r.Payload, Time: r.CreatedAt, Headers: []kafka.Header{
		h("ce_specversion", "1.0"), h("ce_id", r.EventID), h("ce_type", r.EventType), h("ce_source", source),
		h("ce_time", r.CreatedAt.UTC().Format(time.RFC3339Nano)), h("ce_subject", r.ItemID),
		h("content-type", "application/json"),
	}}
}

// messageSize bounds what kafka-go counts against BatchBytes (lengths are varints of up to 5 bytes).
func messageSize(m kafka.Message) int64 {
	n := int64(4+1+1+8) + 4 + int64(len(m.Key)) + 4 + int64(len(m.Value)) + 5
	for _, h := range m.Headers {
		n += 5 + int64(len(h.Key)) + 5 + int64(len(h.Value))
	}
	return n
}

// rejected: the broker refused the message for what it is, so sending it again cannot succeed.
func rejected(err error) bool {
	var tooLarge kafka.MessageTooLargeError
	var kerr kafka.Error
	return errors.As(err, &tooLarge) || errors.As(err, &kerr) && slices.Contains([]kafka.Error{
		kafka.MessageSizeTooLarge, kafka.RecordListTooLarge, kafka.InvalidRecord, kafka.InvalidTimestamp}, kerr)
}

// relayError is a failure about Kafka or a panic; a permanent one stops even a following relay.
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

// classify gives the error's metric label and whether it is permanent; the rest is the database's.
func classify(err error) (reason string, permanent bool) {
	var re *relayError
	if errors.As(err, &re) {
		return re.reason, re.permanent
	}
	return "database", false
}
