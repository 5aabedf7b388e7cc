package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/tiers"
)

// A dispatcher that claims ahead takes what falls due within Ahead and nothing later, and the
// wake-up agrees with it; the write-back moves an item claimed early to its next slot, not back
// to the one it was claimed for.
func TestClaimAhead(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, tiers.Hot, nil)
	ctx := context.Background()
	soon, later := e.items[0].ItemID, e.items[1].ItemID
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() + CASE item_id WHEN $1 THEN interval '20 seconds' ELSE interval '50 seconds' END`, soon); err != nil {
		t.Fatal(err)
	}
	if claims, err := catalog.ClaimDue(ctx, e.pool, 10, time.Minute, "w", 0); err != nil || len(claims) != 0 {
		t.Fatalf("without claiming ahead: claimed %d (%v), want none", len(claims), err)
	}
	if wait, ok, err := catalog.NextClaimable(ctx, e.pool, 25*time.Second); err != nil || !ok || wait > 0 {
		t.Fatalf("25 s ahead, next claimable in %v (ok %v, %v), want now", wait, ok, err)
	}
	if wait, _, err := catalog.NextClaimable(ctx, e.pool, 0); err != nil || wait < time.Second {
		t.Fatalf("without claiming ahead, next claimable in %v (%v), want about 20 s", wait, err)
	}

	d := e.dispatcher(t, Config{BatchSize: 10, Ahead: 25 * time.Second}, nil)
	sum, err := d.RunOnce(ctx)
	if err != nil || sum.Collected != 1 {
		t.Fatalf("25 s ahead: collected %d (%v), want the item due in 20 s only", sum.Collected, err)
	}
	var claimedEarly bool
	var nextGap float64
	if err := e.pool.QueryRow(ctx, `
		SELECT last_claimed_at < last_due_at, extract(epoch FROM next_collect_at - last_due_at) FROM tracked_items WHERE item_id = $1`, soon).Scan(&claimedEarly, &nextGap); err != nil {
		t.Fatal(err)
	}
	// The next slot is at least half an interval after the collection, at most 20 s before the
	// due time (the claim came after the UPDATE), so at least 10 s after it; the slot it was
	// claimed for would be 0.
	if !claimedEarly || nextGap < 10 {
		t.Fatalf("claimed early %v, next due %.1f s after the time it was claimed for; want early, and at least 10 s", claimedEarly, nextGap)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE item_id = $1 AND last_claimed_at IS NOT NULL`, later); n != 0 {
		t.Fatalf("the item due in 50 s was claimed")
	}
	if _, err := New(e.pool, e.client, configured(e.pool, Config{Ahead: catalog.MaxAhead}), nil); err == nil {
		t.Fatalf("Ahead %v (half the HOT interval) accepted: an item claimed that early could be rescheduled to the slot it was claimed for", catalog.MaxAhead)
	}
}
