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
	// GaugeInterval: how often the SQL gauges (due/overdue by tier, outbox backlog) refresh.
	GaugeInterval time.Duration `mapstructure:"gauge_interval"`
	// KeyRecheck: while the provider refuses the market key, one call this often tells
	// whether it works again.
	KeyRecheck time.Duration `mapstructure:"key_recheck"`
	// PackWait: with packing on (collect.pack_size > 1), the least time between the starts of
	// two collection passes. Items falling due meanwhile gather and share packed calls; without
	// it a steady daemon claims one or two items at a time and packs almost nothing. An item
	// waits at most this long past its due time. 0 = claim each item as soon as it is due.
	PackWait time.Duration `mapstructure:"pack_wait"`
	// ClaimHorizon: how much of this process's budget one claim takes, and how little provider
	// work still queued lets the next claim in. When more is due than the budget serves, an
	// item falling due (HOT first) is claimed within about this long instead of behind a batch
	// that takes seconds to drain; shorter means more claim statements a second.
	ClaimHorizon time.Duration `mapstructure:"claim_horizon"`

	Health HealthConfig `mapstructure:"health"`
	Budget BudgetConfig `mapstructure:"budget"`
}

// HealthConfig drives the automatic provider status (internal/health).
type HealthConfig struct {
	Window          time.Duration `mapstructure:"window"`        // sliding window of outcomes
	ErrorRatio      float64       `mapstructure:"error_ratio"`   // transient share that means DEGRADED
	MinSamples      int           `mapstructure:"min_samples"`   // fewer outcomes decide nothing
	ProbeBackoff    time.Duration `mapstructure:"probe_backoff"` // first probe after this, doubled per failure
	ProbeBackoffMax time.Duration `mapstructure:"probe_backoff_max"`
	RecoverFactor   float64       `mapstructure:"recover_factor"` // rate fraction at the start of RECOVERING
	RecoverFor      time.Duration `mapstructure:"recover_for"`    // RECOVERING's ramp-up to the full rate
	// RecoverSuccessRatio: after RecoverFor, this share of the last Window's outcomes must
	// have succeeded for RECOVERING → HEALTHY.
	RecoverSuccessRatio float64       `mapstructure:"recover_success_ratio"`
	CheckInterval       time.Duration `mapstructure:"check_interval"` // status re-read / probe check
}

// BudgetConfig is the cluster-wide share of each API key's budget (internal/budget).
type BudgetConfig struct {
	Enabled   bool          `mapstructure:"enabled"`
	Heartbeat time.Duration `mapstructure:"heartbeat"` // instance heartbeat and share refresh
	Headroom  float64       `mapstructure:"headroom"`  // fraction of the budget left unused as margin
	Cooldown  time.Duration `mapstructure:"cooldown"`  // shared cool-down when Retry-After is absent
	Adaptive  bool          `mapstructure:"adaptive"`  // learn the provider's real limit below the configured rate (AIMD)
	// SlowStart: with adaptive on and nothing learned yet for the key, start at SlowStartShare
	// of the configured rate and double while it is used, until the first rate-limit answer.
	SlowStart      bool    `mapstructure:"slow_start"`
	SlowStartShare float64 `mapstructure:"slow_start_share"`
}

var daemonDefaults = map[string]any{
	"daemon.http_addr":                    ":9090",
	"daemon.max_sleep":                    "30s",
	"daemon.notify":                       true,
	"daemon.shutdown_grace":               "20s",
	"daemon.gauge_interval":               "15s",
	"daemon.key_recheck":                  "5m",
	"daemon.pack_wait":                    "1s",
	"daemon.claim_horizon":                "250ms",
	"daemon.health.window":                "30s",
	"daemon.health.error_ratio":           0.5,
	"daemon.health.min_samples":           20,
	"daemon.health.probe_backoff":         "5s",
	"daemon.health.probe_backoff_max":     "5m",
	"daemon.health.recover_factor":        0.1,
	"daemon.health.recover_for":           "1m",
	"daemon.health.recover_success_ratio": 0.95,
	"daemon.health.check_interval":        "1s",
	"daemon.budget.enabled":               true,
	"daemon.budget.heartbeat":             "1s",
	"daemon.budget.headroom":              0.03,
	"daemon.budget.cooldown":              "1s",
	"daemon.budget.adaptive":              true,
	"daemon.budget.slow_start":            true,
	"daemon.budget.slow_start_share":      0.01,
}

func (c DaemonConfig) validate() error {
	var errs []error
	durations := []struct {
		key      string
		v        time.Duration
		min, max time.Duration
	}{
		{"daemon.max_sleep", c.MaxSleep, 10 * time.Millisecond, time.Hour},
		{"daemon.shutdown_grace", c.ShutdownGrace, 0, 10 * time.Minute},
		{"daemon.gauge_interval", c.GaugeInterval, 100 * time.Millisecond, time.Hour},
		{"daemon.key_recheck", c.KeyRecheck, 100 * time.Millisecond, 24 * time.Hour},
		{"daemon.pack_wait", c.PackWait, 0, 10 * time.Second},
		{"daemon.claim_horizon", c.ClaimHorizon, 10 * time.Millisecond, 10 * time.Second},
		{"daemon.health.window", c.Health.Window, time.Second, time.Hour},
		{"daemon.health.probe_backoff", c.Health.ProbeBackoff, 10 * time.Millisecond, time.Hour},
		{"daemon.health.probe_backoff_max", c.Health.ProbeBackoffMax, c.Health.ProbeBackoff, 24 * time.Hour},
		{"daemon.health.check_interval", c.Health.CheckInterval, 10 * time.Millisecond, time.Minute},
		{"daemon.health.recover_for", c.Health.RecoverFor, 10 * time.Millisecond, time.Hour},
		{"daemon.budget.heartbeat", c.Budget.Heartbeat, 50 * time.Millisecond, time.Minute},
		{"daemon.budget.cooldown", c.Budget.Cooldown, 10 * time.Millisecond, time.Hour},
	}
	for _, d := range durations {
		if d.v < d.min || d.v > d.max {
			errs = append(errs, invalid(d.key, d.v, "must be between "+d.min.String()+" and "+d.max.String()))
		}
	}
	if c.Health.ErrorRatio <= 0 || c.Health.ErrorRatio > 1 {
		errs = append(errs, invalid("daemon.health.error_ratio", c.Health.ErrorRatio, "must be > 0 and <= 1"))
	}
	if c.Health.MinSamples < 1 {
		errs = append(errs, invalid("daemon.health.min_samples", c.Health.MinSamples, "must be >= 1"))
	}
	if c.Health.RecoverFactor < 0.01 || c.Health.RecoverFactor > 1 {
		errs = append(errs, invalid("daemon.health.recover_factor", c.Health.RecoverFactor, "must be between 0.01 and 1"))
	}
	if c.Health.RecoverSuccessRatio <= 0 || c.Health.RecoverSuccessRatio > 1 {
		errs = append(errs, invalid("daemon.health.recover_success_ratio", c.Health.RecoverSuccessRatio, "must be > 0 and <= 1"))
	}
	if c.Budget.Headroom < 0 || c.Budget.Headroom >= 0.5 {
		errs = append(errs, invalid("daemon.budget.headroom", c.Budget.Headroom, "must be >= 0 and < 0.5"))
	}
	if !(c.Budget.SlowStartShare > 0 && c.Budget.SlowStartShare <= 1) {
		errs = append(errs, invalid("daemon.budget.slow_start_share", c.Budget.SlowStartShare, "must be > 0 and <= 1"))
	}
	return errors.Join(errs...)
}
