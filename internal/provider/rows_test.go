package provider_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/provider"
)

const askedID = "785e56a0ed4e3efd573da1f56a45217d"

func TestRowCheckDropsImpossibleDatesAndForeignRows(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, provider.KST)
	c := provider.RowCheck{Now: now, FutureTolerance: 24 * time.Hour}
	sales := []provider.Sale{
		{ItemID: askedID, SoldAt: now.Add(-time.Hour), Count: 1, Price: 5},                               // kept
		{ItemID: askedID, SoldAt: now.Add(23 * time.Hour), Count: 1, UnitPrice: 5},                       // clock skew within tolerance: kept
		{ItemID: askedID, SoldAt: time.Date(2099, 1, 1, 0, 0, 0, 0, provider.KST), Count: 1, Price: 5},   // future
		{ItemID: askedID, SoldAt: time.Date(2004, 12, 31, 0, 0, 0, 0, provider.KST), Count: 1, Price: 5}, // before launch
		{ItemID: "someone-else", SoldAt: now.Add(-time.Hour), Count: 1, Price: 5},                        // foreign
		{ItemID: askedID, SoldAt: now.Add(-time.Hour), Count: 0, Price: 5},                               // no units
		{ItemID: askedID, SoldAt: now.Add(-time.Hour), Count: 2, Price: -10, UnitPrice: -5},              // negative price
		{ItemID: askedID, SoldAt: now.Add(-time.Hour), Count: 1 << 40, UnitPrice: 1 << 40},               // value past int64
		{ItemID: askedID, SoldAt: now.Add(-time.Hour), Count: 3},                                         // gold for nothing
		{ItemID: askedID, SoldAt: now.Add(-time.Hour), Count: provider.MaxUnits + 1, UnitPrice: 1},       // units no stack holds
	}
	kept, rej := c.Sales(sales, provider.NewIDSet(askedID))
	if len(kept) != 2 || rej.Reasons[provider.RejectFutureDate] != 1 || rej.Reasons[provider.RejectAncientDate] != 1 ||
		rej.Reasons[provider.RejectForeignItem] != 1 || rej.Reasons[provider.RejectBadAmount] != 5 {
		t.Fatalf("kept %d, rejected %v; want 2 kept, one of each date reason and 5 bad amounts", len(kept), rej)
	}
	if !slices.Equal(rej.ItemIDs, []string{askedID, "someone-else"}) {
		t.Fatalf("rejected rows' items %v, want each once in answer order", rej.ItemIDs)
	}
	// The set holds every id a packed call asked for.
	kept, rej = c.Sales(sales[4:5], provider.NewIDSet(askedID, "someone-else"))
	if len(kept) != 1 || rej.Total() != 0 {
		t.Fatalf("a row of another requested id was dropped: kept %d, rejected %v", len(kept), rej)
	}
	listings := []provider.Listing{{ItemID: askedID, RegDate: now.Add(48 * time.Hour)}, {ItemID: askedID},
		{ItemID: askedID, Count: 1 << 40, UnitPrice: 1 << 40},           // units no stack holds
		{ItemID: askedID, Count: provider.MaxUnits, UnitPrice: 1 << 40}, // value past int64
		{ItemID: askedID, Count: 1, UnitPrice: -1}}                      // the API's -1: kept, the snapshot ignores it
	kept2, rej := c.Listings(listings, provider.NewIDSet(askedID))
	if len(kept2) != 2 || rej.Reasons[provider.RejectFutureDate] != 1 || rej.Reasons[provider.RejectBadAmount] != 2 {
		t.Fatalf("listings kept %d, rejected %v; want 2 kept, a future date and two bad amounts dropped", len(kept2), rej)
	}
}

// Rows of many other items are each counted, and the first ten of their ids kept for the log:
// keeping every distinct id searched the list once per row, quadratic in a broken answer.
func TestManyForeignRowsKeepTenOfTheirIDs(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, provider.KST)
	c := provider.RowCheck{Now: now, FutureTolerance: 24 * time.Hour}
	sales := make([]provider.Sale, 50_000)
	for i := range sales {
		sales[i] = provider.Sale{ItemID: fmt.Sprintf("other-%d", i), SoldAt: now.Add(-time.Hour), Count: 1, Price: 5}
	}
	kept, rej := c.Sales(sales, provider.NewIDSet(askedID))
	if len(kept) != 0 || rej.Reasons[provider.RejectForeignItem] != len(sales) {
		t.Fatalf("kept %d, rejected %v; want every row dropped as foreign", len(kept), rej.Reasons)
	}
	if len(rej.ItemIDs) != 10 || rej.ItemIDs[0] != "other-0" || rej.ItemIDs[9] != "other-9" {
		t.Fatalf("kept ids %v, want the first ten in answer order", rej.ItemIDs)
	}
}

// One auction is one listing: a row repeating an earlier auctionNo of the answer (a broken or
// doubled page) is dropped, so the snapshot does not count its units twice. A listing without
// an auctionNo cannot be told apart and is kept.
func TestARepeatedAuctionIsOneListing(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, provider.KST)
	c := provider.RowCheck{Now: now, FutureTolerance: 24 * time.Hour}
	l := func(no int64, count int64) provider.Listing {
		return provider.Listing{AuctionNo: no, ItemID: askedID, RegDate: now.Add(-time.Hour), Count: count, UnitPrice: 10}
	}
	kept, rej := c.Listings([]provider.Listing{l(7, 3), l(8, 1), l(7, 3), l(0, 2), l(0, 2)}, provider.NewIDSet(askedID))
	if len(kept) != 4 || rej.Reasons[provider.RejectDuplicate] != 1 || rej.Total() != 1 {
		t.Fatalf("kept %d, rejected %v; want the repeated auction 7 dropped once, the rest kept", len(kept), rej.Reasons)
	}
}

func stubClient(t *testing.T, h http.HandlerFunc, mod func(*provider.ClientConfig)) *provider.Client {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cfg := provider.ClientConfig{Workload: provider.WorkloadMarket, BaseURL: srv.URL, Key: "k"}
	if mod != nil {
		mod(&cfg)
	}
	cl, err := provider.NewClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

func TestClientDropsRowsItCannotTrustAndCountsThem(t *testing.T) {
	soon := time.Now().In(provider.KST).Add(-time.Minute).Format(provider.DateLayout)
	cl := stubClient(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == provider.EndpointAuctionSold {
			fmt.Fprintf(w, `{"rows":[{"soldDate":"2099-01-01 00:00:00","itemId":%[1]q,"count":1,"price":5,"unitPrice":5},
				{"soldDate":%[2]q,"itemId":%[1]q,"count":1,"price":5,"unitPrice":5},
				{"soldDate":"1999-01-01 00:00:00","itemId":%[1]q,"count":1,"price":5,"unitPrice":5}]}`, askedID, soon)
			return
		}
		fmt.Fprintf(w, `{"rows":[{"itemId":"not-asked","regDate":%q,"count":1,"unitPrice":5}]}`, soon)
	}, nil)
	salesA, err := cl.AuctionSold(context.Background(), askedID)
	sales := salesA.Rows
	if err != nil || len(sales) != 1 || sales[0].SoldAt.Year() == 2099 {
		t.Fatalf("sales %v, %v: want only the real sale", sales, err)
	}
	_, err = cl.Auction(context.Background(), askedID)
	if pe := wantClass(t, err, provider.ClassRejected); pe.Status != http.StatusOK {
		t.Fatalf("an answer of only foreign rows: %+v", pe)
	}
	// An answer about the asked item whose every row has an impossible amount is that item's
	// answer without those rows: no sales, not a failed collection.
	badOnly := stubClient(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"rows":[{"soldDate":%[2]q,"itemId":%[1]q,"count":0,"price":0,"unitPrice":0}]}`, askedID, soon)
	}, nil)
	if a, err := badOnly.AuctionSold(context.Background(), askedID); err != nil || len(a.Rows) != 0 || a.Sent != 1 {
		t.Fatalf("an answer of one zero sale: %v, sent %d, %v; want no sales and no error", a.Rows, a.Sent, err)
	}
	st := cl.Stats().Rejected
	if st[provider.RejectFutureDate] != 1 || st[provider.RejectAncientDate] != 1 || st[provider.RejectForeignItem] != 1 {
		t.Fatalf("rejected counts %v", st)
	}
}

func TestRetryAfterIsCapped(t *testing.T) {
	for _, v := range []string{"999999999", "99999999999999999999999", time.Now().Add(1000 * time.Hour).UTC().Format(http.TimeFormat)} {
		cl := stubClient(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Retry-After", v)
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{"status":429,"code":"API002","message":"APIKEY_USAGE_EXCEEDED"}}`))
		}, func(c *provider.ClientConfig) { c.MaxRetryAfter = 90 * time.Second })
		_, err := cl.Auction(context.Background(), askedID)
		if pe := wantClass(t, err, provider.ClassRateLimited); pe.RetryAfter != 90*time.Second {
			t.Fatalf("Retry-After %q gave %s, want the 90s cap", v, pe.RetryAfter)
		}
	}
}

// A dated Retry-After is read against the provider's own clock (its Date header): a provider
// whose clock is an hour behind this host's, asking for 40 s, gets 40 s, not nothing.
func TestADatedRetryAfterIsReadAgainstTheProvidersClock(t *testing.T) {
	theirs := time.Now().Add(-time.Hour).UTC().Truncate(time.Second)
	cl := stubClient(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Date", theirs.Format(http.TimeFormat))
		w.Header().Set("Retry-After", theirs.Add(40*time.Second).Format(http.TimeFormat))
		w.WriteHeader(http.StatusTooManyRequests)
		_, _ = w.Write([]byte(`{"error":{"status":429,"code":"API002","message":"APIKEY_USAGE_EXCEEDED"}}`))
	}, func(c *provider.ClientConfig) { c.MaxRetryAfter = 90 * time.Second })
	_, err := cl.Auction(context.Background(), askedID)
	if pe := wantClass(t, err, provider.ClassRateLimited); pe.RetryAfter != 40*time.Second {
		t.Fatalf("Retry-After 40 s after the answer's Date gave %s, want 40s", pe.RetryAfter)
	}
}

func TestPackedCallKeepsRowsOfEveryRequestedIDOnly(t *testing.T) {
	cl := stubClient(t, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"rows":[{"itemId":"a","regDate":"2026-01-01 00:00:00","count":1,"unitPrice":5},
			{"itemId":"b","regDate":"2026-01-01 00:00:00","count":1,"unitPrice":6},
			{"itemId":"z","regDate":"2026-01-01 00:00:00","count":1,"unitPrice":7}]}`))
	}, nil)
	rowsA, err := cl.AuctionMany(context.Background(), []string{"a", "b"})
	rows, sent := rowsA.Rows, rowsA.Sent
	if err != nil || len(rows) != 2 || rows[0].ItemID != "a" || rows[1].ItemID != "b" {
		t.Fatalf("rows %+v, %v: want a and b, not z", rows, err)
	}
	if sent != 3 {
		t.Fatalf("sent %d, want the 3 rows the provider sent (completeness is judged on them)", sent)
	}
	if n := cl.Stats().Rejected[provider.RejectForeignItem]; n != 1 {
		t.Fatalf("foreign rows counted %d, want 1", n)
	}
}

// The warning names the items whose rows were dropped, not every id a packed call asked for.
func TestRejectedRowsAreLoggedWithTheirItem(t *testing.T) {
	soon := time.Now().In(provider.KST).Add(-time.Minute).Format(provider.DateLayout)
	core, logs := observer.New(zap.WarnLevel)
	cl := stubClient(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"rows":[{"soldDate":%[1]q,"itemId":"item-a","count":1,"price":5,"unitPrice":5},
			{"soldDate":"2099-01-01 00:00:00","itemId":"item-b","count":1,"price":5,"unitPrice":5},
			{"soldDate":"2099-01-01 00:00:00","itemId":"item-b","count":1,"price":5,"unitPrice":5}]}`, soon)
	}, func(c *provider.ClientConfig) { c.Log = zap.New(core) })
	rowsA, err := cl.AuctionSoldMany(context.Background(), []string{"item-a", "item-b", "item-c"})
	rows := rowsA.Rows
	if err != nil || len(rows) != 1 {
		t.Fatalf("rows %v, %v: want item-a's sale", rows, err)
	}
	lines := logs.FilterMessage("provider rows rejected").All()
	if len(lines) != 1 {
		t.Fatalf("%d warnings for one answer, want 1", len(lines))
	}
	if got := lines[0].ContextMap()["item_ids"]; !reflect.DeepEqual(got, []any{"item-b"}) {
		t.Fatalf("item_ids %v, want [item-b]", got)
	}
}

// An answer carries its Date: the provider's clock, which dates its rows. It is read as that
// clock only within ClockTrust of ours; a missing or wild one leaves ours.
func TestAnAnswerCarriesTheProvidersClock(t *testing.T) {
	date := time.Now().Add(-30 * time.Second).Truncate(time.Second)
	cl := stubClient(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Date", date.UTC().Format(http.TimeFormat))
		fmt.Fprint(w, `{"rows":[]}`)
	}, nil)
	a, err := cl.AuctionSold(context.Background(), askedID)
	if err != nil || !a.Date.Equal(date) {
		t.Fatalf("answer Date %v, %v; want %v", a.Date, err, date)
	}
	ours := time.Now()
	if got := a.AnsweredAt(ours); !got.Equal(date) {
		t.Fatalf("answered at %v; want the provider's %v", got, date)
	}
	for _, d := range []time.Time{{}, ours.Add(provider.ClockTrust), ours.Add(-2 * provider.ClockTrust)} {
		a.Date = d
		if got := a.AnsweredAt(ours); !got.Equal(ours) {
			t.Fatalf("Date %v: answered at %v; want ours, %v", d, got, ours)
		}
	}
}
