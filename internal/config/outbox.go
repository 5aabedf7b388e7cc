package config

// OutboxConfig says whether this deployment publishes snapshot events (internal/outbox).
type OutboxConfig struct {
	// Enabled writes each snapshot's event to the outbox in the snapshot's transaction, for a
	// relay to publish. A writer cannot know whether a relay runs (it may run on another host
	// with its own configuration), so only an explicit false writes no outbox rows.
	Enabled bool `mapstructure:"enabled"`
}

var outboxDefaults = map[string]any{
	"outbox.enabled": true,
}

// CheckRelay refuses to run a relay where the deployment said nothing publishes: it would
// find no new events, and the operator meant one of the two settings to be different.
func (c OutboxConfig) CheckRelay() error {
	if c.Enabled {
		return nil
	}
	return invalid("outbox.enabled", false, "must be true where a relay runs (relay-outbox, or collector run with kafka.brokers set): false says nothing publishes, so no outbox rows are written")
}

// validate refuses kafka.brokers beside outbox.enabled=false: the daemon would start a relay.
func (c OutboxConfig) validate(k KafkaConfig) error {
	if len(k.Brokers) == 0 {
		return nil
	}
	return c.CheckRelay()
}
