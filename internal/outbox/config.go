package outbox

import (
	"errors"
	"fmt"
	"time"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/kafkaconn"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// RelayConfig is kafka.* (package config owns its defaults and rules) plus what only code sets.
type RelayConfig struct {
	config.KafkaConfig

	Owner string // names this relay in outbox_relay_lanes; default telemetry.Instance()
	// DirectURL is database.direct_url: LISTEN's own session when the pool is behind a
	// transaction-pooling PgBouncer. Without it such a pool has no session to LISTEN on, and a
	// following relay polls (PollIntervalDefault).
	DirectURL   string
	Dial        kafkaconn.Dial       // opens broker connections (a proxy, the benchmarks' network distance)
	OnPublished func(ages []float64) // per batch, each published row's age at its mark (database clock)
	OnError     func(reason string)  // each failed attempt's reason (classify) and "rejected"
	// OnHealth hears the relay stop on an error retrying cannot fix (false) and, run again,
	// get past the topic check (true): what Health says from then on.
	OnHealth func(up bool)
	// WriteHealth, when set, hears the database's refusals of the relay's reads and writes
	// (leases and marks), so a relay alone on a daemon also tells /readyz.
	WriteHealth *store.WriteHealth
	// RetryAttempts is how many failed attempts a pass (--once) makes before it gives up; 0 =
	// RetryAttemptsDefault. Follow mode retries for ever, handing its lanes back to the other
	// relays after a lease (kafka.lease) of failures.
	RetryAttempts int
	// RetryBackoffMin is the first back-off after a failure, doubling up to kafka.retry.backoff_max;
	// 0 = RetryBackoffMinDefault (or kafka.retry.backoff_max when that is smaller).
	RetryBackoffMin time.Duration
	Test            *TestSignals
}

// Defaults no operator needs to turn; tests set RelayConfig's fields instead.
const (
	RetryAttemptsDefault   = 5
	RetryBackoffMinDefault = 200 * time.Millisecond
	// PollIntervalDefault is how often a following relay looks for rows no notification
	// announced (behind a transaction-pooling PgBouncer without database.direct_url).
	PollIntervalDefault = time.Second
)

// check: no brokers means no Kafka for package config, but a relay needs them.
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
	if c.OnPublished == nil {
		c.OnPublished = func([]float64) {}
	}
	if c.OnError == nil {
		c.OnError = func(string) {}
	}
	if c.OnHealth == nil {
		c.OnHealth = func(bool) {}
	}
	if c.RetryAttempts < 0 || c.RetryBackoffMin < 0 {
		return fmt.Errorf("outbox relay: retry attempts %d and back-off %s must be >= 0", c.RetryAttempts, c.RetryBackoffMin)
	}
	if c.RetryAttempts == 0 {
		c.RetryAttempts = RetryAttemptsDefault
	}
	if c.PollInterval <= 0 {
		c.PollInterval = PollIntervalDefault
	}
	if c.RetryBackoffMin == 0 {
		c.RetryBackoffMin = min(RetryBackoffMinDefault, c.Retry.BackoffMax)
	}
	return c.Validate()
}
