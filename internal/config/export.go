package config

import (
	"errors"
	"slices"
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

func (c ExportConfig) validate() error {
	var errs []error
	if !slices.Contains(ExportFormats, c.Format) {
		errs = append(errs, invalid("export.format", c.Format, "allowed: parquet, csv"))
	}
	if c.Enabled && c.Dir == "" {
		errs = append(errs, invalid("export.dir", `""`, "required when export.enabled is true"))
	}
	return errors.Join(errs...)
}
