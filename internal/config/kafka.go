package config

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"
)

// KafkaConfig configures relay-outbox (and the daemon's relay loop). Empty brokers = Kafka not
// configured; the relay refuses to start without them, everything else still works.
type KafkaConfig struct {
	Brokers  []string `mapstructure:"brokers"`
	Topic    string   `mapstructure:"topic"`
	ClientID string   `mapstructure:"client_id"`
	// Source is the CloudEvents ce_source header of every event.
	Source string `mapstructure:"source"`

	// BatchSize is the number of outbox rows read, published and marked per round trip;
	// BatchBytes caps the bytes of one produce batch (keep it <= the broker's message.max.bytes).
	BatchSize    int           `mapstructure:"batch_size"`
	BatchBytes   int64         `mapstructure:"batch_bytes"`
	Compression  string        `mapstructure:"compression"`
	WriteTimeout time.Duration `mapstructure:"write_timeout"`

	// Topic creation when it is missing; otherwise a missing topic is an error naming it.
	CreateTopic       bool              `mapstructure:"create_topic"`
	Partitions        int               `mapstructure:"partitions"`
	ReplicationFactor int               `mapstructure:"replication_factor"`
	TopicConfig       map[string]string `mapstructure:"topic_config"` // e.g. retention.ms, only at creation

	// Lease is how long a relay owns its outbox lanes without renewing them; a relay that
	// dies stops renewing and another one takes over after at most this long.
	Lease time.Duration `mapstructure:"lease"`
	// PollInterval is follow mode's look for new rows when no notification came; not a key
	// (outbox.PollIntervalDefault fills 0), tests set it.
	PollInterval time.Duration `mapstructure:"-"`

	// OutboxRetention: published outbox rows older than this are deleted (internal/retention).
	OutboxRetention time.Duration `mapstructure:"outbox_retention"`

	Retry KafkaRetryConfig `mapstructure:"retry"`
	TLS   KafkaTLSConfig   `mapstructure:"tls"`
	SASL  KafkaSASLConfig  `mapstructure:"sasl"`
}

// KafkaRetryConfig: follow mode retries a failing broker forever, backing off up to
// BackoffMax; --once gives up after outbox.RetryAttemptsDefault tries and exits non-zero.
type KafkaRetryConfig struct {
	BackoffMax time.Duration `mapstructure:"backoff_max"`
}

// KafkaTLSConfig: Enabled with no files uses the system roots (typical for managed clusters).
type KafkaTLSConfig struct {
	Enabled            bool   `mapstructure:"enabled"`
	CAFile             string `mapstructure:"ca_file"`
	CertFile           string `mapstructure:"cert_file"`
	KeyFile            string `mapstructure:"key_file"`
	ServerName         string `mapstructure:"server_name"`
	InsecureSkipVerify bool   `mapstructure:"insecure_skip_verify"`
}

// KafkaSASLConfig: the password is a Secret so it never prints; set it through
// COLLECTOR_KAFKA_SASL_PASSWORD rather than a committed file.
type KafkaSASLConfig struct {
	Mechanism string `mapstructure:"mechanism"`
	Username  string `mapstructure:"username"`
	Password  Secret `mapstructure:"password"`
}

// SASL mechanisms the relay supports.
var kafkaSASLMechanisms = []string{"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}

// Compression codecs the relay supports.
var kafkaCompressions = []string{"none", "gzip", "snappy", "lz4", "zstd"}

var kafkaDefaults = map[string]any{
	"kafka.brokers":                  []string{},
	"kafka.topic":                    "market.auction-snapshots.v1",
	"kafka.client_id":                "duecollector",
	"kafka.source":                   "duecollector/neople",
	"kafka.batch_size":               500,
	"kafka.batch_bytes":              1 << 20,
	"kafka.compression":              "none",
	"kafka.write_timeout":            "10s",
	"kafka.create_topic":             false,
	"kafka.partitions":               12,
	"kafka.replication_factor":       3,
	"kafka.topic_config":             map[string]string{},
	"kafka.lease":                    "30s",
	"kafka.outbox_retention":         "168h",
	"kafka.retry.backoff_max":        "30s",
	"kafka.tls.enabled":              false,
	"kafka.tls.ca_file":              "",
	"kafka.tls.cert_file":            "",
	"kafka.tls.key_file":             "",
	"kafka.tls.server_name":          "",
	"kafka.tls.insecure_skip_verify": false,
	"kafka.sasl.mechanism":           "",
	"kafka.sasl.username":            "",
	"kafka.sasl.password":            "",
}

var topicName = regexp.MustCompile(`^[a-zA-Z0-9._-]{1,249}$`)

// Validate checks every kafka.* value, including how they bound each other; the relay needs
// nothing else checked.
func (c KafkaConfig) Validate() error {
	var errs []error
	for _, b := range c.Brokers {
		if host, port, err := net.SplitHostPort(b); err != nil || host == "" || !validPort(port, 1) {
			errs = append(errs, invalid("kafka.brokers", c.Brokers, fmt.Sprintf("%q must be host:port, the port a number from 1 to 65535 (comma-separated in COLLECTOR_KAFKA_BROKERS)", b)))
		}
	}
	switch {
	case c.Topic == "":
		errs = append(errs, invalid("kafka.topic", `""`, "required"))
	case !topicName.MatchString(c.Topic) || c.Topic == "." || c.Topic == "..":
		// Kafka's own rule: the relay would otherwise be told the topic does not exist, and
		// say "create it", which no broker allows.
		errs = append(errs, invalid("kafka.topic", fmt.Sprintf("%q", c.Topic), "a Kafka topic name: up to 249 of a-z, A-Z, 0-9, '.', '_' and '-'"))
	}
	if c.Source == "" {
		errs = append(errs, invalid("kafka.source", `""`, "required (the CloudEvents ce_source header)"))
	}
	if c.BatchSize < 1 || c.BatchSize > 10000 {
		errs = append(errs, invalid("kafka.batch_size", c.BatchSize, "must be between 1 and 10000"))
	}
	if c.BatchBytes < 1024 || c.BatchBytes > 256<<20 {
		errs = append(errs, invalid("kafka.batch_bytes", c.BatchBytes, "must be between 1024 and 268435456"))
	}
	if !slices.Contains(kafkaCompressions, c.Compression) {
		errs = append(errs, invalid("kafka.compression", c.Compression, "allowed: "+strings.Join(kafkaCompressions, ", ")))
	}
	errs = append(errs,
		kafkaDuration("kafka.write_timeout", c.WriteTimeout, 100*time.Millisecond, 5*time.Minute),
		kafkaDuration("kafka.lease", c.Lease, time.Second, time.Hour),
		kafkaDuration("kafka.outbox_retention", c.OutboxRetention, time.Minute, 10*365*24*time.Hour),
		kafkaDuration("kafka.retry.backoff_max", c.Retry.BackoffMax, 10*time.Millisecond, time.Hour),
	)
	if c.Lease < 3*c.WriteTimeout {
		errs = append(errs, invalid("kafka.lease", c.Lease, fmt.Sprintf("must be at least 3 × kafka.write_timeout (%s), so a produce call always ends within its lease", c.WriteTimeout)))
	}
	if c.Partitions < 1 || c.Partitions > 10000 {
		errs = append(errs, invalid("kafka.partitions", c.Partitions, "must be between 1 and 10000"))
	}
	if c.ReplicationFactor < 1 || c.ReplicationFactor > 100 {
		errs = append(errs, invalid("kafka.replication_factor", c.ReplicationFactor, "must be between 1 and 100"))
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		errs = append(errs, invalid("kafka.tls.cert_file", c.TLS.CertFile, "kafka.tls.cert_file and kafka.tls.key_file go together"))
	}
	if !c.TLS.Enabled && (c.TLS.CAFile != "" || c.TLS.CertFile != "" || c.TLS.InsecureSkipVerify) {
		errs = append(errs, invalid("kafka.tls.enabled", false, "must be true when other kafka.tls.* keys are set"))
	}
	switch {
	case c.SASL.Mechanism == "":
		if c.SASL.Username != "" || !c.SASL.Password.Empty() {
			errs = append(errs, invalid("kafka.sasl.mechanism", `""`, "required when kafka.sasl.username or password is set; allowed: "+strings.Join(kafkaSASLMechanisms, ", ")))
		}
	case !slices.Contains(kafkaSASLMechanisms, c.SASL.Mechanism):
		errs = append(errs, invalid("kafka.sasl.mechanism", c.SASL.Mechanism, "allowed: "+strings.Join(kafkaSASLMechanisms, ", ")))
	case c.SASL.Username == "" || c.SASL.Password.Empty():
		errs = append(errs, invalid("kafka.sasl.username", c.SASL.Username, "username and password (COLLECTOR_KAFKA_SASL_PASSWORD) are required with kafka.sasl.mechanism"))
	}
	return errors.Join(errs...)
}

func kafkaDuration(key string, d, lo, hi time.Duration) error {
	if d < lo || d > hi {
		return invalid(key, d, fmt.Sprintf("must be between %s and %s", lo, hi))
	}
	return nil
}
