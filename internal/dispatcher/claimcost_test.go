package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/tiers"
)

// A claim bounded by cost takes the most urgent tier first and stops where the plan's
// requests_per_collection would pass the bound (at least one item), says that more is due when
// the cost cut it, and takes items of the most urgent tier up to TopAhead early, others not.
func TestClaimByCost(t *testing.T) {
	t.Parallel()
	e := setup(t, 8, tiers.Warm, nil)
	ctx := context.Background()
	hot, soonHot, soonWarm := e.items[0].ItemID, e.items[1].ItemID, e.items[2].ItemID
	// Five WARM items due at 2 requests each, one HOT due, one HOT and one WARM due in 3 s.
	if _, err := e.pool.Exec(ctx, `
		UPDATE tracked_items SET
			collection_tier = CASE WHEN item_id IN ($1, $2) THEN 'HOT_1M' ELSE 'WARM_5M' END,
			next_collect_at = CASE WHEN item_id IN ($2, $3) THEN now() + interval '3 seconds' ELSE now() - interval '1 second' END,
			requests_per_collection = CASE WHEN item_id = $1 THEN 0.5 ELSE 2 END`, hot, soonHot, soonWarm); err != nil {
		t.Fatal(err)
	}
	claims, cut, err := claimByCost(ctx, e.pool, 10, time.Minute, "w", 0, 0, 4.5, false)
	if err != nil {
		t.Fatal(err)
	}
	// 0.5 (HOT) + 2 + 2 = 4.5: the HOT item and two WARM ones.
	if len(claims) != 3 || claims[0].ItemID != hot && claims[1].ItemID != hot && claims[2].ItemID != hot || !cut {
		t.Fatalf("claimed %d (cut %v): %+v; want the HOT item and 2 WARM, cut by cost", len(claims), cut, claims)
	}
	// A bound below one item's cost still takes one.
	if claims, cut, err := claimByCost(ctx, e.pool, 10, time.Minute, "w", 0, 0, 0, false); err != nil || len(claims) != 1 || !cut {
		t.Fatalf("bound 0: claimed %d (cut %v, %v), want 1, cut", len(claims), cut, err)
	}
	// 2 WARM items left due. 5 s ahead for the top tier only: the HOT item due in 3 s comes
	// first, the WARM one due in 3 s stays.
	claims, cut, err = claimByCost(ctx, e.pool, 10, time.Minute, "w", 0, 5*time.Second, 100, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 3 || claims[0].ItemID != soonHot || cut {
		t.Fatalf("claimed %+v (cut %v): want the HOT item due in 3 s first, then the 2 due WARM, not cut", claims, cut)
	}
	for _, c := range claims {
		if c.ItemID == soonWarm {
			t.Fatalf("the WARM item due in 3 s was claimed ahead: %+v", claims)
		}
	}
}
