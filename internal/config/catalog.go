package config

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/duecollector/duecollector/internal/tiers"
)

// CatalogConfig configures import-items, seeding and popularity (docs/catalog.md).
type CatalogConfig struct {
	// Targets is the YAML file import-items reads (configs/import-targets.yaml).
	Targets string `mapstructure:"targets"`
	// DefaultTier is the starting tier of an imported item whose target names none.
	DefaultTier string `mapstructure:"default_tier"`

	// RecalcInterval is how often the daemon runs recalculate-popularity.
	RecalcInterval time.Duration `mapstructure:"recalc_interval"`
	// SignalWindow is how far back sales and listing churn count toward the score.
	SignalWindow time.Duration `mapstructure:"signal_window"`
	// DormantAfter: an item with no sale and no interest event for this long goes DORMANT.
	DormantAfter time.Duration `mapstructure:"dormant_after"`
	// DemotionHold: an item is not demoted again within this long of its last tier change,
	// so a reactivated item is collected for a while before its score can cool it down.
	DemotionHold time.Duration `mapstructure:"demotion_hold"`
	// InterestHalfLife decays interest events: one that is a half-life old counts half.
	InterestHalfLife time.Duration `mapstructure:"interest_half_life"`
	// ReactivateTier is where an interest event (or `collector touch`) lifts a DORMANT or
	// COLD_10M item, making it due at once.
	ReactivateTier string `mapstructure:"reactivate_tier"`

	// Policy decides tiers in the popularity recalculation: "budget" (the most weighted
	// freshness the market key's budget buys, internal/tierplan) or "thresholds" (score
	// thresholds, ignoring the budget).
	Policy string `mapstructure:"policy"`
	// EstimateWindow is how fast the per-item change and sales counts decay: observations
	// this old count 1/e.
	EstimateWindow time.Duration `mapstructure:"estimate_window"`

	Thresholds ScoreThresholds `mapstructure:"thresholds"`
	Weights    ScoreWeights    `mapstructure:"weights"`
}

// Tier policies (catalog.policy).
const (
	PolicyBudget     = "budget"
	PolicyThresholds = "thresholds"
)

// ScoreThresholds: the lowest score of each tier; below Warm is COLD_10M.
type ScoreThresholds struct {
	Hot    float64 `mapstructure:"hot"`
	Active float64 `mapstructure:"active"`
	Warm   float64 `mapstructure:"warm"`
}

// Tiers converts to the pure mapping in internal/tiers.
func (t ScoreThresholds) Tiers() tiers.Thresholds {
	return tiers.Thresholds{Hot: t.Hot, Active: t.Active, Warm: t.Warm}
}

// ScoreWeights: score = Sales × sales/hour + Volume × log10(1 + gold/hour) + Churn ×
// listing changes/hour + Σ interest events (kind weight × event weight × decay).
type ScoreWeights struct {
	Sales  float64 `mapstructure:"sales"`
	Volume float64 `mapstructure:"volume"`
	Churn  float64 `mapstructure:"churn"`
	View   float64 `mapstructure:"view"`
	Watch  float64 `mapstructure:"watch"`
	Touch  float64 `mapstructure:"touch"`
}

var catalogDefaults = map[string]any{
	"catalog.targets":            "configs/import-targets.yaml",
	"catalog.default_tier":       "WARM_5M",
	"catalog.recalc_interval":    "3m",
	"catalog.signal_window":      "24h",
	"catalog.dormant_after":      "72h",
	"catalog.demotion_hold":      "1h",
	"catalog.interest_half_life": "24h",
	"catalog.reactivate_tier":    "ACTIVE_3M",
	"catalog.policy":             "budget",
	"catalog.estimate_window":    "24h",
	"catalog.thresholds.hot":     30.0,
	"catalog.thresholds.active":  10.0,
	"catalog.thresholds.warm":    3.0,
	"catalog.weights.sales":      1.0,
	"catalog.weights.volume":     0.5,
	"catalog.weights.churn":      0.1,
	"catalog.weights.view":       1.0,
	"catalog.weights.watch":      3.0,
	"catalog.weights.touch":      5.0,
}

// CatalogEstimateWindow is the range of catalog.estimate_window, which the dispatcher checks too.
var CatalogEstimateWindow = Range[time.Duration]{Key: "catalog.estimate_window", Min: time.Minute, Max: 365 * 24 * time.Hour}

func (c CatalogConfig) validate() error {
	errs := []error{tierKey("catalog.default_tier", c.DefaultTier)}
	if c.Targets == "" {
		errs = append(errs, invalid("catalog.targets", `""`, "required (a YAML targets file such as configs/import-targets.yaml)"))
	}
	for _, d := range []struct {
		key string
		v   time.Duration
		min time.Duration
	}{
		{"catalog.recalc_interval", c.RecalcInterval, 10 * time.Second},
		{"catalog.signal_window", c.SignalWindow, time.Minute},
		{"catalog.dormant_after", c.DormantAfter, time.Minute},
		{"catalog.demotion_hold", c.DemotionHold, 0},
		{"catalog.interest_half_life", c.InterestHalfLife, time.Minute},
	} {
		if d.v < d.min || d.v > 365*24*time.Hour {
			errs = append(errs, invalid(d.key, d.v, "must be between "+d.min.String()+" and 8760h"))
		}
	}
	errs = append(errs, CatalogEstimateWindow.Check(c.EstimateWindow))
	// A reactivated item must be collected more often than the least frequent scheduled tier.
	sched := tiers.Scheduled()
	faster, slowest := sched[:len(sched)-1], sched[len(sched)-1]
	if t, err := tiers.Parse(c.ReactivateTier); err != nil || !slices.Contains(faster, t) {
		names := make([]string, len(faster))
		for i, f := range faster {
			names[i] = string(f)
		}
		errs = append(errs, invalid("catalog.reactivate_tier", c.ReactivateTier,
			"allowed: "+strings.Join(names, ", ")+" (a reactivated item must be collected more often than "+string(slowest)+")"))
	}
	if c.Policy != PolicyBudget && c.Policy != PolicyThresholds {
		errs = append(errs, invalid("catalog.policy", c.Policy, "allowed: budget, thresholds"))
	}
	if err := c.Thresholds.Tiers().Validate(); err != nil {
		errs = append(errs, invalid("catalog.thresholds", c.Thresholds, err.Error()))
	}
	for _, w := range []struct {
		key string
		v   float64
	}{
		{"catalog.weights.sales", c.Weights.Sales},
		{"catalog.weights.volume", c.Weights.Volume},
		{"catalog.weights.churn", c.Weights.Churn},
		{"catalog.weights.view", c.Weights.View},
		{"catalog.weights.watch", c.Weights.Watch},
		{"catalog.weights.touch", c.Weights.Touch},
	} {
		// NaN and infinities: finite() names them, once. Past maxWeight, scores overflow to
		// infinity, which the schema refuses: every recalculation failed without naming the key.
		if w.v < 0 || w.v > maxWeight {
			errs = append(errs, invalid(w.key, w.v, "must be between 0 and 1e6"))
		}
	}
	return errors.Join(errs...)
}

// maxWeight bounds each catalog.weights.* key: far above any useful weight (the defaults are
// under 10), far below what makes a score overflow.
const maxWeight = 1e6
