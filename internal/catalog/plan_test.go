package catalog

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

func budgetPolicy(perSecond float64) Policy {
	c := config.Default()
	p := PolicyFromConfig(c.Catalog, c.Provider.Market, packing.Model{})
	p.Mode = config.PolicyBudget
	p.Budget.PerSecond, p.Budget.PerMinute, p.Budget.Headroom = perSecond, perSecond*60, 0.1
	return p
}

// plannedCatalog tracks n items (plan-00 … ) that have been observed changing about every
// 5 minutes, item i viewed i times (so heavier with i), all WARM_5M.
func plannedCatalog(t *testing.T, n int) *pgxpool.Pool {
	t.Helper()
	pool, _ := storetest.NewPool(t)
	var items []storetest.Item
	var views []storetest.Interest
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("plan-%02d", i)
		items = append(items, storetest.Item{ID: id, Tier: tiers.Warm, NextCollectAt: storetest.In(time.Minute),
			EstCollections: 100, EstChanges: 50, EstChangedSeconds: 15000, EstUnchangedSeconds: 15000})
		for range i + 1 {
			views = append(views, storetest.Interest{ItemID: id, Kind: "view", Weight: 1})
		}
	}
	storetest.Items(t, pool, items...)
	storetest.Interests(t, pool, views...)
	return pool
}

type tierRow struct {
	tier string
	next string
}

func tierRows(t *testing.T, pool *pgxpool.Pool) map[string]tierRow {
	t.Helper()
	rows, err := pool.Query(context.Background(), `SELECT item_id, collection_tier, coalesce(next_collect_at::text, '') FROM tracked_items`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]tierRow{}
	for rows.Next() {
		var id string
		var r tierRow
		if err := rows.Scan(&id, &r.tier, &r.next); err != nil {
			t.Fatal(err)
		}
		out[id] = r
	}
	return out
}

func TestPlanWithoutApplyChangesNothing(t *testing.T) {
	pool := plannedCatalog(t, 20)
	before := tierRows(t, pool)
	res, err := PlanTiers(context.Background(), pool, budgetPolicy(0.2))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Changes) == 0 || res.Plan == nil {
		t.Fatalf("the plan proposes nothing: %+v", res)
	}
	after := tierRows(t, pool)
	for id, r := range before {
		if after[id] != r {
			t.Errorf("item %s changed from %+v to %+v without --apply", id, r, after[id])
		}
	}
}

func TestBudgetPolicyKeepsDemandWithinBudgetAndFavoursHeavyItems(t *testing.T) {
	const n = 20
	pool := plannedCatalog(t, n)
	ctx := context.Background()
	if _, err := PinItem(ctx, pool, "plan-00", tiers.Hot); err != nil {
		t.Fatal(err)
	}
	// With the HOT pin, all WARM would ask 0.16 requests/s and all COLD 0.097; the plan gets 0.108.
	p := budgetPolicy(0.12)
	res, err := RecalculatePopularity(ctx, pool, p)
	if err != nil {
		t.Fatal(err)
	}
	if res.Plan == nil || res.Plan.DemandBefore <= res.Plan.Limit {
		t.Fatalf("plan %+v: today's demand should exceed the budget", res.Plan)
	}
	rows := tierRows(t, pool)
	var demand float64
	for _, r := range rows {
		iv, _ := tiers.Tier(r.tier).Interval()
		demand += packing.Alone / iv.Seconds()
	}
	if demand > p.Budget.Limit()+1e-9 {
		t.Errorf("demand after the plan %.4f requests/s, budget %.4f", demand, p.Budget.Limit())
	}
	if rows["plan-00"].tier != string(tiers.Hot) {
		t.Errorf("pinned item moved to %s", rows["plan-00"].tier)
	}
	for i := 2; i < n; i++ {
		lighter, heavier := tiers.Tier(rows[fmt.Sprintf("plan-%02d", i-1)].tier), tiers.Tier(rows[fmt.Sprintf("plan-%02d", i)].tier)
		if heavier.Rank() > lighter.Rank() {
			t.Errorf("plan-%02d (heavier) got %s, plan-%02d got %s", i, heavier, i-1, lighter)
		}
	}
	if err := UnpinItem(ctx, pool, "plan-00"); err != nil {
		t.Fatal(err)
	}
	if err := UnpinItem(ctx, pool, "nope"); err == nil {
		t.Error("unpinning an untracked item must fail")
	}
}

// Items known to be small share packed calls: the plan counts them at their packed cost, so the
// same budget keeps more of them on fast tiers, and what each costs is stored for status and
// the demand gauges.
func TestBudgetPolicyCountsPackedCosts(t *testing.T) {
	const n = 20
	ctx := context.Background()
	hot := func(pool *pgxpool.Pool) (n int) {
		for _, r := range tierRows(t, pool) {
			if r.tier == string(tiers.Hot) {
				n++
			}
		}
		return n
	}
	alone := plannedCatalog(t, n)
	if _, err := RecalculatePopularity(ctx, alone, budgetPolicy(0.3)); err != nil {
		t.Fatal(err)
	}
	packedPool := plannedCatalog(t, n)
	// Ten listings last time, no sales: a tenth of a packed call each, 0.2 requests a collection.
	if _, err := packedPool.Exec(ctx, `UPDATE tracked_items SET seen_listing_count = 10 WHERE item_id <> 'plan-00'`); err != nil {
		t.Fatal(err)
	}
	p := budgetPolicy(0.3)
	p.Packing = packing.Model{PackSize: 10, AuctionLimit: 400, MaxListings: 100, MaxSales: 5, Listings: true, Sales: true}
	res, err := RecalculatePopularity(ctx, packedPool, p)
	if err != nil {
		t.Fatal(err)
	}
	if a, b := hot(alone), hot(packedPool); b <= a {
		t.Errorf("HOT items: %d counting packed costs, %d counting 2 per collection; packing should buy more", b, a)
	}
	if res.Plan.Packed != n-1 || res.Plan.DemandAfter > res.Plan.Limit+1e-9 {
		t.Errorf("plan: %d items packed (want %d), demand %v of %v", res.Plan.Packed, n-1, res.Plan.DemandAfter, res.Plan.Limit)
	}
	var stored, unseen float64
	var demand float64
	rows, err := packedPool.Query(ctx, `SELECT item_id, collection_tier, requests_per_collection FROM tracked_items`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id, tier string
		var r float64
		if err := rows.Scan(&id, &tier, &r); err != nil {
			t.Fatal(err)
		}
		if id == "plan-00" {
			unseen = r
		} else {
			stored = r
		}
		iv, _ := tiers.Tier(tier).Interval()
		demand += r / iv.Seconds()
	}
	if rows.Err() != nil {
		t.Fatal(rows.Err())
	}
	if math.Abs(stored-0.2) > 1e-6 || unseen != packing.Alone {
		t.Errorf("requests_per_collection: %v for a small item (want 0.2), %v for one never seen (want 2)", stored, unseen)
	}
	if math.Abs(demand-res.Plan.DemandAfter) > 1e-6 {
		t.Errorf("stored costs give %v requests/s, the plan %v", demand, res.Plan.DemandAfter)
	}
}

// A mass import of items never collected, all HOT_1M and within their demotion hold, asks more
// than three times the budget; the plan moves them with the catalog's prior until they fit.
func TestBudgetPolicyPlansNewItemsWithAPrior(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	var items []storetest.Item
	var views []storetest.Interest
	for i := 0; i < 200; i++ {
		id := fmt.Sprintf("new-%03d", i)
		items = append(items, storetest.Item{ID: id, Tier: tiers.Hot})
		if i%10 == 0 {
			views = append(views, storetest.Interest{ItemID: id, Kind: "view", Weight: 1})
		}
	}
	for i := 0; i < 5; i++ {
		items = append(items, storetest.Item{ID: fmt.Sprintf("seen-%d", i), Tier: tiers.Cold, NextCollectAt: storetest.In(time.Minute),
			EstCollections: 100, EstChanges: 50, EstChangedSeconds: 15000, EstUnchangedSeconds: 15000})
	}
	storetest.Items(t, pool, items...)
	storetest.Interests(t, pool, views...)

	p := budgetPolicy(2)
	res, err := RecalculatePopularity(ctx, pool, p)
	if err != nil {
		t.Fatal(err)
	}
	s := res.Plan
	if s == nil || s.DemandBefore < 3*s.Limit || s.DemandAfter > s.Limit+1e-9 {
		t.Fatalf("plan %+v: want today's demand over three times the budget and the plan within it", s)
	}
	if s.Unobserved != 200 || s.Prior.Observed != 5 || s.Pinned != 0 || s.PinsExceed {
		t.Errorf("plan %+v: want 200 items planned with the prior of 5 observed ones, none pinned", s)
	}
	var demand float64
	for id, r := range tierRows(t, pool) {
		iv, _ := tiers.Tier(r.tier).Interval()
		demand += packing.Alone / iv.Seconds()
		if id == "new-000" && r.tier == string(tiers.Cold) {
			t.Errorf("%s, viewed, got COLD_10M although the budget has room", id)
		}
	}
	if demand > p.Budget.Limit()+1e-9 {
		t.Errorf("stored tiers ask %v requests/s, the budget %v", demand, p.Budget.Limit())
	}
	// A move does not put off a first collection: the new items are still due.
	var later int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM tracked_items WHERE item_id LIKE 'new-%' AND next_collect_at > now()`).Scan(&later); err != nil || later != 0 {
		t.Errorf("%d new items' first collection put off by the plan (%v)", later, err)
	}
	// Planning again changes nothing until observations arrive.
	again, err := PlanTiers(ctx, pool, p)
	if err != nil || len(again.Changes) != 0 || again.Plan.DemandAfter > again.Plan.Limit+1e-9 {
		t.Fatalf("the plan, again: %v, %d moves, %+v", err, len(again.Changes), again.Plan)
	}
}
