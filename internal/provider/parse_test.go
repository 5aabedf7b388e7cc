package provider

import (
	"fmt"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"
)

const auctionSample = `{"rows":[{"auctionNo":1492936272,"regDate":"2026-05-01 01:24:58","expireDate":"2026-05-02 01:24:58",
 "itemId":"785e56a0ed4e3efd573da1f56a45217d","itemName":"무색 큐브 조각","itemAvailableLevel":1,"itemRarity":"언커먼",
 "itemTypeId":"8bcda5578720a4dc56b1736ccbe06c0f","itemType":"스태커블","itemTypeDetailId":"8ed8b6c0d70f2661f86bab11630d69f9",
 "itemTypeDetail":"재료","refine":0,"reinforce":0,"amplificationName":null,"fame":0,"count":15000,"regCount":15000,
 "price":-1,"currentPrice":735000,"unitPrice":49,"averagePrice":40},
 {"auctionNo":1492936273,"regDate":"2026-05-01 02:00:00","expireDate":"2026-05-02 02:00:00","itemId":"785e56a0ed4e3efd573da1f56a45217d",
 "count":3,"price":-1,"currentPrice":150,"unitPrice":50,"averagePrice":0}]}`

const soldSample = `{"rows":[{"soldDate":"2026-05-01 01:24:58","itemId":"785e56a0ed4e3efd573da1f56a45217d","itemName":"무색 큐브 조각",
 "itemRarity":"언커먼","itemTypeDetail":"재료","refine":0,"reinforce":0,"amplificationName":null,"count":10,"price":490,"unitPrice":49},
 {"soldDate":"2026-05-01 01:24:58","itemId":"785e56a0ed4e3efd573da1f56a45217d","itemName":"무색 큐브 조각","count":10,"price":490,"unitPrice":49}]}`

func TestParseAuction(t *testing.T) {
	got, err := parseAuction([]byte(auctionSample))
	if err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 4, 30, 16, 24, 58, 0, time.UTC)
	if len(got) != 2 || !got[0].RegDate.Equal(want) || got[0].ExpireDate.Sub(got[0].RegDate) != 24*time.Hour {
		t.Fatalf("dates not read as KST: %+v", got)
	}
	if got[0].RegCount != 15000 || got[1].RegCount != 3 || got[0].UnitPrice != 49 || got[0].CurrentPrice != 735000 {
		t.Fatalf("regCount ?? count or prices wrong: %+v", got)
	}
	for _, bad := range []string{
		`{}`, `{"rows":null}`, `[]`, `{"rows":[{"itemId":"a","regDate":"yesterday"}]}`,
		`{"rows":[{"itemId":"a","unitPrice":"49"}]}`, `{"rows":[{"unitPrice":49}]}`, `{"rows":[`,
	} {
		if _, err := parseAuction([]byte(bad)); err == nil {
			t.Errorf("parseAuction(%s) accepted a malformed body", bad)
		}
	}
	if rows, err := parseAuction([]byte(`{"rows":[]}`)); err != nil || len(rows) != 0 {
		t.Fatalf("empty rows: %v %v", rows, err)
	}
	// expireDate is read by nothing: null or odd, it costs the listing nothing.
	for _, exp := range []string{`null`, `""`, `"2026-05"`} {
		body := `{"rows":[{"itemId":"a","regDate":"2026-05-01 02:00:00","expireDate":` + exp + `,"count":3,"unitPrice":50}]}`
		if rows, err := parseAuction([]byte(body)); err != nil || len(rows) != 1 || !rows[0].ExpireDate.IsZero() {
			t.Errorf("expireDate %s: %+v %v; want the listing, its expiry unknown", exp, rows, err)
		}
	}
	// averagePrice is the API's own derived figure: a fractional one is rounded, and an odd
	// one is "no average", never the whole answer lost.
	for avg, want := range map[string]int64{`40`: 40, `40.5`: 41, `39.4`: 39, `9007199254740993`: 9007199254740993,
		`null`: 0, `"40"`: 0, `1e300`: 0, `{}`: 0} {
		body := `{"rows":[{"itemId":"a","regDate":"2026-05-01 02:00:00","count":3,"unitPrice":50,"averagePrice":` + avg + `}]}`
		if rows, err := parseAuction([]byte(body)); err != nil || len(rows) != 1 || rows[0].AveragePrice != want {
			t.Errorf("averagePrice %s: %+v %v; want the listing, its average %d", avg, rows, err, want)
		}
	}
}

func TestParseSold(t *testing.T) {
	got, err := parseSold([]byte(soldSample))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0] != got[1] {
		t.Fatalf("identical rows must both be kept: %+v", got)
	}
	if _, err := parseSold([]byte(`{"rows":[{"itemId":"a"}]}`)); err == nil {
		t.Fatal("a sale without soldDate was accepted")
	}
}

// An answer holds at most the largest limit for each id a call may name; more is no answer the
// API gives (8 MiB of "{}" from a broken gateway is millions of rows, over a GiB decoded), and
// it is refused as malformed before it is decoded whole.
func TestAnAnswerOfMoreRowsThanAnyCallAsksForIsMalformed(t *testing.T) {
	sale := `{"itemId":"a","soldDate":"2026-05-01 02:00:00","count":1,"price":5,"unitPrice":5}`
	body := func(n int) []byte { return []byte(`{"rows":[` + strings.Repeat(sale+",", n-1) + sale + `]}`) }
	if rows, err := parseSold(body(maxSaleRows)); err != nil || len(rows) != maxSaleRows {
		t.Fatalf("%d sales, as many as a packed call may get: %d rows, %v", maxSaleRows, len(rows), err)
	}
	_, err := parseSold(body(maxSaleRows + 1))
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("more than %d rows", maxSaleRows)) {
		t.Fatalf("%d sales: %v, want malformed, naming the most a call gets", maxSaleRows+1, err)
	}
	empties := []byte(`{"rows":[` + strings.Repeat("{},", 2_000_000) + `{}]}`)
	if _, err := parseAuction(empties); err == nil || !strings.Contains(err.Error(), "more than") {
		t.Fatalf("two million empty listings: %v, want refused for their number", err)
	}
	if _, err := parseItems(body(MaxItemsLimit + 1)); err == nil {
		t.Fatalf("%d items from a search that asks for at most %d: accepted", MaxItemsLimit+1, MaxItemsLimit)
	}
}

func FuzzParseAuction(f *testing.F) {
	for _, s := range []string{auctionSample, `{"rows":[]}`, `{"rows":[{"regDate":null}]}`, `{"rows":[{"regCount":-1,"itemId":"x"}]}`, `{"rows"`, ``} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, err := parseAuction(b)
		if err != nil && rows != nil {
			t.Fatal("rows returned with an error")
		}
	})
}

func FuzzParseSold(f *testing.F) {
	for _, s := range []string{soldSample, `{"rows":[]}`, `{"rows":[{"soldDate":"2026-13-01 00:00:00","itemId":"x"}]}`, `{"rows":[{}]}`, `nul`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		rows, err := parseSold(b)
		if err != nil && rows != nil {
			t.Fatal("rows returned with an error")
		}
		for _, r := range rows {
			if r.SoldAt.IsZero() || r.ItemID == "" {
				t.Fatalf("accepted a sale without date or item: %+v", r)
			}
		}
	})
}

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		status int
		code   string
		want   Class
	}{
		{503, "DNF980", ClassMaintenance}, {503, "", ClassMaintenance},
		{429, "API002", ClassRateLimited}, {400, "API002", ClassRateLimited}, {400, "API008", ClassRateLimited}, {429, "", ClassRateLimited},
		{401, "API000", ClassConfig}, {401, "API003", ClassConfig}, {401, "API004", ClassConfig}, {401, "API005", ClassConfig}, {401, "", ClassConfig},
		{404, "DNF003", ClassItem}, {400, "DNF901", ClassItem}, {400, "API901", ClassItem}, {404, "DNF004", ClassItem},
		{404, "API900", ClassEndpoint}, {404, "DNF900", ClassEndpoint}, {400, "DNF008", ClassBug}, {404, "", ClassEndpoint}, {400, "", ClassEndpoint},
		{500, "DNF999", ClassTransient}, {500, "API999", ClassTransient}, {301, "", ClassEndpoint}, {502, "", ClassTransient}, {504, "", ClassTransient},
		// The API's own body under a code not in the table is about the request, not the address.
		{400, "DNF001", ClassItem}, {404, "DNF123", ClassItem}, {400, "API006", ClassEndpoint}, {500, "DNF001", ClassTransient}, {200, "DNF980", ClassMaintenance},
	} {
		if got := classify(c.status, c.code, ""); got != c.want {
			t.Errorf("classify(%d, %q) = %s, want %s", c.status, c.code, got, c.want)
		}
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 5, 1, 0, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"": 0, "7": 7 * time.Second, "-3": 0, "soon": 0, "-99999999999999999999": 0,
		"99999999999999999999": math.MaxInt64, "9999999999": math.MaxInt64,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Hour).Format(http.TimeFormat):       0,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %s, want %s", v, got, want)
		}
	}
}
