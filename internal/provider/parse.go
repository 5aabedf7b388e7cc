package provider

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// DateLayout is how the API writes every date, always in KST.
const DateLayout = "2006-01-02 15:04:05"

// kstTime reads a "YYYY-MM-DD HH:MM:SS" KST date.
type kstTime struct{ time.Time }

func (t *kstTime) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("date %s: want a string", quote(b))
	}
	v, err := time.ParseInLocation(DateLayout, s, KST)
	if err != nil {
		return fmt.Errorf("date %q: want YYYY-MM-DD HH:MM:SS", quote([]byte(s)))
	}
	t.Time = v
	return nil
}

// looseKST is a kstTime nothing depends on: one the API leaves null or writes otherwise is
// zero, not a malformed answer that fails every listing of the item and counts toward DEGRADED.
type looseKST struct{ time.Time }

func (t *looseKST) UnmarshalJSON(b []byte) error {
	var v kstTime
	if v.UnmarshalJSON(b) == nil {
		t.Time = v.Time
	}
	return nil
}

// looseAverage is averagePrice, a figure the API derives (the recent average unit price) that
// no decision rests on: a fractional one is rounded, and null or any other value reads as 0
// (the API's own "no average"), not a malformed answer that fails every listing of the item
// and counts toward DEGRADED. Integers are read as integers, exact at any size.
type looseAverage int64

func (v *looseAverage) UnmarshalJSON(b []byte) error {
	var i int64
	if json.Unmarshal(b, &i) == nil {
		*v = looseAverage(i)
		return nil
	}
	var f float64
	if json.Unmarshal(b, &f) == nil && math.Abs(f) < math.MaxInt64/2 {
		*v = looseAverage(math.Round(f))
		return nil
	}
	*v = 0
	return nil
}

type wireListing struct {
	AuctionNo    int64        `json:"auctionNo"`
	RegDate      kstTime      `json:"regDate"`
	ExpireDate   looseKST     `json:"expireDate"`
	ItemID       string       `json:"itemId"`
	ItemName     string       `json:"itemName"`
	Count        int64        `json:"count"`
	RegCount     *int64       `json:"regCount"`
	UnitPrice    int64        `json:"unitPrice"`
	CurrentPrice int64        `json:"currentPrice"`
	AveragePrice looseAverage `json:"averagePrice"`
	// price is observed as -1 and deliberately not read.
}

type wireSale struct {
	SoldDate  kstTime `json:"soldDate"`
	ItemID    string  `json:"itemId"`
	ItemName  string  `json:"itemName"`
	Count     int64   `json:"count"`
	Price     int64   `json:"price"`
	UnitPrice int64   `json:"unitPrice"`
}

type wireItem struct {
	ItemID             string `json:"itemId"`
	ItemName           string `json:"itemName"`
	ItemRarity         string `json:"itemRarity"`
	ItemTypeID         string `json:"itemTypeId"`
	ItemType           string `json:"itemType"`
	ItemTypeDetailID   string `json:"itemTypeDetailId"`
	ItemTypeDetail     string `json:"itemTypeDetail"`
	ItemAvailableLevel int    `json:"itemAvailableLevel"`
	Fame               int    `json:"fame"`
}

// item cleans every text field: names and enum-like fields are provider text that is stored.
func (w wireItem) item() Item {
	return Item{
		ItemID: Clean(w.ItemID, MaxNameRunes), ItemName: Clean(w.ItemName, MaxNameRunes),
		ItemRarity: Clean(w.ItemRarity, MaxNameRunes), ItemTypeID: Clean(w.ItemTypeID, MaxNameRunes),
		ItemType: Clean(w.ItemType, MaxNameRunes), ItemTypeDetailID: Clean(w.ItemTypeDetailID, MaxNameRunes),
		ItemTypeDetail: Clean(w.ItemTypeDetail, MaxNameRunes), ItemAvailableLevel: w.ItemAvailableLevel, Fame: w.Fame,
	}
}

// decodeRows reads {"rows":[...]} of at most maxRows rows; a 200 without a rows array is
// malformed, not "no rows". The body (at most 8 MiB) is checked whole first, then the rows are
// decoded one at a time: 8 MiB of "{}" is millions of rows, over a GiB once decoded, and more
// than any call may ask for (maxRows: the endpoint's largest limit for every id a call names).
func decodeRows[T any](body []byte, maxRows int) ([]T, error) {
	var env struct {
		Rows json.RawMessage `json:"rows"`
	}
	if err := json.Unmarshal(body, &env); err != nil {
		return nil, fmt.Errorf("malformed response body: %w", err)
	}
	if len(env.Rows) == 0 || env.Rows[0] != '[' {
		return nil, errors.New(`malformed response body: no "rows" array`)
	}
	dec := json.NewDecoder(bytes.NewReader(env.Rows))
	if _, err := dec.Token(); err != nil { // the '[' checked above
		return nil, fmt.Errorf("malformed response body: %w", err)
	}
	rows := []T{}
	for dec.More() {
		if len(rows) == maxRows {
			return nil, fmt.Errorf("malformed response body: more than %d rows, more than any call asks for", maxRows)
		}
		var r T
		if err := dec.Decode(&r); err != nil {
			return nil, fmt.Errorf("malformed response body: rows[%d]: %w", len(rows), err)
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// The most rows an answer can hold: the largest limit, for each id of a packed call (whether
// the limit counts per call or per id is unknown).
const (
	maxListingRows = MaxAuctionLimit * MaxItemIDs
	maxSaleRows    = MaxSoldLimit * MaxItemIDs
)

func parseAuction(body []byte) ([]Listing, error) {
	rows, err := decodeRows[wireListing](body, maxListingRows)
	if err != nil {
		return nil, err
	}
	out := make([]Listing, len(rows))
	for i, r := range rows {
		if r.ItemID == "" {
			return nil, fmt.Errorf("malformed response body: rows[%d] has no itemId", i)
		}
		regCount := r.Count
		if r.RegCount != nil {
			regCount = *r.RegCount
		}
		out[i] = Listing{
			AuctionNo: r.AuctionNo, RegDate: r.RegDate.Time, ExpireDate: r.ExpireDate.Time,
			ItemID: Clean(r.ItemID, MaxNameRunes), ItemName: Clean(r.ItemName, MaxNameRunes), Count: r.Count, RegCount: regCount,
			UnitPrice: r.UnitPrice, CurrentPrice: r.CurrentPrice, AveragePrice: int64(r.AveragePrice),
		}
	}
	return out, nil
}

func parseSold(body []byte) ([]Sale, error) {
	rows, err := decodeRows[wireSale](body, maxSaleRows)
	if err != nil {
		return nil, err
	}
	out := make([]Sale, len(rows))
	for i, r := range rows {
		if r.ItemID == "" || r.SoldDate.IsZero() {
			return nil, fmt.Errorf("malformed response body: rows[%d] lacks itemId or soldDate", i)
		}
		out[i] = Sale{SoldAt: r.SoldDate.Time, ItemID: Clean(r.ItemID, MaxNameRunes), ItemName: Clean(r.ItemName, MaxNameRunes),
			Count: r.Count, Price: r.Price, UnitPrice: r.UnitPrice}
	}
	return out, nil
}

func parseItems(body []byte) ([]Item, error) {
	rows, err := decodeRows[wireItem](body, MaxItemsLimit)
	if err != nil {
		return nil, err
	}
	out := make([]Item, len(rows))
	for i, r := range rows {
		out[i] = r.item() // a row without an id is the importer's to skip, naming the target
	}
	return out, nil
}

func parseItem(body []byte) (Item, error) {
	var w wireItem
	if err := json.Unmarshal(body, &w); err != nil {
		return Item{}, fmt.Errorf("malformed response body: %w", err)
	}
	if w.ItemID == "" {
		return Item{}, errors.New("malformed response body: no itemId")
	}
	return w.item(), nil
}

// envelope is the error body: {"error":{"status":503,"code":"DNF980","message":"SYSTEM_INSPECT"}}.
type envelope struct {
	Error struct {
		Status  int    `json:"status"`
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// parseEnvelope returns the code and message of an error body; a body that is not the
// envelope (a proxy's HTML page) yields no code and a short excerpt as the message.
func parseEnvelope(body []byte) (code, message string) {
	var env envelope
	if json.Unmarshal(body, &env) == nil && env.Error.Code != "" {
		return Clean(env.Error.Code, 20), Clean(env.Error.Message, MaxMessageRunes)
	}
	return "", quote(bytes.TrimSpace(body))
}

// classify maps a status and Neople code (with its message) to what the caller should do. The
// code wins: the documented table is by code, and API002's HTTP status is not even known.
func classify(status int, code, msg string) Class {
	switch code {
	case "DNF980":
		return ClassMaintenance
	case "API002", "API008":
		return ClassRateLimited
	case "API001":
		if strings.Contains(msg, notFoundText) {
			return ClassItem // a name search that found nothing, not a key error
		}
		return ClassConfig
	case "API000", "API003", "API004", "API005":
		return ClassConfig
	case "DNF003", "DNF004", "DNF901", "API901", "DNF007":
		return ClassItem
	case "API900", "DNF900":
		return ClassEndpoint
	case "DNF008":
		return ClassBug
	case "API999", "DNF999":
		return ClassTransient
	}
	if strings.Contains(msg, rateLimitText) {
		return ClassRateLimited // under a code not in the table
	}
	switch {
	case status == http.StatusServiceUnavailable:
		return ClassMaintenance
	case status == http.StatusTooManyRequests:
		return ClassRateLimited
	case status == http.StatusUnauthorized || status == http.StatusForbidden:
		return ClassConfig
	case status >= 300 && status < 400:
		// The API never redirects: the base URL is wrong (http for https, a moved host).
		return ClassEndpoint
	case status == http.StatusBadRequest || status == http.StatusNotFound:
		if strings.HasPrefix(code, "DNF") {
			// The game's own error under a code not in the table (DNF001 answers with a Korean
			// sentence): about this request. Taken for a wrong base URL, it ended every pass at
			// the one item that meets it. An unknown API… code is the gateway's (key, header,
			// URL), as likely to meet every call: it still stops the pass.
			return ClassItem
		}
		// The API answers these with its error body; without one, something else answered.
		return ClassEndpoint
	}
	return ClassTransient
}

// parseRetryAfter reads Retry-After as delay-seconds or an HTTP date; 0 when absent or bad.
func parseRetryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil || errors.Is(err, strconv.ErrRange) {
		// An absurd number means "a very long time", not a wrapped negative: the caller caps it.
		switch {
		case s <= 0:
			return 0
		case s > int64(math.MaxInt64/time.Second):
			return math.MaxInt64
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return 0
}

// quote is a short, clean excerpt of raw provider bytes for an error message.
func quote(b []byte) string {
	const excerpt = 120
	// Only the head can survive the cap: don't scan a whole 8 MiB body for it.
	return Clean(string(b[:min(len(b), 4*excerpt+4)]), excerpt)
}
