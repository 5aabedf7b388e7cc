package provider_test

import (
	"context"
	"net/http/httptest"
	"testing"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
)

// BenchmarkCollectOneItem is one item's collection (listings + sales) through HTTP against
// the simulator: the client-plus-simulator cost every collector test and benchmark pays.
func BenchmarkCollectOneItem(b *testing.B) {
	sim := neoplesim.New(neoplesim.Options{Items: 1000, Seed: 1})
	srv := newServer(b, sim)
	c, err := provider.NewClient(provider.ClientConfig{Workload: provider.WorkloadMarket, BaseURL: srv.URL,
		Key: neoplesim.DefaultMarketKey, Rate: 1e6, Burst: 1e6, PerMinute: 1e9})
	if err != nil {
		b.Fatal(err)
	}
	cat := sim.Catalog()
	ctx := context.Background()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		id := cat[i%len(cat)].ItemID
		i++
		if _, err := c.Auction(ctx, id); err != nil {
			b.Fatal(err)
		}
		if _, err := c.AuctionSold(ctx, id); err != nil {
			b.Fatal(err)
		}
	}
}

func newServer(tb testing.TB, sim *neoplesim.Server) *httptest.Server {
	srv := httptest.NewServer(sim)
	tb.Cleanup(srv.Close)
	return srv
}
