package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/tiers"
)

// A provider whose clock trails the database's by half a minute: the second it is still
// filling looks settled by our clock. Read by the answer's Date, it is held back until it has
// settled by the provider's own, so a sale that lands in the middle of it is stored with the
// others instead of an earlier one twice.
func TestSalesSettleOnTheProvidersClock(t *testing.T) {
	t.Parallel()
	type page struct {
		date   time.Time
		prices []int64 // all sold in the second s, highest unit price first as the API lists them
	}
	s := time.Now().Add(-31 * time.Second).Truncate(time.Second)
	var serving atomic.Pointer[page]
	var e *env
	e = setup(t, 1, tiers.Active, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != provider.EndpointAuctionSold {
				next.ServeHTTP(w, r)
				return
			}
			p := serving.Load()
			rows := make([]string, len(p.prices))
			for i, price := range p.prices {
				rows[i] = fmt.Sprintf(`{"soldDate":%q,"itemId":%q,"count":1,"price":%[3]d,"unitPrice":%[3]d}`,
					s.In(provider.KST).Format(provider.DateLayout), e.items[0].ItemID, price)
			}
			w.Header().Set("Date", p.date.UTC().Format(http.TimeFormat))
			fmt.Fprintf(w, `{"rows":[%s]}`, strings.Join(rows, ","))
		})
	})
	ctx := context.Background()
	collect := func(p page) {
		t.Helper()
		serving.Store(&p)
		e.due(t)
		if sum, err := e.dispatcher(t, Config{}, nil).RunOnce(ctx); err != nil || sum.Collected != 1 {
			t.Fatalf("pass: %s %v", sum, err)
		}
	}
	collect(page{date: s.Add(time.Second), prices: []int64{300, 100}})
	collect(page{date: s.Add(10 * time.Second), prices: []int64{300, 200, 100}})
	var stored []int64
	if err := e.pool.QueryRow(ctx, `SELECT coalesce(array_agg(unit_price ORDER BY unit_price DESC), '{}') FROM auction_sales`).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(stored, []int64{300, 200, 100}) {
		t.Fatalf("stored unit prices %v; want the second's three sales once each", stored)
	}
}

// A provider whose clock trails ours by minutes: a sale made after the packed call is newer
// than the packed answer by the provider's clock, though older than our clock less the shadow
// check's minute. Judged by the packed answer's Date, it is not a sale the packed answer
// lacked, and packing stays on.
func TestShadowCheckReadsSalesOnTheProvidersClock(t *testing.T) {
	t.Parallel()
	behind := func() time.Time { return time.Now().Add(-5 * time.Minute) }
	var after atomic.Bool  // the second pass, whose items are packed: each single-item sales answer has a sale more
	var extra atomic.Int64 // sales made since the packed call, one per single-item sales call
	e := setupSim(t, 12, tiers.Cold, neoplesim.Options{Seed: 7, Now: behind}, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.URL.Query().Get("itemId")
			if r.URL.Path != provider.EndpointAuctionSold || id == "" || !after.Load() {
				next.ServeHTTP(w, r)
				return
			}
			serveRewritingRows(w, r, next, func(rows []map[string]any) []map[string]any {
				extra.Add(1)
				sale := map[string]any{"soldDate": behind().In(provider.KST).Format(provider.DateLayout), "itemId": id,
					"count": json.Number("1"), "price": json.Number("7"), "unitPrice": json.Number("7")}
				return append([]map[string]any{sale}, rows...)
			})
		})
	})
	ctx := context.Background()
	checks := &salesShadows{}
	cfg := Config{BatchSize: 20, Concurrency: 2, PackSize: 10, PackMaxListings: 60, PackMaxSales: packMaxSalesMax,
		ShadowFraction: 1, Observer: checks}
	core, logs := observer.New(zapcore.WarnLevel)
	d := e.dispatcher(t, cfg, zap.New(core))
	for pass := range 2 {
		after.Store(pass == 1)
		e.due(t)
		if _, err := d.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if checks.n.Load() == 0 || extra.Load() == 0 {
		t.Fatal("no packed sales answer was shadow-checked: the test proves nothing")
	}
	// Every answer was 5 minutes behind: said once, not per answer.
	if n := logs.FilterMessageSnippet("the provider's clock is off the database's").Len(); n != 1 {
		t.Fatalf("%d warnings of the provider's clock, want 1: %v", n, logs.All())
	}
	st, err := ReadPackingStatus(ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range st {
		if !s.Enabled {
			t.Fatalf("packing switched off by a sale made after the packed call: %+v", s)
		}
	}
}

// salesShadows counts the shadow checks of packed sales answers.
type salesShadows struct {
	nopObserver
	n atomic.Int64
}

func (o *salesShadows) Shadowed(endpoint string, _ bool) {
	if endpoint == provider.EndpointAuctionSold {
		o.n.Add(1)
	}
}
