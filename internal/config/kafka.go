package config

import "errors"

// KafkaConfig configures relay-outbox. Empty brokers = Kafka not configured.
type KafkaConfig struct {
	Brokers []string `mapstructure:"brokers"`
	Topic   string   `mapstructure:"topic"`
}

var kafkaDefaults = map[string]any{
	"kafka.brokers": []string{},
	"kafka.topic":   "market.auction-snapshots.v1",
}

func (c KafkaConfig) validate() error {
	var errs []error
	if c.Topic == "" {
		errs = append(errs, invalid("kafka.topic", `""`, "required"))
	}
	return errors.Join(errs...)
}
