package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/tiers"
)

// A bare Item is a WARM_5M item due now named after its id; a DORMANT one is unscheduled; times
// by the database clock land where they say, absolute times where they are.
func TestItemsDefaultsAndTimes(t *testing.T) {
	t.Parallel()
	pool, _ := NewPool(t)
	ctx := context.Background()
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	seen := int32(7)
	Items(t, pool,
		Item{ID: "plain"},
		Item{ID: "asleep", Tier: tiers.Dormant},
		Item{ID: "later", Name: "Later", Tier: tiers.Hot, NextCollectAt: In(time.Hour), CreatedAt: Ago(100 * time.Hour),
			TierChangedAt: At(at), TierReason: "test", LastSaleAt: Ago(time.Minute), SeenListingCount: &seen, EstCollections: 3},
		Item{ID: "unscheduled", NextCollectAt: Null()},
	)
	type row struct {
		name, tier, reason          string
		nextIn, createdAgo, saleAgo *float64
		changed                     *time.Time
		seen                        *int32
		est                         float64
	}
	read := func(id string) row {
		t.Helper()
		var r row
		err := pool.QueryRow(ctx, `
			SELECT item_name, collection_tier, coalesce(tier_reason, ''),
			       extract(epoch FROM next_collect_at - now()), extract(epoch FROM now() - created_at),
			       extract(epoch FROM now() - last_sale_at), tier_changed_at, seen_listing_count, est_collections
			FROM tracked_items WHERE item_id = $1`, id).
			Scan(&r.name, &r.tier, &r.reason, &r.nextIn, &r.createdAgo, &r.saleAgo, &r.changed, &r.seen, &r.est)
		if err != nil {
			t.Fatalf("read %s: %v", id, err)
		}
		return r
	}
	// Seconds, within the few a loaded machine may take between the insert and the read.
	near := func(got *float64, want float64) bool { return got != nil && *got >= want-5 && *got <= want+5 }

	if r := read("plain"); r.name != "plain" || r.tier != "WARM_5M" || !near(r.nextIn, 0) || !near(r.createdAgo, 0) ||
		r.saleAgo != nil || r.changed != nil || r.seen != nil || r.reason != "" {
		t.Errorf("plain item: %+v", r)
	}
	if r := read("asleep"); r.tier != "DORMANT" || r.nextIn != nil {
		t.Errorf("dormant item: %+v", r)
	}
	if r := read("later"); r.name != "Later" || r.tier != "HOT_1M" || !near(r.nextIn, 3600) ||
		!near(r.createdAgo, 100*3600) || !near(r.saleAgo, 60) || r.changed == nil || !r.changed.Equal(at) ||
		r.seen == nil || *r.seen != 7 || r.reason != "test" || r.est != 3 {
		t.Errorf("item with every field: %+v", r)
	}
	if r := read("unscheduled"); r.tier != "WARM_5M" || r.nextIn != nil {
		t.Errorf("unscheduled item: %+v", r)
	}
}

// Sales, snapshots and interest events take their defaults and their times.
func TestHistoryRows(t *testing.T) {
	t.Parallel()
	pool, _ := NewPool(t)
	ctx := context.Background()
	Sales(t, pool, Sale{ItemID: "a"}, Sale{ItemID: "a", Seq: 1, Quantity: 2, UnitPrice: 5}, Sale{ItemID: "a", SoldAt: Ago(24 * time.Hour)})
	Snapshots(t, pool, Snapshot{ItemID: "a", ListingCount: 3, ListingQuantity: 30}, Snapshot{ItemID: "a", CollectedAt: Ago(time.Hour), Tier: tiers.Hot})
	Interests(t, pool, Interest{ItemID: "a"}, Interest{ItemID: "a", Kind: "watch", Weight: 2, Source: "web", OccurredAt: Ago(time.Hour)})

	var n, total, old int
	if err := pool.QueryRow(ctx, `SELECT count(*), sum(total_price), count(*) FILTER (WHERE sold_at < now() - interval '23 hours') FROM auction_sales`).
		Scan(&n, &total, &old); err != nil || n != 3 || total != 100+10+100 || old != 1 {
		t.Errorf("sales: %d rows, total %d, %d a day old, %v", n, total, old, err)
	}
	var tokens, hot, listings int
	if err := pool.QueryRow(ctx, `SELECT count(DISTINCT claim_token), count(*) FILTER (WHERE tier = 'HOT_1M' AND collected_at < now() - interval '59 minutes'), sum(listing_quantity) FROM auction_snapshots`).
		Scan(&tokens, &hot, &listings); err != nil || tokens != 2 || hot != 1 || listings != 30 {
		t.Errorf("snapshots: %d tokens, %d HOT an hour old, %d listed, %v", tokens, hot, listings, err)
	}
	var weight float64
	var web int
	if err := pool.QueryRow(ctx, `SELECT sum(weight), count(*) FILTER (WHERE kind = 'watch' AND source = 'web' AND occurred_at < now() - interval '59 minutes') FROM item_interest`).
		Scan(&weight, &web); err != nil || weight != 3 || web != 1 {
		t.Errorf("interest: weight %v, %d web watches an hour old, %v", weight, web, err)
	}
}
