package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/tiers"
)

// Status, metrics and the daemon's wake-up count exactly what a claim takes: a claimed item is
// no longer due, tiers come most urgent first, and excluded ids are left out.
func TestDueByTierCountsWhatAClaimTakes(t *testing.T) {
	t.Parallel()
	e := setup(t, 5, tiers.Cold, nil)
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET collection_tier = 'HOT_1M' WHERE item_id = $1`, e.items[0].ItemID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		VALUES ('fixture-1', 'fixture', 'COLD_10M', now() + interval '1 hour')`); err != nil {
		t.Fatal(err)
	}
	due := func() []TierDue {
		t.Helper()
		got, err := DueByTier(ctx, e.pool, time.Minute, []string{"fixture-%"})
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := due(); len(got) != 2 || got[0] != (TierDue{tiers.Hot, 1, 1, 0, 2}) || got[1] != (TierDue{tiers.Cold, 4, 4, 0, 8}) {
		t.Fatalf("before the claim: %+v", got)
	}
	claims, err := claimDue(ctx, e.pool, 2, time.Minute, "w", true)
	if err != nil || len(claims) != 2 || (claims[0].Tier != tiers.Hot && claims[1].Tier != tiers.Hot) {
		t.Fatalf("claimed %+v, %v: want 2, the HOT item among them", claims, err)
	}
	if got := due(); got[0].Due != 0 || got[1].Due != 3 {
		t.Fatalf("after claiming 2: %+v", got)
	}
	if wait, ok, err := NextClaimable(ctx, e.pool); err != nil || !ok || wait > 0 {
		t.Fatalf("next claimable in %v (ok %v, %v), want now", wait, ok, err)
	}
}
