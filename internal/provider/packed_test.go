package provider_test

import (
	"context"
	"strings"
	"testing"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
)

func TestPackedCallsNameEveryIDOnce(t *testing.T) {
	e := newEnv(t, neoplesim.Options{Items: 30, Seed: 2})
	c := e.client(t, provider.WorkloadMarket, nil)
	var ids []string
	for _, it := range e.sim.Catalog()[4:9] {
		ids = append(ids, it.ItemID)
	}
	ctx := context.Background()
	listingsA, err := c.AuctionMany(ctx, ids)
	listings, sent := listingsA.Rows, listingsA.Sent
	if err != nil || sent != len(listings) {
		t.Fatal(sent, err)
	}
	salesA, err := c.AuctionSoldMany(ctx, ids)
	sales, sent := salesA.Rows, salesA.Sent
	if err != nil || sent != len(sales) {
		t.Fatal(sent, err)
	}
	q := e.rec.last().URL.Query()
	if q.Get("itemIds") != strings.Join(ids, ",") || q.Get("itemId") != "" || q.Get("limit") != "100" {
		t.Fatalf("auction-sold query %v", q)
	}
	seen := map[string]bool{}
	for _, l := range listings {
		seen[l.ItemID] = true
	}
	for _, s := range sales {
		seen[s.ItemID] = true
	}
	if len(seen) < 2 {
		t.Fatalf("packed answers hold rows of %d items, want several", len(seen))
	}
	for _, id := range ids {
		if st := e.sim.Stats().Items[id]; st.Auction != 1 || st.AuctionSold != 1 {
			t.Fatalf("item %s asked %+v, want once per endpoint", id, st)
		}
	}
	if c.AuctionLimit() != 400 || c.SoldLimit() != 100 {
		t.Fatalf("limits %d/%d", c.AuctionLimit(), c.SoldLimit())
	}
	eleven := append(append(append([]string{}, ids...), ids...), ids...)[:11]
	for _, bad := range [][]string{nil, eleven, {ids[0], ""}, {ids[0] + "," + ids[1]}} {
		_, err := c.AuctionMany(ctx, bad)
		wantClass(t, err, provider.ClassBug)
	}
	if n := e.sim.Stats().Requests; n != 2 {
		t.Fatalf("bad id lists reached the provider: %d requests", n)
	}
}

func TestAPI001NotFoundIsAPerRequestNotFound(t *testing.T) {
	e := newEnv(t, neoplesim.Options{NotFoundAPI001: true})
	c := e.client(t, provider.WorkloadItem, nil)
	rows, err := c.SearchItems(context.Background(), "없는 아이템", "match", 0)
	if err != nil || len(rows) != 0 {
		t.Fatalf("got %v, %v; want no rows and no error", rows, err)
	}
	if !provider.IsNotFound(&provider.Error{Class: provider.ClassItem, Code: "API001"}) {
		t.Fatal("IsNotFound")
	}
}
