package config

import (
	"errors"
	"time"
)

// HistoryConfig decides what a collection stores and publishes, and how the history tables
// are partitioned (internal/history).
type HistoryConfig struct {
	// Mode "changes" writes a snapshot and an event only when the item's market changed since
	// the last snapshot written for it (or the heartbeat is due); "every" writes one per
	// collection.
	Mode string `mapstructure:"mode"`
	// Heartbeat writes a snapshot anyway when the item's last one is older than this, so a
	// reader never has to look back further than this for an item's state.
	Heartbeat time.Duration `mapstructure:"heartbeat"`
	// PartitionInterval is the time range of one partition of auction_snapshots and
	// auction_sales; retention drops whole partitions, so it is also retention's granularity.
	PartitionInterval time.Duration `mapstructure:"partition_interval"`
	// PartitionAhead is how far past now partitions exist; the daemon keeps it so (every
	// partition.KeepIntervalDefault), `collector partitions` from cron.
	PartitionAhead time.Duration `mapstructure:"partition_ahead"`
}

// History modes.
const (
	HistoryChanges = "changes"
	HistoryEvery   = "every"
)

var historyDefaults = map[string]any{
	"history.mode":               HistoryChanges,
	"history.heartbeat":          "1h",
	"history.partition_interval": "24h",
	"history.partition_ahead":    "168h",
}

func (c HistoryConfig) validate() error {
	var errs []error
	if c.Mode != HistoryChanges && c.Mode != HistoryEvery {
		errs = append(errs, invalid("history.mode", c.Mode, "allowed changes, every"))
	}
	if c.Heartbeat < time.Minute || c.Heartbeat > 7*24*time.Hour {
		errs = append(errs, invalid("history.heartbeat", c.Heartbeat, "must be between 1m and 168h"))
	}
	// Bounds stay aligned to UTC midnight only when an interval divides a day or is whole days.
	day := 24 * time.Hour
	iv := c.PartitionInterval
	if iv < time.Hour || iv > 31*day || iv%time.Hour != 0 || (iv < day && day%iv != 0) || (iv > day && iv%day != 0) {
		errs = append(errs, invalid("history.partition_interval", iv, "must be whole hours dividing a day (1h, 2h, 3h, 4h, 6h, 8h, 12h) or whole days up to 744h"))
	}
	if c.PartitionAhead < iv || c.PartitionAhead > 366*day {
		errs = append(errs, invalid("history.partition_ahead", c.PartitionAhead, "must be at least history.partition_interval and at most 8784h"))
	}
	return errors.Join(errs...)
}
