package devdata

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/provider"
)

// RequireKeys fails, naming every missing environment variable, unless both the item and the
// market API keys are set. seed:real calls it before doing anything: real seeding never
// falls back to synthetic data.
func RequireKeys(pc config.ProviderConfig) error {
	var missing []string
	if pc.ItemKey.Empty() {
		missing = append(missing, provider.WorkloadItem.KeyEnv())
	}
	if pc.MarketKey.Empty() {
		missing = append(missing, provider.WorkloadMarket.KeyEnv())
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("seed:real needs the real provider: %s not set (it never falls back to synthetic data; use seed:synthetic for fixtures)",
		strings.Join(missing, " and "))
}

// RealSteps are the stages of seed:real, in the order they run. Import and Recalculate are
// required. Collect and Relay are optional: nil skips the step with a note in the log (Relay
// is nil when Kafka is not configured).
type RealSteps struct {
	Import      func(ctx context.Context) error
	Collect     func(ctx context.Context) error
	Relay       func(ctx context.Context) error
	Recalculate func(ctx context.Context) error
	// Log receives one line per step; nil discards.
	Log func(msg string)
}

// SeedReal checks both API keys, then runs import → collect → relay → recalculate. An import
// that only lost some targets (catalog.ErrTargetsFailed) does not stop the rest: the items that were
// found still get collected, and that error is returned at the end. Any other error stops
// at its step and names it.
func SeedReal(ctx context.Context, pc config.ProviderConfig, s RealSteps) error {
	if err := RequireKeys(pc); err != nil {
		return err
	}
	if s.Import == nil || s.Recalculate == nil {
		return errors.New("seed:real: the import and recalculate steps are required")
	}
	logf := func(format string, args ...any) {
		if s.Log != nil {
			s.Log(fmt.Sprintf(format, args...))
		}
	}
	var partial error
	for _, st := range []struct {
		name string
		run  func(context.Context) error
		skip string
	}{
		{"import-items", s.Import, ""},
		{"collect-due", s.Collect, "no collector wired in this build"},
		{"relay-outbox", s.Relay, "Kafka is not configured (kafka.brokers is empty)"},
		{"recalculate-popularity", s.Recalculate, ""},
	} {
		if st.run == nil {
			logf("seed:real: skipping %s: %s", st.name, st.skip)
			continue
		}
		logf("seed:real: %s", st.name)
		err := st.run(ctx)
		if errors.Is(err, catalog.ErrTargetsFailed) {
			partial = err
			continue
		}
		if err != nil {
			return fmt.Errorf("seed:real step %s: %w", st.name, err)
		}
	}
	return partial
}
