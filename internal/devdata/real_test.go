package devdata

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
)

func TestSeedRealWithoutKeysFailsNamingTheVariables(t *testing.T) {
	ran := false
	steps := RealSteps{
		Import:      func(context.Context) error { ran = true; return nil },
		Recalculate: func(context.Context) error { ran = true; return nil },
	}
	for _, tc := range []struct {
		name        string
		item, mkt   config.Secret
		want, avoid string
	}{
		{"both missing", "", "", "NEOPLE_ITEM_API_KEY and NEOPLE_MARKET_API_KEY not set", ""},
		{"item missing", "", "m", "NEOPLE_ITEM_API_KEY not set", "NEOPLE_MARKET_API_KEY"},
		{"market missing", "i", "", "NEOPLE_MARKET_API_KEY not set", "NEOPLE_ITEM_API_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pc := config.Default().Provider
			pc.ItemKey, pc.MarketKey = tc.item, tc.mkt
			err := SeedReal(context.Background(), pc, steps)
			if err == nil || !strings.Contains(err.Error(), tc.want) || (tc.avoid != "" && strings.Contains(err.Error(), tc.avoid)) {
				t.Fatalf("err = %v; want it to name %q only", err, tc.want)
			}
			if !strings.Contains(err.Error(), "never falls back to synthetic") {
				t.Errorf("err = %v; want it to say there is no synthetic fallback", err)
			}
			if ran {
				t.Fatal("a step ran without keys")
			}
		})
	}
}

func TestSeedRealRunsStepsInOrder(t *testing.T) {
	pc := config.Default().Provider
	pc.ItemKey, pc.MarketKey = "i", "m"
	var order []string
	step := func(name string, err error) func(context.Context) error {
		return func(context.Context) error { order = append(order, name); return err }
	}
	var logs []string
	partial := fmt.Errorf("%w: 1 of 3", catalog.ErrTargetsFailed)
	err := SeedReal(context.Background(), pc, RealSteps{
		Import:      step("import", partial),
		Collect:     step("collect", nil),
		Recalculate: step("recalculate", nil),
		Log:         func(m string) { logs = append(logs, m) },
	})
	// Missing targets do not stop the items that were found from being collected.
	if !errors.Is(err, catalog.ErrTargetsFailed) || strings.Join(order, ",") != "import,collect,recalculate" {
		t.Fatalf("err %v, order %v", err, order)
	}
	if !strings.Contains(strings.Join(logs, "\n"), "skipping relay-outbox") {
		t.Errorf("logs %v: want the skipped relay noted", logs)
	}

	order = nil
	boom := errors.New("boom")
	err = SeedReal(context.Background(), pc, RealSteps{
		Import: step("import", nil), Collect: step("collect", boom), Recalculate: step("recalculate", nil),
	})
	if !errors.Is(err, boom) || !strings.Contains(err.Error(), "collect-due") || strings.Join(order, ",") != "import,collect" {
		t.Fatalf("err %v, order %v", err, order)
	}
}
