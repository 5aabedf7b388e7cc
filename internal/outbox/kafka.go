package outbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
)

// CloudEvents Kafka protocol binding, binary content mode: the value is the event data, the
// attributes travel as ce_-prefixed headers (docs/events.md).
const (
	HeaderSpecVersion = "ce_specversion"
	HeaderID          = "ce_id"
	HeaderType        = "ce_type"
	HeaderSource      = "ce_source"
	HeaderTime        = "ce_time"
	HeaderSubject     = "ce_subject"
	HeaderContentType = "content-type"

	specVersion = "1.0"
	contentType = "application/json"
)

// newTransport is shared by the writer and the admin client, so both reuse connections.
func newTransport(cfg RelayConfig) *kafka.Transport {
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: cfg.DialTimeout}).DialContext
	}
	return &kafka.Transport{
		Dial:        dial,
		DialTimeout: cfg.DialTimeout,
		ClientID:    cfg.ClientID,
		TLS:         cfg.TLS,
		SASL:        cfg.SASL,
	}
}

// NewWriter returns the kafka-go writer the relay publishes with: acks from all in-sync
// replicas, keys hashed like the Java client (murmur2), one attempt per call (the relay does
// its own retrying, so it knows what was acknowledged), synchronous.
//
// Batching is sized so that one WriteMessages call of at most BatchSize messages and
// BatchBytes bytes becomes exactly one produce request per partition: the batch never fills
// or overflows midway, and the tiny BatchTimeout only fires after a partition's messages were
// all added (kafka-go adds them under one lock). One request per partition means one item's
// messages in a call are acknowledged or rejected together, which keeps per-item order.
// Exported for the benchmark's raw-writer baseline.
func NewWriter(cfg RelayConfig, transport kafka.RoundTripper) *kafka.Writer {
	codec, _ := compressionCodec(cfg.Compression) // validated by NewRelay
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
		Compression:            codec,
		Transport:              transport,
		AllowAutoTopicCreation: false,
	}
}

// Header values that are the same for every message, shared by all of them (kafka-go only
// reads them).
var (
	specVersionValue = []byte(specVersion)
	contentTypeValue = []byte(contentType)
	snapshotType     = []byte(EventTypeSnapshot)
)

// prepare builds the Kafka headers of every row and sizes its message. It runs off the
// publishing path (on the read-ahead), and cuts the per-row header values out of one buffer
// and the headers out of one slice per batch, both in mem: no allocations per message, and
// none per batch once the relay recycles batches.
func prepare(rows []pendingRow, source string, mem *batchMem) {
	src := []byte(source)
	headers := mem.headers[:0]
	if need := len(rows) * 7; cap(headers) < need {
		headers = make([]kafka.Header, 0, need)
	}
	buf := mem.text[:0]
	if need := len(rows) * (36 + len(time.RFC3339Nano)); cap(buf) < need {
		buf = make([]byte, 0, need)
	}
	cut := func(from int) []byte { return buf[from:len(buf):len(buf)] }
	// The rows of one transaction share created_at (now() is the transaction's start), so a
	// batch has a few distinct times: each is formatted once.
	var lastAt time.Time
	var at []byte
	for i := range rows {
		r := &rows[i]
		start := len(buf)
		buf = appendUUID(buf, r.EventID)
		id := cut(start)
		if at == nil || !r.CreatedAt.Equal(lastAt) {
			start = len(buf)
			buf = r.CreatedAt.UTC().AppendFormat(buf, time.RFC3339Nano)
			at, lastAt = cut(start), r.CreatedAt
		}
		typ := snapshotType
		if !bytes.Equal(r.EventType, snapshotType) {
			typ = r.EventType
		}
		h := len(headers)
		headers = append(headers,
			kafka.Header{Key: HeaderSpecVersion, Value: specVersionValue},
			kafka.Header{Key: HeaderID, Value: id},
			kafka.Header{Key: HeaderType, Value: typ},
			kafka.Header{Key: HeaderSource, Value: src},
			kafka.Header{Key: HeaderTime, Value: at},
			kafka.Header{Key: HeaderSubject, Value: r.ItemID},
			kafka.Header{Key: HeaderContentType, Value: contentTypeValue},
		)
		r.headers = headers[h:len(headers):len(headers)]
		r.size = messageSize(r.msg())
	}
	mem.headers, mem.text = headers, buf
}

// msg is the Kafka message of a prepared row.
func (r *pendingRow) msg() kafka.Message {
	return kafka.Message{Key: r.ItemID, Value: r.Payload, Time: r.CreatedAt, Headers: r.headers}
}

// message builds the Kafka message for one outbox row.
func message(r pendingRow, source string) kafka.Message {
	rows := []pendingRow{r}
	prepare(rows, source, &batchMem{})
	return rows[0].msg()
}

// appendUUID appends u in its canonical text form (8-4-4-4-12 lowercase hex digits).
func appendUUID(b []byte, u [16]byte) []byte {
	const hexDigits = "0123456789abcdef"
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b = append(b, '-')
		}
		b = append(b, hexDigits[c>>4], hexDigits[c&0xf])
	}
	return b
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
// again cannot succeed. Everything else (broker down, leader moved, timeouts, authorization)
// is about the broker or the connection and is retried.
func rejected(err error) bool {
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) {
		// A batch is rejected when every message in it that failed was rejected.
		found := false
		for _, e := range werrs {
			if e != nil {
				if !rejected(e) {
					return false
				}
				found = true
			}
		}
		return found
	}
	var tooLarge kafka.MessageTooLargeError
	if errors.As(err, &tooLarge) {
		return true
	}
	var kerr kafka.Error
	if errors.As(err, &kerr) {
		switch kerr {
		case kafka.MessageSizeTooLarge, kafka.RecordListTooLarge, kafka.InvalidRecord, kafka.InvalidTimestamp:
			return true
		}
	}
	return false
}

// ensureTopic checks that the topic exists and creates it when allowed. A missing topic that
// may not be created is a permanent error naming the topic; connection errors are returned
// as they are, for the caller to retry.
func (r *Relay) ensureTopic(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.WriteTimeout)
	defer cancel()
	md, err := r.client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{r.cfg.Topic}})
	if err != nil {
		return fmt.Errorf("read metadata of kafka topic %s from %s: %w", r.cfg.Topic, strings.Join(r.cfg.Brokers, ","), err)
	}
	var topicErr error = kafka.UnknownTopicOrPartition
	for _, t := range md.Topics {
		if t.Name == r.cfg.Topic {
			topicErr = t.Error
			if topicErr == nil {
				r.log.Debug("kafka topic found")
				return nil
			}
		}
	}
	if !errors.Is(topicErr, kafka.UnknownTopicOrPartition) {
		return fmt.Errorf("kafka topic %s: %w", r.cfg.Topic, topicErr)
	}
	if !r.cfg.CreateTopic {
		return &permanentError{fmt.Errorf("kafka topic %s does not exist on %s: create it, or set kafka.create_topic=true to let the relay create it",
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
		return fmt.Errorf("create kafka topic %s: %w", r.cfg.Topic, err)
	}
	if err := res.Errors[r.cfg.Topic]; err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		// A bad partition count, replication factor or topic config will not fix itself.
		return &permanentError{fmt.Errorf("create kafka topic %s (kafka.partitions=%d, kafka.replication_factor=%d): %w",
			r.cfg.Topic, r.cfg.Partitions, r.cfg.ReplicationFactor, err)}
	}
	r.log.Info("created kafka topic")
	return nil
}

// permanentError is a failure that retrying cannot fix (configuration), so even follow mode
// gives up on it.
type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }
