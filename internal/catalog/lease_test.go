package catalog

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// dueItems tracks n items of tier, due a second ago, in a fresh database; it returns their ids.
func dueItems(t *testing.T, n int, tier tiers.Tier) (*pgxpool.Pool, []string) {
	t.Helper()
	pool, _ := storetest.NewPool(t)
	ids := make([]string, n)
	rows := make([]storetest.Item, n)
	for i := range rows {
		ids[i] = fmt.Sprintf("item-%d", i+1)
		rows[i] = storetest.Item{ID: ids[i], Tier: tier, NextCollectAt: storetest.Ago(time.Second)}
	}
	storetest.Items(t, pool, rows...)
	return pool, ids
}

// Status, metrics and the daemon's wake-up count exactly what a claim takes: a claimed item is
// no longer due, tiers come most urgent first, and excluded ids are left out.
func TestDueByTierCountsWhatAClaimTakes(t *testing.T) {
	t.Parallel()
	pool, items := dueItems(t, 5, tiers.Cold)
	ctx := context.Background()
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET collection_tier = 'HOT_1M' WHERE item_id = $1`, items[0]); err != nil {
		t.Fatal(err)
	}
	storetest.Items(t, pool, storetest.Item{ID: "seed-fixture-1", Name: "fixture", Tier: tiers.Cold, NextCollectAt: storetest.In(time.Hour)})
	due := func() []TierDue {
		t.Helper()
		got, err := DueByTier(ctx, pool, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		for i := range got { // TestActivityOf's
			got[i].LastCollected, got[i].OldestDue = time.Time{}, time.Time{}
		}
		return got
	}
	if got := due(); len(got) != 2 || got[0] != (TierDue{Tier: tiers.Hot, Items: 1, Due: 1, Requests: 2}) || got[1] != (TierDue{Tier: tiers.Cold, Items: 4, Due: 4, Requests: 8}) {
		t.Fatalf("before the claim: %+v", got)
	}
	claims, err := ClaimDue(ctx, pool, 2, time.Minute, "w", 0)
	if err != nil || len(claims) != 2 || (claims[0].Tier != tiers.Hot && claims[1].Tier != tiers.Hot) {
		t.Fatalf("claimed %+v, %v: want 2, the HOT item among them", claims, err)
	}
	if got := due(); got[0].Due != 0 || got[1].Due != 3 || got[0].Leased+got[1].Leased != 2 {
		t.Fatalf("after claiming 2: %+v; want 2 leased", got)
	}
	if wait, ok, err := NextClaimable(ctx, pool, 0); err != nil || !ok || wait > 0 {
		t.Fatalf("next claimable in %v (ok %v, %v), want now", wait, ok, err)
	}
}

// The activity status reads: the last successful collection, and the due time of the
// longest-waiting item a claim could take (leased and excluded items are not waiting), from
// the one scan that counts the tiers.
func TestActivityOf(t *testing.T) {
	t.Parallel()
	pool, items := dueItems(t, 2, tiers.Cold)
	ctx := context.Background()
	storetest.Items(t, pool, storetest.Item{ID: "seed-fixture-1", Name: "fixture", Tier: tiers.Cold, NextCollectAt: storetest.Ago(time.Hour)})
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET last_collected_at = now() - interval '1 hour' WHERE item_id = 'seed-fixture-1'`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '5 minutes',
		last_collected_at = now() - interval '10 minutes' WHERE item_id = $1`, items[0]); err != nil {
		t.Fatal(err)
	}
	// How long ago, rounded to the minute; -1 for none.
	read := func() (last, oldest time.Duration) {
		t.Helper()
		last, oldest = -1, -1
		var now time.Time
		if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			t.Fatal(err)
		}
		a, err := readActivity(ctx, pool)
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
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET lease_expires_at = now() + interval '1 minute' WHERE item_id = $1`, items[0]); err != nil {
		t.Fatal(err)
	}
	if _, oldest := read(); oldest != 0 {
		t.Fatalf("oldest due %v ago with the 5-minute item leased; want the 1-second one (0m)", oldest)
	}
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET lease_expires_at = now() + interval '1 minute', last_collected_at = NULL`); err != nil {
		t.Fatal(err)
	}
	a, err := readActivity(ctx, pool)
	if err != nil || a != (Activity{}) {
		t.Fatalf("nothing collected, nothing waiting: %+v %v", a, err)
	}
}

func readActivity(ctx context.Context, pool *pgxpool.Pool) (Activity, error) {
	byTier, err := DueByTier(ctx, pool, time.Minute)
	return ActivityOf(byTier), err
}

// A claim bounded by cost takes the most urgent tier first and stops where the plan's
// requests_per_collection would pass the bound (at least one item), says that more is due when
// the cost cut it, and takes items of the most urgent tier up to TopAhead early, others not.
func TestClaimByCost(t *testing.T) {
	t.Parallel()
	pool, items := dueItems(t, 8, tiers.Warm)
	ctx := context.Background()
	hot, soonHot, soonWarm := items[0], items[1], items[2]
	// Five WARM items due at 2 requests each, one HOT due, one HOT and one WARM due in 20 s (a margin a loaded machine cannot eat).
	if _, err := pool.Exec(ctx, `
		UPDATE tracked_items SET
			collection_tier = CASE WHEN item_id IN ($1, $2) THEN 'HOT_1M' ELSE 'WARM_5M' END,
			next_collect_at = CASE WHEN item_id IN ($2, $3) THEN now() + interval '20 seconds' ELSE now() - interval '1 second' END,
			requests_per_collection = CASE WHEN item_id = $1 THEN 0.5 ELSE 2 END`, hot, soonHot, soonWarm); err != nil {
		t.Fatal(err)
	}
	claims, cut, err := ClaimByCost(ctx, pool, 10, time.Minute, "w", 0, 0, 4.5, false)
	if err != nil {
		t.Fatal(err)
	}
	// 0.5 (HOT) + 2 + 2 = 4.5: the HOT item and two WARM ones.
	if len(claims) != 3 || claims[0].ItemID != hot && claims[1].ItemID != hot && claims[2].ItemID != hot || !cut {
		t.Fatalf("claimed %d (cut %v): %+v; want the HOT item and 2 WARM, cut by cost", len(claims), cut, claims)
	}
	// A bound below one item's cost still takes one.
	if claims, cut, err := ClaimByCost(ctx, pool, 10, time.Minute, "w", 0, 0, 0, false); err != nil || len(claims) != 1 || !cut {
		t.Fatalf("bound 0: claimed %d (cut %v, %v), want 1, cut", len(claims), cut, err)
	}
	// 2 WARM items left due. 25 s ahead for the top tier only: the HOT item due in 20 s comes
	// first, the WARM one due in 20 s stays.
	claims, cut, err = ClaimByCost(ctx, pool, 10, time.Minute, "w", 0, 25*time.Second, 100, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(claims) != 3 || claims[0].ItemID != soonHot || cut {
		t.Fatalf("claimed %+v (cut %v): want the HOT item due in 20 s first, then the 2 due WARM, not cut", claims, cut)
	}
	for _, c := range claims {
		if c.ItemID == soonWarm {
			t.Fatalf("the WARM item due in 20 s was claimed ahead: %+v", claims)
		}
	}
}

// Values the collector cannot use are refused where they are written, with the constraint's
// name, instead of poisoning every later claim or recalculation: an infinite time on an item
// (an operator's '-infinity' to make it due) or an interest event (another service's insert),
// a NaN or infinite cost or weight, an endless cool-down. An item parked centuries ahead
// still gives a finite wake-up.
func TestUnusableValuesAreRefusedWhereTheyAreWritten(t *testing.T) {
	pool, ids := dueItems(t, 1, tiers.Hot)
	ctx := context.Background()
	for _, sql := range []string{
		`UPDATE tracked_items SET next_collect_at = '-infinity'`,
		`UPDATE tracked_items SET last_sale_at = 'infinity'`,
		`UPDATE tracked_items SET requests_per_collection = 'NaN'`,
		`UPDATE tracked_items SET requests_per_collection = 'Infinity'`,
		`INSERT INTO item_interest (item_id, kind, occurred_at) VALUES ('` + ids[0] + `', 'view', 'infinity')`,
		`INSERT INTO item_interest (item_id, kind, weight) VALUES ('` + ids[0] + `', 'watch', 'Infinity')`,
		`INSERT INTO item_interest (item_id, kind, weight) VALUES ('` + ids[0] + `', 'watch', 'NaN')`,
		`INSERT INTO budget_cooldowns (key_label, until) VALUES ('k', 'infinity')`,
		// Finite, but past where the scoring's weight × 3 and sums leave double precision.
		`INSERT INTO item_interest (item_id, kind, weight) VALUES ('` + ids[0] + `', 'watch', 1e308)`,
		// Every collector's gate reads it on every pass; "until cleared" is NULL.
		`UPDATE provider_status SET override_status = 'MAINTENANCE', override_until = 'infinity'`,
	} {
		if _, err := pool.Exec(ctx, sql); err == nil || !strings.Contains(err.Error(), "violates check constraint") {
			t.Errorf("%s: %v; want a check constraint violation", sql, err)
		}
	}
	if _, err := RecordInterest(ctx, pool, InterestEvent{ItemID: ids[0], Kind: KindWatch, Weight: 2 * MaxInterestWeight}, tiers.Hot); err == nil ||
		!strings.Contains(err.Error(), "at most") {
		t.Errorf("RecordInterest of weight %g: %v; want refused, saying the cap", 2*MaxInterestWeight, err)
	}
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = '9999-12-31'`); err != nil {
		t.Fatal(err)
	}
	wait, ok, err := NextClaimable(ctx, pool, 0)
	if err != nil || !ok || wait <= 0 || wait > maxWait {
		t.Fatalf("next claimable for an item parked in 9999: %s %t %v; want a positive wait of at most %s", wait, ok, err, maxWait)
	}
}

// `collect ITEM_ID` (ClaimOne) takes an item whatever its schedule, but never from a collector
// whose lease is live: the item would be collected twice and one write-back fenced. Once that
// lease has expired, it takes it.
func TestClaimOneLeavesALiveLease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, ids := dueItems(t, 1, tiers.Cold)
	if c, err := ClaimDue(ctx, pool, 1, time.Minute, "collector", 0); err != nil || len(c) != 1 {
		t.Fatalf("claim: %d, %v", len(c), err)
	}
	if c, err := ClaimOne(ctx, pool, ids[0], time.Minute, "operator"); err != nil || len(c) != 0 {
		t.Fatalf("collect %s while another collector holds it: %d claims, %v; want none", ids[0], len(c), err)
	}
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET lease_expires_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	if c, err := ClaimOne(ctx, pool, ids[0], time.Minute, "operator"); err != nil || len(c) != 1 {
		t.Fatalf("collect %s once the lease expired: %d claims, %v; want it", ids[0], len(c), err)
	}
}
