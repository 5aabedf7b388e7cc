// Package kafkaconn reaches the Kafka cluster kafka.* describes (dialer, TLS, SASL, compression)
// and makes sure its topic exists.
package kafkaconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"

	"github.com/duecollector/duecollector/internal/config"
)

// DialTimeoutDefault bounds a connection attempt to a broker; a refused one fails at once anyway.
const DialTimeoutDefault = 5 * time.Second

// Dial opens a connection to a broker (a net.Dialer, a proxy, a simulated network distance).
type Dial func(ctx context.Context, network, address string) (net.Conn, error)

// Transport loads the TLS files and prepares SASL; errors name the key behind the problem.
// A nil dial uses a net.Dialer with DialTimeoutDefault.
func Transport(cfg config.KafkaConfig, dial Dial) (*kafka.Transport, error) {
	tc, err := tlsConfig(cfg.TLS)
	if err != nil {
		return nil, err
	}
	mech, err := saslMechanism(cfg.SASL)
	if err != nil {
		return nil, err
	}
	if dial == nil {
		dial = (&net.Dialer{Timeout: DialTimeoutDefault}).DialContext
	}
	// Metadata of the one topic, refreshed within MetadataTTL: kafka-go learns of a new
	// partition leader only at a refresh, and a relay --once gives up after a few seconds of
	// retries (the 6 s default often outlasted them through a routine leader election).
	return &kafka.Transport{Dial: dial, DialTimeout: DialTimeoutDefault, ClientID: cfg.ClientID, TLS: tc, SASL: mech,
		MetadataTTL: MetadataTTL, MetadataTopics: []string{cfg.Topic}}, nil
}

// MetadataTTL bounds how long the relay's view of the topic's leaders may be stale (kafka-go
// refreshes at a random moment within it). It is also the deadline of each metadata request,
// which a loaded or distant cluster must be able to answer within.
const MetadataTTL = 3 * time.Second

// Compression is kafka-go's codec for kafka.compression (config validates the name).
func Compression(name string) kafka.Compression {
	return map[string]kafka.Compression{"gzip": kafka.Gzip, "snappy": kafka.Snappy, "lz4": kafka.Lz4, "zstd": kafka.Zstd}[name]
}

// TopicError is a topic problem retrying cannot fix: missing and not to be created, or refused
// at creation (partitions, replication factor, topic config).
type TopicError struct{ error }

// EnsureTopic checks that kafka.topic exists and creates it with kafka.create_topic, saying
// whether it did. Errors other than TopicError are about reaching the cluster.
func EnsureTopic(ctx context.Context, cfg config.KafkaConfig, t *kafka.Transport) (created bool, err error) {
	ctx, cancel := context.WithTimeout(ctx, cfg.WriteTimeout)
	defer cancel()
	client := &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: cfg.WriteTimeout, Transport: t}
	brokers := strings.Join(cfg.Brokers, ",")
	md, err := client.Metadata(ctx, &kafka.MetadataRequest{Topics: []string{cfg.Topic}})
	if err != nil {
		return false, fmt.Errorf("read metadata of kafka topic %s from %s: %w", cfg.Topic, brokers, err)
	}
	var topicErr error = kafka.UnknownTopicOrPartition
	for _, t := range md.Topics {
		if t.Name == cfg.Topic {
			topicErr = t.Error
		}
	}
	switch {
	case topicErr == nil:
		return false, nil
	case !errors.Is(topicErr, kafka.UnknownTopicOrPartition):
		return false, fmt.Errorf("kafka topic %s: %w", cfg.Topic, topicErr)
	case !cfg.CreateTopic:
		return false, TopicError{fmt.Errorf("kafka topic %s does not exist on %s: create it, or set kafka.create_topic=true to let the relay create it", cfg.Topic, brokers)}
	}
	tc := kafka.TopicConfig{Topic: cfg.Topic, NumPartitions: cfg.Partitions, ReplicationFactor: cfg.ReplicationFactor}
	for k, v := range cfg.TopicConfig {
		tc.ConfigEntries = append(tc.ConfigEntries, kafka.ConfigEntry{ConfigName: k, ConfigValue: v})
	}
	res, err := client.CreateTopics(ctx, &kafka.CreateTopicsRequest{Topics: []kafka.TopicConfig{tc}})
	if err != nil {
		return false, fmt.Errorf("create kafka topic %s: %w", cfg.Topic, err)
	}
	if err := res.Errors[cfg.Topic]; err != nil && !errors.Is(err, kafka.TopicAlreadyExists) {
		if kerr, ok := errors.AsType[kafka.Error](err); ok && kerr.Temporary() {
			// A controller moving, a request timed out (the topic may yet be created): retried.
			return false, fmt.Errorf("create kafka topic %s: %w", cfg.Topic, err)
		}
		return false, TopicError{fmt.Errorf("create kafka topic %s (kafka.partitions=%d, kafka.replication_factor=%d): %w",
			cfg.Topic, cfg.Partitions, cfg.ReplicationFactor, err)}
	}
	return res.Errors[cfg.Topic] == nil, nil
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
