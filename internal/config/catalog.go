package config

import "errors"

// CatalogConfig configures import-items, seeding and popularity.
type CatalogConfig struct {
	Targets     string `mapstructure:"targets"`
	DefaultTier string `mapstructure:"default_tier"`
}

var catalogDefaults = map[string]any{
	"catalog.targets":      "configs/import-targets.yaml",
	"catalog.default_tier": "WARM_5M",
}

func (c CatalogConfig) validate() error {
	return errors.Join(tierKey("catalog.default_tier", c.DefaultTier))
}
