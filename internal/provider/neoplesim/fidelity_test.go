package neoplesim_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
)

func TestErrorsUseTheRealMessageTexts(t *testing.T) {
	f := newFixture(t, neoplesim.Options{Items: 30})
	message := func(r response) string {
		var env struct {
			Error struct{ Message string } `json:"error"`
		}
		_ = json.Unmarshal(r.body, &env)
		return env.Error.Message
	}
	r := f.market(t, "/df/auction", url.Values{"itemName": {"꾸러미"}, "wordType": {"full"}})
	if wantError(t, r, 400, "DNF007"); message(r) != "SEARCH_ITEM_OVER" {
		t.Fatalf("DNF007 message %q", message(r))
	}
	if r := f.market(t, "/df/auction", nil); !strings.HasPrefix(message(r), "NOT_FOUND_SEARCH_VALUE") {
		t.Fatalf("DNF901 message %q", message(r))
	}
	// The rate-limit answer: status from the option, text containing APIKEY_LIMIT.
	rl := newFixture(t, neoplesim.Options{Rate: 1, RateLimitStatus: 400})
	limited := false
	for range 10 {
		if r := rl.market(t, "/df/auction-sold", url.Values{"itemId": {rl.sim.Catalog()[0].ItemID}}); r.Error.Code == "API002" {
			wantError(t, r, 400, "API002")
			if !strings.Contains(message(r), "APIKEY_LIMIT") {
				t.Fatalf("rate-limit message %q lacks APIKEY_LIMIT", message(r))
			}
			limited = true
		}
	}
	if !limited {
		t.Fatal("ten back-to-back requests at 1/s were never rate-limited")
	}
	f.sim.SetMaintenance(true)
	if r := f.market(t, "/df/auction", nil); message(r) != "SYSTEM_INSPECT" {
		t.Fatalf("DNF980 message %q", message(r))
	}

	ko := newFixture(t, neoplesim.Options{KoreanMessages: true})
	r = ko.market(t, "/df/auction", nil)
	wantError(t, r, 400, "DNF901")
	if !strings.ContainsFunc(message(r), func(c rune) bool { return unicode.Is(unicode.Hangul, c) }) {
		t.Fatalf("Korean message expected, got %q", message(r))
	}
}

func TestNameSearchFindingNothingCanAnswerAPI001(t *testing.T) {
	plain := newFixture(t, neoplesim.Options{})
	if r := plain.get(t, neoplesim.DefaultItemKey, "/df/items", url.Values{"itemName": {"없는 아이템"}}); r.status != 200 || len(r.Rows) != 0 {
		t.Fatalf("default: HTTP %d %s, want 200 with no rows", r.status, r.body)
	}
	f := newFixture(t, neoplesim.Options{NotFoundAPI001: true})
	wantError(t, f.get(t, neoplesim.DefaultItemKey, "/df/items", url.Values{"itemName": {"없는 아이템"}}), 400, "API001")
	wantError(t, f.market(t, "/df/auction", url.Values{"itemName": {"없는 아이템"}}), 400, "API001")
	if r := f.get(t, neoplesim.DefaultItemKey, "/df/items", url.Values{"itemName": {f.sim.Catalog()[0].ItemName}}); r.status != 200 || len(r.Rows) != 1 {
		t.Fatalf("a name that exists: HTTP %d %s", r.status, r.body)
	}
}

func TestRowsCarryTheOptionalObjectsAndMetadataOfRealAnswers(t *testing.T) {
	f := newFixture(t, neoplesim.Options{Items: 60, Seed: 2})
	seen := map[string]bool{}
	regEqual, stackRows, sweeps := 0, 0, 0
	for _, it := range f.sim.Catalog() {
		p := url.Values{"itemId": {it.ItemID}, "limit": {"400"}}
		for _, row := range f.market(t, "/df/auction", p).Rows {
			for _, k := range []string{"exchange", "upgrade", "upgradeMax", "avatar", "jobs", "setItemName"} {
				if _, ok := row[k]; ok {
					seen[k] = true
				}
			}
			if reg, ok := row["regCount"]; ok {
				stackRows++
				if reg == row["count"] {
					regEqual++
				}
			}
		}
		rows := f.market(t, "/df/auction-sold", url.Values{"itemId": {it.ItemID}, "limit": {"100"}}).Rows
		for i, row := range rows {
			for _, k := range []string{"soldDate", "itemId", "itemName", "itemAvailableLevel", "itemRarity", "itemTypeId",
				"itemType", "itemTypeDetailId", "itemTypeDetail", "refine", "reinforce", "amplificationName", "fame",
				"count", "price", "unitPrice"} {
				if _, ok := row[k]; !ok {
					t.Fatalf("sold row lacks %s: %v", k, row)
				}
			}
			// A sweep: three or more sales in one second at different prices, highest first.
			if i >= 2 && rows[i-2]["soldDate"] == row["soldDate"] && rows[i-1]["soldDate"] == row["soldDate"] {
				a, b, c := rows[i-2]["unitPrice"].(float64), rows[i-1]["unitPrice"].(float64), row["unitPrice"].(float64)
				if a < b || b < c {
					t.Fatalf("same-second sales not highest unit price first: %v %v %v", a, b, c)
				}
				if a != c {
					sweeps++
				}
			}
		}
	}
	for _, k := range []string{"exchange", "upgrade", "upgradeMax", "avatar", "jobs", "setItemName"} {
		if !seen[k] {
			t.Errorf("no listing row carries %s", k)
		}
	}
	if stackRows == 0 || float64(regEqual) < 0.7*float64(stackRows) || regEqual == stackRows {
		t.Errorf("regCount equals count on %d of %d stackable rows; want most but not all", regEqual, stackRows)
	}
	if sweeps == 0 {
		t.Error("no sweep (several sales in one second at different prices)")
	}
}

// TestItemIDsAnswerShapes checks every shape an itemIds answer can take against the same
// items fetched one by one.
func TestItemIDsAnswerShapes(t *testing.T) {
	for _, lim := range []string{neoplesim.LimitPerCall, neoplesim.LimitPerItem} {
		for _, ord := range []string{neoplesim.OrderMerged, neoplesim.OrderGrouped} {
			t.Run(lim+"/"+ord, func(t *testing.T) {
				f := newFixture(t, neoplesim.Options{Items: 30, Seed: 4, ItemIDsLimit: lim, ItemIDsOrder: ord})
				cat := f.sim.Catalog()
				var ids []string
				for _, it := range cat[:6] { // includes cat[3], which has more listings than the cap
					ids = append(ids, it.ItemID)
				}
				for _, ep := range []struct {
					path, limit, key string
					desc             bool
				}{{"/df/auction", "30", "unitPrice", false}, {"/df/auction-sold", "20", "soldDate", true}} {
					p := url.Values{"itemIds": {strings.Join(ids, ",")}, "limit": {ep.limit}}
					if ep.path == "/df/auction" {
						p.Set("sort", "unitPrice:asc")
					}
					rows := f.market(t, ep.path, p).Rows
					byItem := map[string][]string{}
					for _, r := range rows {
						id := r["itemId"].(string)
						if !slices.Contains(ids, id) {
							t.Fatalf("%s: a row of item %s, which was not asked for", ep.path, id)
						}
						byItem[id] = append(byItem[id], fmt.Sprint(r))
					}
					if lim == neoplesim.LimitPerCall && fmt.Sprint(len(rows)) != ep.limit {
						t.Fatalf("%s per-call: %d rows, want the limit %s (these items have more)", ep.path, len(rows), ep.limit)
					}
					for _, id := range ids {
						single := f.market(t, ep.path, url.Values{"itemId": {id}, "limit": {ep.limit}, "sort": p["sort"]}).Rows
						got := byItem[id]
						if len(got) > len(single) {
							t.Fatalf("%s: item %s has %d rows packed, %d alone", ep.path, id, len(got), len(single))
						}
						// An item's part is always the head of its own answer: cut, never reordered.
						for i := range got {
							if got[i] != fmt.Sprint(single[i]) {
								t.Fatalf("%s: item %s row %d differs from its single-item answer", ep.path, id, i)
							}
						}
						if lim == neoplesim.LimitPerItem && len(got) != len(single) {
							t.Fatalf("%s per-item: item %s has %d rows, alone %d", ep.path, id, len(got), len(single))
						}
					}
					sorted := slices.IsSortedFunc(rows, func(a, b map[string]any) int {
						x, y := fmt.Sprint(a[ep.key]), fmt.Sprint(b[ep.key])
						if ep.key == "unitPrice" {
							x, y = fmt.Sprintf("%020.0f", a[ep.key]), fmt.Sprintf("%020.0f", b[ep.key])
						}
						if ep.desc {
							x, y = y, x
						}
						return strings.Compare(x, y)
					})
					// Grouped: each item's rows are one run, items in the order asked.
					grouped := true
					for i := 1; i < len(rows); i++ {
						if rows[i]["itemId"] != rows[i-1]["itemId"] &&
							slices.Index(ids, rows[i]["itemId"].(string)) < slices.Index(ids, rows[i-1]["itemId"].(string)) {
							grouped = false
						}
					}
					if ord == neoplesim.OrderMerged && !sorted {
						t.Fatalf("%s merged: rows not in one order", ep.path)
					}
					if ord == neoplesim.OrderGrouped && !grouped {
						t.Fatalf("%s grouped: rows not item by item in the order asked", ep.path)
					}
				}
			})
		}
	}
}
