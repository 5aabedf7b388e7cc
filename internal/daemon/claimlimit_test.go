package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/tiers"
)

// When more is due than the budget serves, each claim takes half a second of budget, not a whole
// batch: a HOT item falling due meanwhile is next in line within about half a second instead of
// behind a batch that takes seconds to drain. The budget is the tighter of the key's limits: a
// per_minute under the rate sizes claims as the client's limiter will send them.
func TestClaimsTakeHalfASecondOfBudget(t *testing.T) {
	for _, c := range []struct {
		name            string
		rate, perMinute int
	}{{"rate", 40, 100000}, {"per_minute", 100000, 40 * 60}} {
		t.Run(c.name, func(t *testing.T) {
			const n = 60
			e := newEnv(t, n, neoplesim.Options{})
			e.track(t, 0, n, tiers.Hot, -time.Second)
			cfg := testConfig()
			// 40 req/s at 2 requests a collection (packing off): 20 items a second, 10 a claim.
			cfg.Market.Rate, cfg.Market.Burst, cfg.Market.PerMinute = float64(c.rate), 40, c.perMinute
			cfg.Dispatch.BatchSize = n
			if res := pass(t, e.build(t, cfg, nil)); res.Summary.Collected != n {
				t.Fatalf("the pass collected %d of %d", res.Summary.Collected, n)
			}
			// One claim statement stamps its rows with one now().
			var claims, biggest int
			err := e.pool.QueryRow(context.Background(), `
				SELECT count(*), max(c) FROM (SELECT count(*) AS c FROM tracked_items GROUP BY last_claimed_at) g`).Scan(&claims, &biggest)
			if err != nil {
				t.Fatal(err)
			}
			if biggest > 10 || claims < n/10 {
				t.Errorf("%d items in %d claims, the biggest %d: want at most 10 a claim (half a second of a 40 req/s budget at 2 requests each)", n, claims, biggest)
			}
		})
	}
}
