package apicheck

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
)

// Against the simulator in each mode the check finds exactly the mode it runs in, and never
// prints the key.
func TestCheckFindsEverySimulatorMode(t *testing.T) {
	if testing.Short() {
		t.Skip("paced by the simulator's rate limit: about 5 s")
	}
	const key = "api-check-secret-key"
	for _, lim := range []string{neoplesim.LimitPerCall, neoplesim.LimitPerItem} {
		for _, ord := range []string{neoplesim.OrderMerged, neoplesim.OrderGrouped} {
			for _, status := range []int{429, 400} {
				t.Run(fmt.Sprintf("%s/%s/%d", lim, ord, status), func(t *testing.T) {
					sim := neoplesim.New(neoplesim.Options{Items: 30, Seed: 5, MarketKey: key, Rate: 20,
						RateLimitStatus: status, ItemIDsLimit: lim, ItemIDsOrder: ord})
					srv := httptest.NewServer(sim)
					t.Cleanup(srv.Close)
					var ids []string
					for _, it := range sim.Catalog()[4:9] {
						ids = append(ids, it.ItemID)
					}
					rep, err := Run(context.Background(), Config{BaseURL: srv.URL, Key: key, ItemIDs: ids,
						Pace: 100 * time.Millisecond, Burst: 60})
					if err != nil {
						t.Fatal(err)
					}
					for _, e := range []Endpoint{rep.Auction, rep.Sold} {
						if !e.ItemIDs || e.Limit != lim || (e.Order != ord && e.Order != "unknown") {
							t.Fatalf("found %+v, want itemIds, limit %s, order %s", e, lim, ord)
						}
					}
					if rep.Sold.Order != ord {
						t.Fatalf("sales order %q, want %s (sales of several items interleave in time)", rep.Sold.Order, ord)
					}
					if !rep.HeaderKey || !rep.QueryKey {
						t.Fatalf("key placement %+v", rep)
					}
					if want := fmt.Sprintf("HTTP %d API002", status); !strings.HasPrefix(rep.RateLimit, want) ||
						!strings.Contains(rep.RateLimit, "APIKEY_LIMIT") {
						t.Fatalf("rate-limit answer %q, want %s with APIKEY_LIMIT", rep.RateLimit, want)
					}
					out := rep.String() + rep.ConfigYAML()
					if strings.Contains(out, key) || !strings.Contains(rep.ConfigYAML(), "pack_size: 10") {
						t.Fatalf("output leaks the key or lacks the packing setting:\n%s", out)
					}
				})
			}
		}
	}
}
