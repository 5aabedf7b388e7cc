package config

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// ExportConfig turns on the daemon's daily exports (internal/export): after each UTC day
// settles, its snapshots, sales and candles are written to Dir/YYYY-MM-DD.
type ExportConfig struct {
	Enabled bool   `mapstructure:"enabled"`
	Dir     string `mapstructure:"dir"`
	// Format is parquet or csv.
	Format string `mapstructure:"format"`
}

// ExportFormats are the values export.format allows (internal/export writes them).
var ExportFormats = []string{"parquet", "csv"}

var exportDefaults = map[string]any{
	"export.enabled": false,
	"export.dir":     "exports",
	"export.format":  "parquet",
}

// ExportCatchUpDays is how many past days the daemon's exporter looks at (export.CatchUpDaysDefault).
const ExportCatchUpDays = 7

// ExportReach is how old the oldest row the daemon's exporter may still have to write can be:
// the first of the oldest day it looks at, at the end of a day plus the hour a day takes to
// settle (export.SettleDefault).
const ExportReach = (ExportCatchUpDays+1)*24*time.Hour + time.Hour

func (c ExportConfig) validate(r RetentionConfig) error {
	var errs []error
	if c.Enabled {
		for _, a := range []struct {
			key string
			age time.Duration
		}{
			{"retention.snapshots", r.Snapshots}, {"retention.sales", r.Sales},
			{"retention.candles_hourly", r.CandlesHourly}, {"retention.candles_daily", r.CandlesDaily},
		} {
			if a.age != 0 && a.age < ExportReach {
				errs = append(errs, invalid(a.key, a.age, fmt.Sprintf("must be 0 (keep) or at least %s while export.enabled is true: the exporter writes a day up to %d days late (a daemon catching up), and retention would have deleted rows of it first",
					ExportReach, ExportCatchUpDays)))
			}
		}
	}
	if !slices.Contains(ExportFormats, c.Format) {
		errs = append(errs, invalid("export.format", c.Format, "allowed: parquet, csv"))
	}
	if c.Enabled && c.Dir == "" {
		errs = append(errs, invalid("export.dir", `""`, "required when export.enabled is true"))
	}
	return errors.Join(errs...)
}
