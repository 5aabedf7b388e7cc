package config

import (
	"errors"
	"time"
)

// RetentionConfig bounds the collected history (internal/retention). A zero age keeps that
// table's rows for ever, the default: the history is the product's data, and how much of it
// to keep is the operator's call.
type RetentionConfig struct {
	// Snapshots, Sales, Interest: rows older than this are deleted (0 = kept).
	Snapshots time.Duration `mapstructure:"snapshots"`
	Sales     time.Duration `mapstructure:"sales"`
	Interest  time.Duration `mapstructure:"interest"`
	// Interval is how often the daemon prunes; Batch how many rows one statement deletes.
	Interval time.Duration `mapstructure:"interval"`
	Batch    int           `mapstructure:"batch"`
}

var retentionDefaults = map[string]any{
	"retention.snapshots": "0s",
	"retention.sales":     "0s",
	"retention.interest":  "0s",
	"retention.interval":  "10m",
	"retention.batch":     5000,
}

// Enabled reports whether any table is pruned.
func (c RetentionConfig) Enabled() bool { return c.Snapshots > 0 || c.Sales > 0 || c.Interest > 0 }

// validate checks the ages against what popularity reads: recent snapshots and sales
// (catalog.signal_window), and the last sale and interest event of an item, which decide when
// it goes dormant (catalog.dormant_after).
func (c RetentionConfig) validate(cat CatalogConfig) error {
	var errs []error
	const most = 10 * 365 * 24 * time.Hour
	for _, d := range []struct {
		key   string
		v     time.Duration
		least time.Duration
		why   string
	}{
		{"retention.snapshots", c.Snapshots, cat.SignalWindow, "catalog.signal_window"},
		{"retention.sales", c.Sales, max(cat.SignalWindow, cat.DormantAfter), "catalog.signal_window and catalog.dormant_after"},
		{"retention.interest", c.Interest, cat.DormantAfter, "catalog.dormant_after"},
	} {
		if d.v != 0 && (d.v < d.least || d.v > most) {
			errs = append(errs, invalid(d.key, d.v, "must be 0 (keep) or between "+d.least.String()+" ("+d.why+", which popularity reads) and 87600h"))
		}
	}
	if c.Interval < time.Minute || c.Interval > 24*time.Hour {
		errs = append(errs, invalid("retention.interval", c.Interval, "must be between 1m and 24h"))
	}
	if c.Batch < 100 || c.Batch > 100000 {
		errs = append(errs, invalid("retention.batch", c.Batch, "must be between 100 and 100000"))
	}
	return errors.Join(errs...)
}
