package kafkaconn

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/duecollector/duecollector/internal/config"
)

// The transport takes the kafka.* keys as loaded; the files and credentials it loads name
// their key without repeating the password.
func TestTransportFromKafkaKeys(t *testing.T) {
	t.Setenv("COLLECTOR_KAFKA_BROKERS", "k1:9092,k2:9093")
	t.Setenv("COLLECTOR_KAFKA_SASL_MECHANISM", "SCRAM-SHA-512")
	t.Setenv("COLLECTOR_KAFKA_SASL_USERNAME", "relay")
	t.Setenv("COLLECTOR_KAFKA_SASL_PASSWORD", "s3cret-pw")
	cfg, err := config.Load(config.Options{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := Transport(cfg.Kafka, nil)
	if err != nil {
		t.Fatalf("defaults must be valid: %v", err)
	}
	if m := tr.SASL; m == nil || m.Name() != "SCRAM-SHA-512" || tr.TLS != nil || tr.Dial == nil {
		t.Fatalf("transport SASL %v TLS %v, want SCRAM-SHA-512 over plaintext", m, tr.TLS)
	}

	k := cfg.Kafka
	k.SASL.Password = config.Secret("bad\u0007pw")
	if _, err := Transport(k, nil); err == nil || strings.Contains(err.Error(), "bad\u0007pw") || !strings.Contains(err.Error(), "kafka.sasl") {
		t.Fatalf("err = %v, want a kafka.sasl error without the password", err)
	}
	k = cfg.Kafka
	k.TLS.Enabled, k.TLS.CAFile = true, "/nonexistent/ca.pem"
	if _, err := Transport(k, nil); err == nil || !strings.Contains(err.Error(), "kafka.tls.ca_file") {
		t.Fatalf("err = %v, want kafka.tls.ca_file named", err)
	}
	if Compression("none") != 0 || Compression("zstd") != kafka.Zstd {
		t.Fatal("kafka.compression none must send uncompressed batches, zstd zstd ones")
	}
}

// A missing topic is a TopicError naming it and kafka.create_topic, unless it may be created:
// then it is, with the configured partitions and topic config, once.
func TestEnsureTopic(t *testing.T) {
	broker, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer broker.Close()
	k := config.Default().Kafka
	k.Brokers, k.Topic = broker.ListenAddrs(), "not-there"
	tr, err := Transport(k, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	ctx := context.Background()
	_, err = EnsureTopic(ctx, k, tr)
	if !errors.As(err, new(TopicError)) || !strings.Contains(err.Error(), "kafka topic not-there does not exist") || !strings.Contains(err.Error(), "kafka.create_topic") {
		t.Fatalf("err = %v, want a TopicError naming the topic and kafka.create_topic", err)
	}
	k.CreateTopic, k.Partitions, k.ReplicationFactor = true, 3, 1
	k.TopicConfig = map[string]string{"retention.ms": "86400000"}
	for i, want := range []bool{true, false} {
		if created, err := EnsureTopic(ctx, k, tr); err != nil || created != want {
			t.Fatalf("call %d: created=%v %v, want %v", i+1, created, err, want)
		}
	}
	if info := broker.TopicInfo("not-there"); info == nil || len(broker.PartitionInfos("not-there")) != 3 || info.Configs["retention.ms"] == nil || *info.Configs["retention.ms"] != "86400000" {
		t.Fatalf("created topic: %+v", info)
	}
}
