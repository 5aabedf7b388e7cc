package config

import (
	"errors"
	"time"
)

// RetentionConfig bounds the collected history. A zero age keeps that table's rows for ever,
// the default: the history is the product's data, and how much of it to keep is the
// operator's call.
type RetentionConfig struct {
	// Snapshots, Sales: partitions whose whole range is older than this are dropped (0 = kept;
	// internal/history).
	Snapshots time.Duration `mapstructure:"snapshots"`
	Sales     time.Duration `mapstructure:"sales"`
	// Interest, CandlesHourly, CandlesDaily: rows older than this are deleted in batches
	// (0 = kept; internal/retention). Candles are small: one row per item and hour or day.
	Interest      time.Duration `mapstructure:"interest"`
	CandlesHourly time.Duration `mapstructure:"candles_hourly"`
	CandlesDaily  time.Duration `mapstructure:"candles_daily"`
	// OutboxUnpublished: outbox events still pending or failed this long after they were
	// written are dropped, as Kafka's retention.ms drops unconsumed messages (internal/retention).
	// Off (0) by default, like every age here: a relay down or elsewhere must not cost
	// consumers their events unless the operator chose that; the outbox-age alert is the safety.
	// Their snapshots stay in auction_snapshots either way.
	OutboxUnpublished time.Duration `mapstructure:"outbox_unpublished"`
}

var retentionDefaults = map[string]any{
	"retention.snapshots":          "0s",
	"retention.sales":              "0s",
	"retention.interest":           "0s",
	"retention.candles_hourly":     "0s",
	"retention.candles_daily":      "0s",
	"retention.outbox_unpublished": "0s",
}

// validate checks the ages against what popularity reads: recent snapshots and sales
// (catalog.signal_window), and the last sale and interest event of an item, which decide when
// it goes dormant (catalog.dormant_after).
func (c RetentionConfig) validate(cat CatalogConfig, h HistoryConfig) error {
	var errs []error
	const most = 10 * 365 * 24 * time.Hour
	for _, d := range []struct {
		key   string
		v     time.Duration
		least time.Duration
		why   string
	}{
		// An unchanged item's latest snapshot is up to a heartbeat old: a shorter retention could
		// drop the row its series still holds.
		{"retention.snapshots", c.Snapshots, max(cat.SignalWindow, h.PartitionInterval, h.Heartbeat), "catalog.signal_window, which popularity reads, history.partition_interval and history.heartbeat"},
		{"retention.sales", c.Sales, max(cat.SignalWindow, cat.DormantAfter, h.PartitionInterval), "catalog.signal_window and catalog.dormant_after, which popularity reads, and history.partition_interval"},
		{"retention.interest", c.Interest, cat.DormantAfter, "catalog.dormant_after, which popularity reads"},
		{"retention.candles_hourly", c.CandlesHourly, time.Hour, "one hour"},
		{"retention.candles_daily", c.CandlesDaily, 24 * time.Hour, "one day"},
		{"retention.outbox_unpublished", c.OutboxUnpublished, time.Hour, "one hour: a relay down for a moment must not lose events"},
	} {
		if d.v != 0 && (d.v < d.least || d.v > most) {
			errs = append(errs, invalid(d.key, d.v, "must be 0 (keep) or between "+d.least.String()+" ("+d.why+") and 87600h"))
		}
	}
	return errors.Join(errs...)
}
