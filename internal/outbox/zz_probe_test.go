package outbox
import (
	"testing"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/segmentio/kafka-go"
)
func TestProbe(t *testing.T) { c, err := kfake.NewCluster(); if err != nil { t.Fatal(err) }; defer c.Close(); _ = kgo.SeedBrokers; _ = kafka.Writer{} }
