package outbox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// RelayConfig sizes and points a Relay. Zero fields take the defaults below; NewRelay
// validates the result. RelayConfigFrom builds one from the kafka.* configuration keys.
type RelayConfig struct {
	Brokers  []string
	Topic    string // default market.auction-snapshots.v1
	ClientID string // default duecollector
	Source   string // ce_source header; default duecollector/neople

	BatchSize    int           // messages per produce call (a read covers 4); default 500
	BatchBytes   int64         // bytes per produce batch; default 1 MiB
	Compression  string        // none (default), gzip, snappy, lz4, zstd
	WriteTimeout time.Duration // one produce request; default 10s
	DialTimeout  time.Duration // default 5s

	CreateTopic       bool
	Partitions        int               // default 12, only when creating
	ReplicationFactor int               // default 3, only when creating
	TopicConfig       map[string]string // only when creating

	Lease        time.Duration // lane lease; default 30s, at least 3 × WriteTimeout
	PollInterval time.Duration // follow mode, when no notification arrives; default 1s

	Retention     time.Duration // published rows older than this are pruned; default 7 days
	PruneInterval time.Duration // follow mode; default 10m
	PruneBatch    int           // rows per DELETE; default 1000

	Attempts   int           // RunOnce gives up after this many failed tries in a row; default 5
	BackoffMin time.Duration // default 200ms
	BackoffMax time.Duration // default 30s

	TLS  *tls.Config    // nil = plaintext
	SASL sasl.Mechanism // nil = no authentication

	// Dial, when set, opens the connections to the brokers instead of a net.Dialer with
	// DialTimeout (a proxy, or the benchmarks' simulated network distance).
	Dial func(ctx context.Context, network, address string) (net.Conn, error)

	// Owner names this relay in outbox_relay_lanes (informational); default host:pid.
	Owner string

	// OnPublished, when set, hears the publish latency (seconds from the row's creation to its
	// mark, database clock) of every row marked published; the daemon feeds a histogram.
	OnPublished func(ages []float64)

	// OnError, when set, hears the reason of every failed attempt and rejected event (topic,
	// authorization, broker, database, panic, rejected); the daemon counts them.
	OnError func(reason string)

	// Test, when set, reports what the relay does so tests can wait for it.
	Test *TestSignals
}

// DefaultTopic is the topic snapshot events go to unless configured otherwise.
const DefaultTopic = "market.auction-snapshots.v1"

func (c *RelayConfig) setDefaults() {
	setIfZero(&c.Topic, DefaultTopic)
	setIfZero(&c.ClientID, "duecollector")
	setIfZero(&c.Source, "duecollector/neople")
	setIfZero(&c.BatchSize, 500)
	setIfZero(&c.BatchBytes, 1<<20)
	setIfZero(&c.Compression, "none")
	setIfZero(&c.WriteTimeout, 10*time.Second)
	setIfZero(&c.DialTimeout, 5*time.Second)
	setIfZero(&c.Partitions, 12)
	setIfZero(&c.ReplicationFactor, 3)
	setIfZero(&c.Lease, 30*time.Second)
	setIfZero(&c.PollInterval, time.Second)
	setIfZero(&c.Retention, 7*24*time.Hour)
	setIfZero(&c.PruneInterval, 10*time.Minute)
	setIfZero(&c.PruneBatch, 1000)
	setIfZero(&c.Attempts, 5)
	setIfZero(&c.BackoffMin, 200*time.Millisecond)
	setIfZero(&c.BackoffMax, 30*time.Second)
	if c.Owner == "" {
		c.Owner = telemetry.Instance()
	}
}

func setIfZero[T comparable](p *T, v T) {
	var zero T
	if *p == zero {
		*p = v
	}
}

// validate names the configuration key behind each field, since that is what an operator sets.
func (c *RelayConfig) validate() error {
	var errs []error
	bad := func(key string, v any, why string) {
		errs = append(errs, fmt.Errorf("relay config %s = %v: %s", key, v, why))
	}
	if len(c.Brokers) == 0 {
		bad("kafka.brokers", c.Brokers, "at least one host:port is required (flag --brokers or COLLECTOR_KAFKA_BROKERS)")
	}
	if c.BatchSize < 1 || c.BatchSize > 10000 {
		bad("kafka.batch_size", c.BatchSize, "must be between 1 and 10000")
	}
	if c.BatchBytes < 1024 {
		bad("kafka.batch_bytes", c.BatchBytes, "must be >= 1024")
	}
	if _, err := compressionCodec(c.Compression); err != nil {
		bad("kafka.compression", c.Compression, err.Error())
	}
	if c.WriteTimeout <= 0 || c.DialTimeout <= 0 || c.PollInterval <= 0 || c.PruneInterval <= 0 {
		bad("kafka.write_timeout/dial_timeout/poll_interval/prune_interval", "", "must be > 0")
	}
	if c.Lease < 3*c.WriteTimeout {
		bad("kafka.lease", c.Lease, fmt.Sprintf("must be at least 3 × kafka.write_timeout (%s), so a batch always finishes within its lease", c.WriteTimeout))
	}
	if c.Retention < 0 {
		bad("kafka.outbox_retention", c.Retention, "must be >= 0")
	}
	if c.PruneBatch < 1 {
		bad("kafka.prune_batch", c.PruneBatch, "must be >= 1")
	}
	if c.Attempts < 1 {
		bad("kafka.retry.attempts", c.Attempts, "must be >= 1")
	}
	if c.BackoffMin <= 0 || c.BackoffMax < c.BackoffMin {
		bad("kafka.retry.backoff_max", c.BackoffMax, fmt.Sprintf("must be >= kafka.retry.backoff_min (%s) > 0", c.BackoffMin))
	}
	if c.Partitions < 1 || c.ReplicationFactor < 1 {
		bad("kafka.partitions/replication_factor", fmt.Sprintf("%d/%d", c.Partitions, c.ReplicationFactor), "must be >= 1")
	}
	return errors.Join(errs...)
}

func compressionCodec(name string) (kafka.Compression, error) {
	switch name {
	case "", "none":
		return 0, nil
	case "gzip":
		return kafka.Gzip, nil
	case "snappy":
		return kafka.Snappy, nil
	case "lz4":
		return kafka.Lz4, nil
	case "zstd":
		return kafka.Zstd, nil
	}
	return 0, errors.New("allowed: none, gzip, snappy, lz4, zstd")
}

// RelayConfigFrom builds a RelayConfig from the validated kafka.* keys, loading TLS files and
// preparing SASL. Errors name the key that points at the problem.
func RelayConfigFrom(k config.KafkaConfig) (RelayConfig, error) {
	rc := RelayConfig{
		Brokers:           k.Brokers,
		Topic:             k.Topic,
		ClientID:          k.ClientID,
		Source:            k.Source,
		BatchSize:         k.BatchSize,
		BatchBytes:        k.BatchBytes,
		Compression:       k.Compression,
		WriteTimeout:      k.WriteTimeout,
		DialTimeout:       k.DialTimeout,
		CreateTopic:       k.CreateTopic,
		Partitions:        k.Partitions,
		ReplicationFactor: k.ReplicationFactor,
		TopicConfig:       k.TopicConfig,
		Lease:             k.Lease,
		PollInterval:      k.PollInterval,
		Retention:         k.OutboxRetention,
		PruneInterval:     k.PruneInterval,
		PruneBatch:        k.PruneBatch,
		Attempts:          k.Retry.Attempts,
		BackoffMin:        k.Retry.BackoffMin,
		BackoffMax:        k.Retry.BackoffMax,
	}
	var err error
	if rc.TLS, err = tlsConfig(k.TLS); err != nil {
		return RelayConfig{}, err
	}
	if rc.SASL, err = saslMechanism(k.SASL); err != nil {
		return RelayConfig{}, err
	}
	return rc, nil
}

func tlsConfig(c config.KafkaTLSConfig) (*tls.Config, error) {
	if !c.Enabled {
		return nil, nil
	}
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		ServerName:         c.ServerName,
		InsecureSkipVerify: c.InsecureSkipVerify, //nolint:gosec // opt-in for test clusters, documented
	}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.ca_file: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kafka.tls.ca_file %s: no PEM certificate found", c.CAFile)
		}
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("kafka.tls.cert_file/key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func saslMechanism(c config.KafkaSASLConfig) (sasl.Mechanism, error) {
	switch c.Mechanism {
	case "":
		return nil, nil
	case "PLAIN":
		return plain.Mechanism{Username: c.Username, Password: c.Password.Reveal()}, nil
	case "SCRAM-SHA-256", "SCRAM-SHA-512":
		algo := scram.SHA256
		if c.Mechanism == "SCRAM-SHA-512" {
			algo = scram.SHA512
		}
		m, err := scram.Mechanism(algo, c.Username, c.Password.Reveal())
		if err != nil {
			// Not wrapped: the scram library quotes the password in its error.
			return nil, fmt.Errorf("kafka.sasl.username/kafka.sasl.password: not usable with %s (SASLprep rejected a character)", c.Mechanism)
		}
		return m, nil
	}
	return nil, fmt.Errorf("kafka.sasl.mechanism %q: allowed PLAIN, SCRAM-SHA-256, SCRAM-SHA-512", c.Mechanism)
}
