package catalog

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// Every filter pages by keyset: walking the pages two rows at a time yields each matching item
// exactly once, in the filter's order, with ties on the sort key broken by id.
func TestBrowseItemsPagesEachFilterInOrder(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	storetest.Items(t, pool,
		storetest.Item{ID: "a", Name: "Apple", Tier: tiers.Hot},
		storetest.Item{ID: "b", Name: "apricot", Tier: tiers.Hot, NextCollectAt: storetest.Ago(time.Hour)},
		storetest.Item{ID: "c", Name: "Banana", Tier: tiers.Cold, NextCollectAt: storetest.Ago(2 * time.Hour)},
		storetest.Item{ID: "d", Name: "Ap_ricot", Tier: tiers.Cold, NextCollectAt: storetest.In(time.Hour)},
		storetest.Item{ID: "e", Name: "Cherry", Tier: tiers.Warm, NextCollectAt: storetest.Ago(time.Second)},
		storetest.Item{ID: "f", Name: "apple pie", Tier: tiers.Warm, NextCollectAt: storetest.Ago(3 * time.Hour)},
		storetest.Item{ID: "seed-0001", Name: "Apple fixture", Tier: tiers.Hot, NextCollectAt: storetest.Ago(time.Hour)},
	)
	if _, err := pool.Exec(ctx, `
		UPDATE tracked_items t SET popularity_score = v.score, pinned_tier = v.pin, sales_gaps = v.gaps
		FROM (VALUES ('a', 5.0, NULL, 0), ('b', 5.0, 'HOT_1M', 3), ('c', 1.0, NULL, 3), ('d', 9.0, 'COLD_10M', 0),
		             ('e', 2.0, NULL, 1), ('f', 0.0, NULL, 0), ('seed-0001', 99.0, 'HOT_1M', 9)) v(id, score, pin, gaps)
		WHERE t.item_id = v.id`); err != nil {
		t.Fatal(err)
	}
	// c is overdue but leased by a live claim: not claimable, so not overdue.
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET lease_expires_at = now() + interval '1 minute' WHERE item_id = 'c'`); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		q    BrowseQuery
		want []string
	}{
		{"popularity", BrowseQuery{}, []string{"d", "b", "a", "e", "c", "f"}},
		{"tier", BrowseQuery{Tier: tiers.Hot}, []string{"b", "a"}},
		{"pinned", BrowseQuery{Filter: BrowsePinned}, []string{"d", "b"}},
		{"gaps", BrowseQuery{Filter: BrowseGaps}, []string{"c", "b", "e"}},
		{"overdue", BrowseQuery{Filter: BrowseOverdue, Overdue: 30 * time.Second}, []string{"f", "b"}},
		{"overdue, from every tier in due order", BrowseQuery{Filter: BrowseOverdue}, []string{"f", "b", "e", "a"}},
		{"overdue within a tier", BrowseQuery{Filter: BrowseOverdue, Tier: tiers.Hot}, []string{"b", "a"}},
		{"name prefix, case and LIKE characters", BrowseQuery{Search: "AP"}, []string{"d", "a", "f", "b"}},
		{"a LIKE wildcard is literal", BrowseQuery{Search: "ap_"}, []string{"d"}},
		{"exact id first", BrowseQuery{Search: "c"}, []string{"c", "e"}},
		{"exact id first, not again by name", BrowseQuery{Search: "a"}, []string{"a", "d", "f", "b"}},
		{"search within a tier", BrowseQuery{Search: "ap", Tier: tiers.Warm}, []string{"f"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := c.q
			q.Limit = 2
			var got []string
			for page := 0; ; page++ {
				if page > 10 {
					t.Fatalf("no last page after %d pages: %v", page, got)
				}
				rows, next, err := BrowseItems(ctx, pool, q)
				if err != nil {
					t.Fatal(err)
				}
				for _, r := range rows {
					got = append(got, r.ItemID)
				}
				if next == nil {
					break
				}
				q.After = next
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("pages gave %v, want %v", got, c.want)
			}
		})
	}
	if _, _, err := BrowseItems(ctx, pool, BrowseQuery{Filter: "bogus"}); err == nil || !strings.Contains(err.Error(), `"bogus"`) {
		t.Errorf("unknown filter: %v", err)
	}
}

// A search is lowered as the names are, by the database's lower(): in a database of locale C
// it lowers ASCII only, so a name keeps its "İ", and Go's lowering of the search ("i") found
// not even the item's own name.
func TestASearchIsLoweredAsTheNamesAre(t *testing.T) {
	ctx := context.Background()
	url := storetest.NewEmptyDatabaseInLocale(t, "C")
	if err := store.Migrate(ctx, url, nil); err != nil {
		t.Fatal(err)
	}
	pool, err := store.Open(ctx, store.PoolConfig{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	storetest.Items(t, pool, storetest.Item{ID: "x", Name: "İzmir Blade", Tier: tiers.Hot})
	for _, q := range []string{"İzmir Blade", "İzmir b"} {
		rows, _, err := BrowseItems(ctx, pool, BrowseQuery{Search: q})
		if err != nil || len(rows) != 1 || rows[0].ItemID != "x" {
			t.Errorf("search %q: %+v, %v; want the item named İzmir Blade", q, rows, err)
		}
	}
}
