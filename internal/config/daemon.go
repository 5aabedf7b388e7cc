package config

import (
	"errors"
	"time"
)

// DaemonConfig configures `collector run`.
type DaemonConfig struct {
	HTTPAddr string `mapstructure:"http_addr"` // /metrics, /healthz, /readyz; "" = no server
	// MaxSleep caps the database-computed sleep between passes, so an item made due by someone
	// who sent no notification (a one-shot import behind PgBouncer) is still found in time.
	MaxSleep time.Duration `mapstructure:"max_sleep"`
	// Notify: LISTEN for tracked_items changes to wake early. Correctness never depends on it.
	Notify bool `mapstructure:"notify"`
	// ShutdownGrace: how long in-flight provider calls may finish after SIGTERM/SIGINT.
	ShutdownGrace time.Duration `mapstructure:"shutdown_grace"`
	// PackWait: with packing on (collect.pack_size > 1), the least time between the starts of
	// two collection passes. Items falling due meanwhile gather and share packed calls; without
	// it a steady daemon claims one or two items at a time and packs almost nothing. Items are
	// claimed up to this long before they fall due, never after. 0 = claim each item as soon as
	// it is due.
	PackWait time.Duration `mapstructure:"pack_wait"`

	Budget BudgetConfig `mapstructure:"budget"`
}

// BudgetConfig is the cluster-wide share of each API key's budget (internal/budget).
type BudgetConfig struct {
	Enabled  bool    `mapstructure:"enabled"`
	Headroom float64 `mapstructure:"headroom"` // fraction of the budget left unused as margin
	Adaptive bool    `mapstructure:"adaptive"` // learn the provider's real limit below the configured rate (AIMD)
	// SlowStart: with adaptive on and nothing learned yet for the key, start at a small share
	// of the configured rate and double while it is used, until the first rate-limit answer.
	SlowStart bool `mapstructure:"slow_start"`
	// Not keys (budget.Tuned fills the zero values with budget.*Default); tests set them.
	Heartbeat      time.Duration `mapstructure:"-"` // instance heartbeat and share refresh
	Cooldown       time.Duration `mapstructure:"-"` // shared cool-down when Retry-After is absent
	SlowStartShare float64       `mapstructure:"-"` // where a slow start begins, a share of the ceiling
}

var daemonDefaults = map[string]any{
	"daemon.http_addr":         ":9090",
	"daemon.max_sleep":         "30s",
	"daemon.notify":            true,
	"daemon.shutdown_grace":    "20s",
	"daemon.pack_wait":         "1s",
	"daemon.budget.enabled":    true,
	"daemon.budget.headroom":   0.03,
	"daemon.budget.adaptive":   true,
	"daemon.budget.slow_start": true,
}

func (c DaemonConfig) validate() error {
	var errs []error
	if c.HTTPAddr != "" {
		if err := listenAddr("daemon.http_addr", c.HTTPAddr); err != nil {
			errs = append(errs, err)
		}
	}
	durations := []struct {
		key      string
		v        time.Duration
		min, max time.Duration
	}{
		{"daemon.max_sleep", c.MaxSleep, 10 * time.Millisecond, time.Hour},
		{"daemon.shutdown_grace", c.ShutdownGrace, 0, 10 * time.Minute},
		{"daemon.pack_wait", c.PackWait, 0, 10 * time.Second},
	}
	for _, d := range durations {
		if d.v < d.min || d.v > d.max {
			errs = append(errs, invalid(d.key, d.v, "must be between "+d.min.String()+" and "+d.max.String()))
		}
	}
	if c.Budget.Headroom < 0 || c.Budget.Headroom >= 0.5 {
		errs = append(errs, invalid("daemon.budget.headroom", c.Budget.Headroom, "must be >= 0 and < 0.5"))
	}
	return errors.Join(errs...)
}
