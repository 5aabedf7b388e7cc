package dispatcher

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/tiers"
)

// fullPages answers item 0's /df/auction-sold, alone or packed, with a full page of sales from
// the last minutes, and its /df/auction with a full page of listings; when hostile, one row of
// each is dated 2099, which the row check drops. Item 1 has no sales.
func fullPages(e **env, hostile bool) func(next http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			q := r.URL.Query()
			ids := strings.Split(q.Get("itemIds")+q.Get("itemId"), ",")
			limit, _ := strconv.Atoi(q.Get("limit"))
			first := (*e).items[0].ItemID
			now := time.Now().In(provider.KST)
			rows := make([]string, 0, limit)
			switch {
			case r.URL.Path == provider.EndpointAuctionSold && ids[0] == first:
				for i := range limit {
					at := now.Add(-time.Duration(i+1) * time.Second).Format(provider.DateLayout)
					if hostile && i == 0 {
						at = "2099-01-01 00:00:00"
					}
					rows = append(rows, fmt.Sprintf(`{"soldDate":%q,"itemId":%q,"count":1,"price":5,"unitPrice":5}`, at, first))
				}
			case r.URL.Path == provider.EndpointAuctionSold:
			case r.URL.Path == provider.EndpointAuction && ids[0] == first && len(ids) == 1:
				for i := range limit {
					at := now.Add(-time.Hour).Format(provider.DateLayout)
					if hostile && i == limit-1 {
						at = "2099-01-01 00:00:00"
					}
					rows = append(rows, fmt.Sprintf(`{"itemId":%q,"regDate":%q,"count":1,"unitPrice":%d}`, first, at, 5+i))
				}
			default:
				next.ServeHTTP(w, r)
				return
			}
			fmt.Fprintf(w, `{"rows":[%s]}`, strings.Join(rows, ","))
		})
	}
}

// gapsAfterOnePass collects both items once, each known to have sold last a day ago, and
// returns item 0's counted gaps, its snapshot's listings_truncated and sales_gap flags (stored and
// in the event), and item 1's gaps.
func gapsAfterOnePass(t *testing.T, hostile bool, cfg Config) (gaps int, truncated, evGap bool, other int) {
	t.Helper()
	var e *env
	e = setup(t, 2, tiers.Hot, fullPages(&e, hostile))
	ctx := context.Background()
	// Collected before: a few listings, no recent sales (small enough to share calls).
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET seen_listing_count = 3, est_sales = 0, est_unchanged_seconds = 3600,
		est_collections = 1, last_sale_at = now() - interval '1 day', last_collected_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	if s, err := e.dispatcher(t, cfg, nil).RunOnce(ctx); err != nil || s.Collected != 2 {
		t.Fatalf("pass: %s, %v; want both collected", s, err)
	}
	if err := e.pool.QueryRow(ctx, `
		SELECT t.sales_gaps, s.listings_truncated, (o.payload->>'sales_gap')::bool,
		       (SELECT sales_gaps FROM tracked_items WHERE item_id = $2)
		FROM tracked_items t JOIN auction_snapshots s USING (item_id) JOIN outbox o USING (snapshot_id)
		WHERE t.item_id = $1`, e.items[0].ItemID, e.items[1].ItemID).Scan(&gaps, &truncated, &evGap, &other); err != nil {
		t.Fatal(err)
	}
	return gaps, truncated, evGap, other
}

// Fullness is what the provider sent, not what survived the row check: a full page with a
// dropped row still cut older sales off (a gap) and still cut listings off (truncated).
func TestAPageWithRowsDroppedIsStillFull(t *testing.T) {
	t.Parallel()
	gaps, truncated, evGap, other := gapsAfterOnePass(t, true, Config{})
	if gaps != 1 || !evGap || !truncated || other != 0 {
		t.Errorf("full pages with one row dropped: item gaps %d (event %v), listings truncated %v, other item's gaps %d; want 1, true, true, 0",
			gaps, evGap, truncated, other)
	}
}

// An item packed because it sold little that then sold a page's worth is fetched alone, and
// that fetch counts the gap like any other.
func TestAPackedItemFetchedAloneCountsItsGap(t *testing.T) {
	t.Parallel()
	gaps, _, evGap, other := gapsAfterOnePass(t, false, Config{PackSize: 10, PackMaxListings: 100, PackMaxSales: 5})
	if gaps != 1 || !evGap || other != 0 {
		t.Errorf("packed item that lost sales: gaps %d (event %v), other item's gaps %d; want 1, true, 0", gaps, evGap, other)
	}
}

// After an outage every item that sold more than a page meanwhile finds a gap: one warning
// counts them and names a few, not a line per item (240 a second while a daemon caught up).
func TestSalesGapsAreLoggedOncePerPass(t *testing.T) {
	t.Parallel()
	const n = 12
	e := setup(t, n, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != provider.EndpointAuctionSold {
				next.ServeHTTP(w, r)
				return
			}
			q := r.URL.Query()
			limit, _ := strconv.Atoi(q.Get("limit"))
			now := time.Now().In(provider.KST)
			rows := make([]string, 0, limit)
			for i := range limit {
				at := now.Add(-time.Duration(i+1) * time.Second).Format(provider.DateLayout)
				rows = append(rows, fmt.Sprintf(`{"soldDate":%q,"itemId":%q,"count":1,"price":5,"unitPrice":5}`, at, q.Get("itemId")))
			}
			fmt.Fprintf(w, `{"rows":[%s]}`, strings.Join(rows, ","))
		})
	})
	ctx := context.Background()
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET last_sale_at = now() - interval '1 day',
		last_collected_at = now() - interval '1 hour'`); err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	if s, err := e.dispatcher(t, Config{Concurrency: 2}, zap.New(core)).RunOnce(ctx); err != nil || s.Collected != n {
		t.Fatalf("pass: %s, %v; want every item collected", s, err)
	}
	lines := logs.FilterMessageSnippet("sales lost").All()
	if len(lines) != 1 {
		t.Fatalf("%d sales-gap lines for %d items with a gap, want one", len(lines), n)
	}
	if f := lines[0].ContextMap(); f["items"] != int64(n) || len(f["item_ids"].([]any)) != failureExamples {
		t.Fatalf("the gap line: %v; want %d items and %d ids", f, n, failureExamples)
	}
}
