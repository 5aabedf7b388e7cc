package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/store/storetest"
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
	storetest.Items(t, e.pool, storetest.Item{ID: "seed-fixture-1", Name: "fixture", Tier: tiers.Cold, NextCollectAt: storetest.In(time.Hour)})
	due := func() []catalog.TierDue {
		t.Helper()
		got, err := catalog.DueByTier(ctx, e.pool, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := due(); len(got) != 2 || got[0] != (catalog.TierDue{Tier: tiers.Hot, Items: 1, Due: 1, Requests: 2}) || got[1] != (catalog.TierDue{Tier: tiers.Cold, Items: 4, Due: 4, Requests: 8}) {
		t.Fatalf("before the claim: %+v", got)
	}
	claims, err := catalog.ClaimDue(ctx, e.pool, 2, time.Minute, "w", true, 0)
	if err != nil || len(claims) != 2 || (claims[0].Tier != tiers.Hot && claims[1].Tier != tiers.Hot) {
		t.Fatalf("claimed %+v, %v: want 2, the HOT item among them", claims, err)
	}
	if got := due(); got[0].Due != 0 || got[1].Due != 3 {
		t.Fatalf("after claiming 2: %+v", got)
	}
	if wait, ok, err := catalog.NextClaimable(ctx, e.pool, 0); err != nil || !ok || wait > 0 {
		t.Fatalf("next claimable in %v (ok %v, %v), want now", wait, ok, err)
	}
}

// A dispatcher that claims ahead takes what falls due within Ahead and nothing later, and the
// wake-up agrees with it; the write-back moves an item claimed early to its next slot, not back
// to the one it was claimed for.
func TestClaimAhead(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, tiers.Hot, nil)
	ctx := context.Background()
	soon, later := e.items[0].ItemID, e.items[1].ItemID
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() + CASE item_id WHEN $1 THEN interval '3 seconds' ELSE interval '20 seconds' END`, soon); err != nil {
		t.Fatal(err)
	}
	if claims, err := catalog.ClaimDue(ctx, e.pool, 10, time.Minute, "w", true, 0); err != nil || len(claims) != 0 {
		t.Fatalf("without claiming ahead: claimed %d (%v), want none", len(claims), err)
	}
	if wait, ok, err := catalog.NextClaimable(ctx, e.pool, 5*time.Second); err != nil || !ok || wait > 0 {
		t.Fatalf("5 s ahead, next claimable in %v (ok %v, %v), want now", wait, ok, err)
	}
	if wait, _, err := catalog.NextClaimable(ctx, e.pool, 0); err != nil || wait < time.Second {
		t.Fatalf("without claiming ahead, next claimable in %v (%v), want about 3 s", wait, err)
	}

	d := e.dispatcher(t, Config{BatchSize: 10, Ahead: 5 * time.Second, PrioritizeTiers: true}, nil)
	sum, err := d.RunOnce(ctx)
	if err != nil || sum.Collected != 1 {
		t.Fatalf("5 s ahead: collected %d (%v), want the item due in 3 s only", sum.Collected, err)
	}
	var claimedEarly bool
	var nextGap float64
	if err := e.pool.QueryRow(ctx, `
		SELECT last_claimed_at < last_due_at, extract(epoch FROM next_collect_at - last_due_at) FROM tracked_items WHERE item_id = $1`, soon).Scan(&claimedEarly, &nextGap); err != nil {
		t.Fatal(err)
	}
	// The next slot is at least half an interval after the collection, 3 s before the due time.
	if !claimedEarly || nextGap < 27 {
		t.Fatalf("claimed early %v, next due %.1f s after the time it was claimed for; want early, and at least 27 s", claimedEarly, nextGap)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE item_id = $1 AND last_claimed_at IS NOT NULL`, later); n != 0 {
		t.Fatalf("the item due in 20 s was claimed")
	}
	if _, err := New(e.pool, e.client, configured(Config{Ahead: catalog.MaxAhead}), nil); err == nil {
		t.Fatalf("Ahead %v (half the HOT interval) accepted: an item claimed that early could be rescheduled to the slot it was claimed for", catalog.MaxAhead)
	}
}

// The activity status reads: the last successful collection, and the due time of the
// longest-waiting item a claim could take (leased and excluded items are not waiting).
func TestReadActivity(t *testing.T) {
	t.Parallel()
	e := setup(t, 2, tiers.Cold, nil)
	ctx := context.Background()
	storetest.Items(t, e.pool, storetest.Item{ID: "seed-fixture-1", Name: "fixture", Tier: tiers.Cold, NextCollectAt: storetest.Ago(time.Hour)})
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET last_collected_at = now() - interval '1 hour' WHERE item_id = 'seed-fixture-1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '5 minutes',
		last_collected_at = now() - interval '10 minutes' WHERE item_id = $1`, e.items[0].ItemID); err != nil {
		t.Fatal(err)
	}
	// How long ago, rounded to the minute; -1 for none.
	read := func() (last, oldest time.Duration) {
		t.Helper()
		last, oldest = -1, -1
		var now time.Time
		if err := e.pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		a, err := catalog.ReadActivity(ctx, e.pool)
		if err != nil {
			t.Fatal(err)
		}
		if !a.LastCollected.IsZero() {
			last = now.Sub(a.LastCollected).Round(time.Minute)
		}
		if !a.OldestDue.IsZero() {
			oldest = now.Sub(a.OldestDue).Round(time.Minute)
		}
		return last, oldest
	}
	if last, oldest := read(); last != 10*time.Minute || oldest != 5*time.Minute {
		t.Fatalf("last collected %v ago, oldest due %v ago; want 10m and 5m", last, oldest)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET lease_expires_at = now() + interval '1 minute' WHERE item_id = $1`, e.items[0].ItemID); err != nil {
		t.Fatal(err)
	}
	if _, oldest := read(); oldest != 0 {
		t.Fatalf("oldest due %v ago with the 5-minute item leased; want the 1-second one (0m)", oldest)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET lease_expires_at = now() + interval '1 minute', last_collected_at = NULL`); err != nil {
		t.Fatal(err)
	}
	a, err := catalog.ReadActivity(ctx, e.pool)
	if err != nil || a != (catalog.Activity{}) {
		t.Fatalf("nothing collected, nothing waiting: %+v %v", a, err)
	}
}
