package outbox

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// RelayConfig is the kafka.* configuration (package config owns its defaults and rules) plus
// what only code sets.
type RelayConfig struct {
	config.KafkaConfig

	// Owner names this relay in outbox_relay_lanes (informational); default host:pid.
	Owner string

	// Dial, when set, opens the connections to the brokers instead of a net.Dialer with
	// DialTimeout (a proxy, or the benchmarks' simulated network distance).
	Dial func(ctx context.Context, network, address string) (net.Conn, error)

	// OnPublished, when set, hears the publish latency (seconds from the row's creation to its
	// mark, database clock) of every row marked published; the daemon feeds a histogram.
	OnPublished func(ages []float64)

	// OnError, when set, hears the reason of every failed attempt and rejected event (topic,
	// authorization, broker, database, panic, rejected); the daemon counts them.
	OnError func(reason string)

	// Test, when set, reports what the relay does so tests can wait for it.
	Test *TestSignals
}

// check validates the kafka.* values with package config's rules; an empty broker list is
// valid there (Kafka not configured) but not for a relay.
func (c *RelayConfig) check() error {
	if len(c.Brokers) == 0 {
		return errors.New("outbox relay: kafka.brokers is empty")
	}
	if c.Owner == "" {
		c.Owner = telemetry.Instance()
	}
	if c.Test == nil {
		c.Test = &TestSignals{} // every signal off
	}
	return c.Validate()
}

var codecs = map[string]kafka.Compression{
	"none": 0, "gzip": kafka.Gzip, "snappy": kafka.Snappy, "lz4": kafka.Lz4, "zstd": kafka.Zstd,
}

// newTransport is shared by the writer and the admin client, so both reuse connections. It
// loads the TLS files and prepares SASL; errors name the key behind the problem.
func newTransport(cfg RelayConfig) (*kafka.Transport, error) {
	tc, err := tlsConfig(cfg.TLS)
	if err != nil {
		return nil, err
	}
	mech, err := saslMechanism(cfg.SASL)
	if err != nil {
		return nil, err
	}
	dial := cfg.Dial
	if dial == nil {
		dial = (&net.Dialer{Timeout: cfg.DialTimeout}).DialContext
	}
	return &kafka.Transport{Dial: dial, DialTimeout: cfg.DialTimeout, ClientID: cfg.ClientID, TLS: tc, SASL: mech}, nil
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
	}
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
