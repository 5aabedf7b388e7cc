package api_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zaptest"

	"github.com/duecollector/duecollector/internal/api"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// env is an API over a seeded database, served by httptest, with a client whose every
// response is held to openapi.json.
type env struct {
	api    *api.API
	pool   *pgxpool.Pool
	db     *countingDB
	srv    *httptest.Server
	client *http.Client
	clock  *fakeClock
}

// countingDB is the real pool, counting the statements the API sends: a bad parameter must
// be refused before any reaches the database.
type countingDB struct {
	*pgxpool.Pool
	n atomic.Int64
}

func (c *countingDB) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	c.n.Add(1)
	return c.Pool.Query(ctx, sql, args...)
}

func (c *countingDB) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	c.n.Add(1)
	return c.Pool.QueryRow(ctx, sql, args...)
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const (
	hotItem   = "4f0c7a3e2b1d9c8a7f6e5d4c3b2a1f0e"
	quietItem = "quiet-item"
	newItem   = "never-collected"
)

func setup(t *testing.T, configure func(*api.Config)) *env {
	t.Helper()
	pool, _ := storetest.NewPool(t)
	items := []storetest.Item{
		{ID: hotItem, Name: "Golden \"Needle\"", Tier: tiers.Hot},
		{ID: quietItem, Name: "Silver Thread", Tier: tiers.Cold},
		{ID: newItem, Name: "Unseen", Tier: tiers.Warm},
		{ID: "seed-0001", Name: "Synthetic fixture"},
	}
	for i := range 30 {
		items = append(items, storetest.Item{ID: fmt.Sprintf("filler-%02d", i), Name: fmt.Sprintf("Filler %02d", i), Tier: tiers.Cold})
	}
	storetest.Items(t, pool, items...)
	// What write-backs leave on the rows: the last snapshot's figures and when it was seen.
	mustExec(t, pool, `
		UPDATE tracked_items SET seen_lowest_price = 1200, seen_median_price = 1500, seen_weighted_price = 1333.5,
		       seen_api_average_price = 1400, seen_listing_count = 7, seen_listing_quantity = 30, seen_truncated = false,
		       last_snapshot_at = now() - interval '10 minutes', last_collected_at = now() - interval '1 minute',
		       popularity_score = CASE item_id WHEN $1 THEN 9 ELSE 1 END
		WHERE item_id <> $2`, hotItem, newItem)
	mustExec(t, pool, `
		INSERT INTO price_candles (item_id, resolution, bucket, snapshots, open_price, high_price, low_price, close_price,
		                           listings_min, listings_max, sales_count, sales_quantity, sales_value)
		SELECT $1, '1h', date_trunc('hour', now()) - h * interval '1 hour', 1, 1000 + h, 1100 + h, 900 + h, 1000 + h, 3, 5, h % 3, h % 4, (h % 4) * 1000
		FROM generate_series(0, 47) h`, hotItem)
	mustExec(t, pool, `
		INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, listing_count, listing_quantity, lowest_unit_price, sales_quantity)
		SELECT $1, gen_random_uuid(), now() - h * interval '2 hours', 'HOT_1M', 4, 10, 500 + h, h % 2
		FROM generate_series(0, 23) h`, hotItem)
	clock := &fakeClock{t: time.Date(2026, 12, 4, 12, 0, 0, 0, time.UTC)}
	cfg := api.Config{APIConfig: config.Default().API, Now: clock.Now}
	cfg.Rate = 0
	if configure != nil {
		configure(&cfg)
	}
	db := &countingDB{Pool: pool}
	a, err := api.New(db, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	return &env{api: a, pool: pool, db: db, srv: srv, clock: clock,
		client: &http.Client{Transport: checking{t: t, spec: loadSpec(t), base: http.DefaultTransport}}}
}

func mustExec(t *testing.T, pool *pgxpool.Pool, sql string, args ...any) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), sql, args...); err != nil {
		t.Fatal(err)
	}
}

// get requests path with the headers given as name, value pairs.
func (e *env) get(t *testing.T, path string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	return e.do(t, http.MethodGet, path, headers...)
}

func (e *env) do(t *testing.T, method, path string, headers ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp, b
}

type latestItem struct {
	ItemID      string     `json:"item_id"`
	Name        string     `json:"name"`
	Tier        string     `json:"tier"`
	CollectedAt *time.Time `json:"collected_at"`
	SeenAt      *time.Time `json:"seen_at"`
	Lowest      *int64     `json:"lowest_unit_price"`
	Weighted    *float64   `json:"weighted_unit_price"`
	Listings    *int       `json:"listing_count"`
}

type latestBody struct {
	Items   []latestItem `json:"items"`
	Unknown []string     `json:"unknown_ids"`
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

// /latest holds every tracked item but the synthetic fixtures, in id order, with the figures
// its row holds; ids= narrows it and names the ids nobody tracks.
func TestLatestHoldsEveryItemAndFilters(t *testing.T) {
	e := setup(t, nil)
	resp, b := e.get(t, "/api/v1/latest")
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	all := decode[latestBody](t, b)
	if len(all.Items) != 33 {
		t.Fatalf("%d items, want 33 (the synthetic fixture left out)", len(all.Items))
	}
	for i := 1; i < len(all.Items); i++ {
		if all.Items[i-1].ItemID >= all.Items[i].ItemID {
			t.Fatalf("not in id order at %d: %s then %s", i, all.Items[i-1].ItemID, all.Items[i].ItemID)
		}
	}
	resp, b = e.get(t, "/api/v1/latest?ids="+hotItem+","+newItem+",nobody-tracks-this&ids="+hotItem)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	some := decode[latestBody](t, b)
	if len(some.Items) != 2 || some.Items[0].ItemID != hotItem || some.Items[1].ItemID != newItem {
		t.Fatalf("filtered: %+v", some.Items)
	}
	hot, unseen := some.Items[0], some.Items[1]
	if hot.Name != `Golden "Needle"` || hot.Tier != "HOT_1M" || hot.Lowest == nil || *hot.Lowest != 1200 ||
		hot.Weighted == nil || *hot.Weighted != 1333.5 || hot.Listings == nil || *hot.Listings != 7 ||
		hot.CollectedAt == nil || hot.SeenAt == nil || !hot.SeenAt.After(*hot.CollectedAt) {
		t.Fatalf("hot item: %+v", hot)
	}
	if unseen.Lowest != nil || unseen.SeenAt != nil || unseen.CollectedAt != nil {
		t.Fatalf("an item never collected has no figures: %+v", unseen)
	}
	if len(some.Unknown) != 1 || some.Unknown[0] != "nobody-tracks-this" {
		t.Fatalf("unknown ids: %v", some.Unknown)
	}
	// In the order asked, whichever way round.
	_, b = e.get(t, "/api/v1/latest?ids="+newItem+","+hotItem)
	if got := decode[latestBody](t, b); len(got.Items) != 2 || got.Items[0].ItemID != newItem || got.Items[1].ItemID != hotItem {
		t.Fatalf("ids=%s,%s answered %+v, want them in that order", newItem, hotItem, got.Items)
	}
}

// A poller that sends back its ETag gets 304 and no body until a write-back changes the
// market; then 200 with the new figures. If-Modified-Since works the same by time.
func TestLatestAnswers304UntilTheMarketChanges(t *testing.T) {
	e := setup(t, func(c *api.Config) { c.MaxAge = time.Nanosecond }) // every request reads
	resp, b := e.get(t, "/api/v1/latest")
	tag, modified := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	if resp.StatusCode != 200 || tag == "" || modified == "" {
		t.Fatalf("first poll: %d ETag %q Last-Modified %q", resp.StatusCode, tag, modified)
	}
	e.clock.Advance(time.Second)
	resp, b2 := e.get(t, "/api/v1/latest", "If-None-Match", tag)
	if resp.StatusCode != http.StatusNotModified || len(b2) != 0 || resp.Header.Get("ETag") != tag {
		t.Fatalf("unchanged: %d, %d bytes, ETag %q; want 304, none, %q", resp.StatusCode, len(b2), resp.Header.Get("ETag"), tag)
	}
	resp, _ = e.get(t, "/api/v1/latest", "If-Modified-Since", modified)
	if resp.StatusCode != http.StatusNotModified {
		t.Fatalf("If-Modified-Since %s: %d, want 304", modified, resp.StatusCode)
	}
	// A collection of the hot item that saw a new price.
	mustExec(t, e.pool, `UPDATE tracked_items SET updated_at = now(), seen_lowest_price = 1100, last_snapshot_at = now(), last_collected_at = now() + interval '2 seconds' WHERE item_id = $1`, hotItem)
	e.clock.Advance(time.Second)
	resp, b3 := e.get(t, "/api/v1/latest", "If-None-Match", tag)
	if resp.StatusCode != 200 || resp.Header.Get("ETag") == tag || bytes.Equal(b, b3) {
		t.Fatalf("after a change: %d, ETag %q (was %q)", resp.StatusCode, resp.Header.Get("ETag"), tag)
	}
	if got := decode[latestBody](t, b3); *got.Items[0].Lowest != 1100 {
		t.Fatalf("after a change, lowest %d; want 1100", *got.Items[0].Lowest)
	}
	resp, _ = e.get(t, "/api/v1/latest", "If-Modified-Since", modified)
	if resp.StatusCode != 200 {
		t.Fatalf("If-Modified-Since before the change: %d, want 200", resp.StatusCode)
	}
	// A filtered poll has its own validator, and answers 304 the same way.
	resp, _ = e.get(t, "/api/v1/latest?ids="+quietItem)
	qtag := resp.Header.Get("ETag")
	if resp, _ = e.get(t, "/api/v1/latest?ids="+quietItem, "If-None-Match", `"other", `+qtag); resp.StatusCode != http.StatusNotModified {
		t.Fatalf("filtered poll with its ETag in a list: %d, want 304", resp.StatusCode)
	}
	// If-None-Match compares weakly (RFC 9110 §13.1.2): a cache or proxy that sends the tag back
	// without its W/ still holds the current copy.
	if resp, _ = e.get(t, "/api/v1/latest?ids="+quietItem, "If-None-Match", strings.TrimPrefix(qtag, "W/")); !strings.HasPrefix(qtag, "W/") || resp.StatusCode != http.StatusNotModified {
		t.Fatalf("the ETag %q sent back strong: %d, want 304", qtag, resp.StatusCode)
	}
}

// An item leaving the catalog changes the answer: its ETag, and its Last-Modified is not
// answered 304, so a client polling If-Modified-Since does not keep a copy that still lists it.
func TestLatestChangesWhenAnItemLeaves(t *testing.T) {
	e := setup(t, func(c *api.Config) { c.MaxAge = time.Nanosecond })
	resp, _ := e.get(t, "/api/v1/latest")
	tag, modified := resp.Header.Get("ETag"), resp.Header.Get("Last-Modified")
	mustExec(t, e.pool, `DELETE FROM tracked_items WHERE item_id = 'filler-00'`)
	e.clock.Advance(time.Second)
	resp, b := e.get(t, "/api/v1/latest", "If-Modified-Since", modified)
	// Its Last-Modified may share the first answer's second (then the answer counts as
	// ambiguous, and that date is not answered 304 either), never precede it.
	lm, err := http.ParseTime(resp.Header.Get("Last-Modified"))
	was, _ := http.ParseTime(modified)
	if resp.StatusCode != 200 || resp.Header.Get("ETag") == tag || err != nil || lm.Before(was) ||
		len(decode[latestBody](t, b).Items) != 32 {
		t.Fatalf("after an item left: %d, ETag %q (was %q), Last-Modified %q (was %q)", resp.StatusCode,
			resp.Header.Get("ETag"), tag, resp.Header.Get("Last-Modified"), modified)
	}
	if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
		t.Fatal("no nosniff")
	}
}

// A process started after a change that moved no collection time (an item left) dates its
// first answer by its read, not by the newest collection: a client holding the date of an
// earlier process's answer gets the new one, not a 304.
func TestLatestFromANewProcessIsNotOlderThanTheLastAnswer(t *testing.T) {
	e := setup(t, nil)
	resp, _ := e.get(t, "/api/v1/latest")
	modified := resp.Header.Get("Last-Modified")
	mustExec(t, e.pool, `DELETE FROM tracked_items WHERE item_id = 'filler-00'`)
	// Into the database's next second: Last-Modified has whole seconds.
	mustExec(t, e.pool, `SELECT pg_sleep(1 - extract(epoch FROM clock_timestamp()) % 1)`)
	restarted, err := api.New(e.db, api.Config{APIConfig: config.Default().API, Now: e.clock.Now}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(restarted.Handler())
	t.Cleanup(srv.Close)
	req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/v1/latest", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("If-Modified-Since", modified)
	resp, err = e.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Last-Modified") == modified {
		t.Fatalf("the new process answered If-Modified-Since %s with %d, Last-Modified %q; want the changed answer", modified, resp.StatusCode, resp.Header.Get("Last-Modified"))
	}
}

// The answer is gzip-compressed for a client that asks, and decompresses to the same JSON.
func TestLatestIsGzippedOnRequest(t *testing.T) {
	e := setup(t, nil)
	_, plain := e.get(t, "/api/v1/latest", "Accept-Encoding", "identity")
	resp, zipped := e.get(t, "/api/v1/latest", "Accept-Encoding", "br;q=1, gzip;q=0.8")
	if resp.Header.Get("Content-Encoding") != "gzip" || !strings.Contains(resp.Header.Get("Vary"), "Accept-Encoding") {
		t.Fatalf("Content-Encoding %q Vary %q", resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"))
	}
	zr, err := gzip.NewReader(bytes.NewReader(zipped))
	if err != nil {
		t.Fatal(err)
	}
	unzipped, _ := io.ReadAll(zr)
	if !bytes.Equal(unzipped, plain) || len(zipped) >= len(plain) {
		t.Fatalf("gzip %d bytes → %d, identity %d: want the same JSON, smaller", len(zipped), len(unzipped), len(plain))
	}
	if resp, _ := e.get(t, "/api/v1/latest", "Accept-Encoding", "gzip;q=0"); resp.Header.Get("Content-Encoding") != "" {
		t.Fatal("gzip;q=0 refuses gzip")
	}
}

// The copy a poll reads is never older than MaxAge by the API's clock: within it a poll reuses
// the copy (no statement), past it the next poll reads the database again.
func TestLatestCopyIsNeverOlderThanMaxAge(t *testing.T) {
	e := setup(t, func(c *api.Config) { c.MaxAge = time.Second })
	e.get(t, "/api/v1/latest")
	n := e.db.n.Load()
	mustExec(t, e.pool, `UPDATE tracked_items SET updated_at = now(), seen_lowest_price = 999, last_collected_at = now() + interval '5 seconds' WHERE item_id = $1`, hotItem)
	e.clock.Advance(time.Second)
	_, b := e.get(t, "/api/v1/latest?ids="+hotItem)
	if e.db.n.Load() != n || *decode[latestBody](t, b).Items[0].Lowest != 1200 {
		t.Fatalf("within MaxAge: %d statements, want the copy reused", e.db.n.Load()-n)
	}
	e.clock.Advance(time.Millisecond)
	_, b = e.get(t, "/api/v1/latest?ids="+hotItem)
	if got := *decode[latestBody](t, b).Items[0].Lowest; got != 999 {
		t.Fatalf("past MaxAge the poll shows lowest %d, want 999", got)
	}
}

type seriesBody struct {
	ItemID   string           `json:"item_id"`
	Interval string           `json:"interval"`
	Since    time.Time        `json:"since"`
	Points   []history.Point  `json:"snapshots"`
	Candles  []history.Candle `json:"candles"`
}

// /timeseries is history's series for the window asked: the same candles and points
// `collector history` prints.
func TestTimeseriesIsHistorysSeries(t *testing.T) {
	e := setup(t, nil)
	ctx := context.Background()
	now, err := store.Now(ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	since := now.Add(-24 * time.Hour).UTC().Truncate(time.Second)
	until := now.Add(-6 * time.Hour).UTC().Truncate(time.Second)
	for _, interval := range []string{"raw", "1h"} {
		want, err := catalog.ReadSeries(ctx, e.pool, hotItem, interval, since, until)
		if err != nil {
			t.Fatal(err)
		}
		q := url.Values{"interval": {interval}, "since": {since.Format(time.RFC3339)}, "until": {until.Format(time.RFC3339)}}
		resp, b := e.get(t, "/api/v1/items/"+hotItem+"/timeseries?"+q.Encode())
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", interval, resp.StatusCode, b)
		}
		got := decode[seriesBody](t, b)
		wantJSON, _ := json.Marshal(struct {
			P []history.Point
			C []history.Candle
		}{want.Points, want.Candle})
		gotJSON, _ := json.Marshal(struct {
			P []history.Point
			C []history.Candle
		}{got.Points, got.Candles})
		if !bytes.Equal(wantJSON, gotJSON) || len(want.Points)+len(want.Candle) < 9 {
			t.Fatalf("%s: the API's series differs from history's:\n%s\n%s", interval, gotJSON, wantJSON)
		}
		for _, c := range got.Candles {
			if c.Bucket.Before(since.Truncate(time.Hour)) || !c.Bucket.Before(until) {
				t.Fatalf("candle %s outside [%s, %s)", c.Bucket, since, until)
			}
		}
	}
	// Defaults: hourly candles over the last 30 days, up to now.
	resp, b := e.get(t, "/api/v1/items/"+hotItem+"/timeseries")
	if got := decode[seriesBody](t, b); resp.StatusCode != 200 || got.Interval != "1h" || len(got.Candles) != 48 {
		t.Fatalf("defaults: %d, interval %q, %d candles; want 1h and 48", resp.StatusCode, got.Interval, len(got.Candles))
	}
	window := "/api/v1/items/" + hotItem + "/timeseries?since=" + since.Format(time.RFC3339)
	resp, _ = e.get(t, window)
	if resp, _ := e.get(t, window, "If-None-Match", resp.Header.Get("ETag")); resp.StatusCode != 304 {
		t.Fatalf("series re-poll with its ETag: %d, want 304", resp.StatusCode)
	}
	resp, b = e.get(t, "/api/v1/items/nobody/timeseries")
	if resp.StatusCode != 404 || decode[problem](t, b).Param != "id" {
		t.Fatalf("unknown item: %d %s", resp.StatusCode, b)
	}
}

// /timeseries answers conditionally by its ETag only: the series changes while the item's last
// collection stays put (the default window slides, retention deletes rows), so no date can
// say that a copy is current. If-Modified-Since, even after the last collection, gets the
// changed series, and no answer carries Last-Modified.
func TestTimeseriesIsConditionalByETagOnly(t *testing.T) {
	e := setup(t, nil)
	ctx := context.Background()
	now, err := store.Now(ctx, e.pool)
	if err != nil {
		t.Fatal(err)
	}
	window := "/api/v1/items/" + hotItem + "/timeseries?interval=raw&since=" + now.Add(-24*time.Hour).UTC().Format(time.RFC3339)
	resp, b := e.get(t, window)
	if resp.StatusCode != 200 {
		t.Fatalf("series: %d %s", resp.StatusCode, b)
	}
	tag, before := resp.Header.Get("ETag"), decode[seriesBody](t, b)
	// Retention's work: the window loses rows, and the item's last collection does not move.
	mustExec(t, e.pool, `DELETE FROM auction_snapshots WHERE item_id = $1 AND collected_at < now() - interval '12 hours'`, hotItem)
	after := now.Add(time.Hour).UTC().Format(http.TimeFormat) // after the last collection, a minute ago
	resp, b = e.get(t, window, "If-Modified-Since", after)
	if resp.StatusCode != 200 {
		t.Fatalf("If-Modified-Since %s after rows left the window: %d, want 200 and the changed series", after, resp.StatusCode)
	}
	if got := decode[seriesBody](t, b); len(got.Points) >= len(before.Points) || resp.Header.Get("ETag") == tag {
		t.Fatalf("after rows left the window: %d points (were %d), ETag %q (was %q); want fewer, and a new ETag",
			len(got.Points), len(before.Points), resp.Header.Get("ETag"), tag)
	}
	if lm := resp.Header.Get("Last-Modified"); lm != "" {
		t.Fatalf("series with Last-Modified %q: no date can validate it", lm)
	}
	current := resp.Header.Get("ETag")
	if resp, _ := e.get(t, window, "If-None-Match", tag); resp.StatusCode != 200 {
		t.Fatalf("the old ETag after rows left the window: %d, want 200", resp.StatusCode)
	}
	if resp, _ := e.get(t, window, "If-None-Match", current); resp.StatusCode != 304 {
		t.Fatalf("the current ETag: %d, want 304", resp.StatusCode)
	}
}

type problem struct {
	Type   string `json:"type"`
	Title  string `json:"title"`
	Status int    `json:"status"`
	Detail string `json:"detail"`
	Param  string `json:"param"`
}

// Bad parameters answer a problem naming the parameter, and not one statement reaches the
// database.
func TestBadParametersAreRefusedBeforeSQL(t *testing.T) {
	e := setup(t, nil)
	many := make([]string, api.MaxIDs+1)
	for i := range many {
		many[i] = fmt.Sprintf("id-%d", i)
	}
	cases := []struct{ path, param string }{
		{"/api/v1/latest?ids=" + url.QueryEscape("x'; DROP TABLE tracked_items; --"), "ids"},
		{"/api/v1/latest?ids=" + strings.Join(many, ","), "ids"},
		{"/api/v1/latest?ids=" + strings.Repeat("x,", 2*api.MaxIDs) + "x", "ids"}, // one id, repeated past any use
		{"/api/v1/latest?ids=a,,b", "ids"},
		{"/api/v1/latest?ids=" + strings.Repeat("a", 129), "ids"},
		{"/api/v1/items/" + url.PathEscape("bad id") + "/timeseries", "id"},
		{"/api/v1/items/" + hotItem + "/timeseries?interval=5m", "interval"},
		{"/api/v1/items/" + hotItem + "/timeseries?since=yesterday", "since"},
		{"/api/v1/items/" + hotItem + "/timeseries?until=2026-13-01", "until"},
		{"/api/v1/items/" + hotItem + "/timeseries?since=0001-01-01T00:00:00Z", "since"}, // not "absent"
		{"/api/v1/items/" + hotItem + "/timeseries?until=0001-01-01", "until"},
		{"/api/v1/items/" + hotItem + "/timeseries?since=2026-12-02&until=2026-12-01", "since"},
		{"/api/v1/items/" + hotItem + "/timeseries?interval=raw&since=2026-01-01&until=2026-03-01", "since"},
		// Windows that end now and can never be served: too long, or starting in the future.
		{"/api/v1/items/" + hotItem + "/timeseries?interval=raw&since=2020-01-01", "since"},
		{"/api/v1/items/" + hotItem + "/timeseries?since=9000-01-01", "since"},
		{"/api/v1/items?limit=0", "limit"},
		{"/api/v1/items?limit=201", "limit"},
		{"/api/v1/items?cursor=not-a-cursor", "cursor"},
		{"/api/v1/items?q=" + strings.Repeat("x", 201), "q"},
		{"/api/v1/items?q=%FF", "q"},
		{"/api/v1/items?q=a%00b", "q"},
		{"/api/v1/items?cursor=" + (&catalog.Cursor{ID: "a\x00b"}).Encode(), "cursor"},
		{"/api/v1/items?cursor=" + (&catalog.Cursor{ID: "filler-03", Name: "filler 03"}).Encode(), "cursor"}, // a search's, without q
		{"/api/v1/items?q=filler&cursor=" + (&catalog.Cursor{ID: "filler-03", Score: 1}).Encode(), "cursor"}, // the list's, with q
	}
	before := e.db.n.Load()
	for _, c := range cases {
		resp, b := e.get(t, c.path)
		p := decode[problem](t, b)
		if resp.StatusCode != 400 || p.Param != c.param || p.Status != 400 || p.Detail == "" ||
			resp.Header.Get("Content-Type") != "application/problem+json" {
			t.Errorf("%s: %d %s; want 400 naming %s", c.path, resp.StatusCode, b, c.param)
		}
	}
	if n := e.db.n.Load() - before; n != 0 {
		t.Fatalf("%d statements reached the database for bad parameters", n)
	}
	if got := counted(t, e.api, "latest", "400"); got != 5 {
		t.Fatalf("collector_api_requests_total{endpoint=latest,code=400} = %v, want 5", got)
	}
	resp, b := e.do(t, http.MethodPost, "/api/v1/latest")
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "GET, HEAD" || decode[problem](t, b).Status != 405 {
		t.Fatalf("POST: %d %s", resp.StatusCode, b)
	}
	if resp, b = e.get(t, "/api/v1/nothing-here"); resp.StatusCode != 404 || decode[problem](t, b).Status != 404 {
		t.Fatalf("unknown endpoint: %d %s", resp.StatusCode, b)
	}
	// What is echoed back is cut on a character, not inside one.
	resp, b = e.get(t, "/api/v1/x"+strings.Repeat("가", 300))
	if p := decode[problem](t, b); resp.StatusCode != 404 || strings.ContainsRune(p.Detail, utf8.RuneError) || !strings.Contains(p.Detail, "가…") {
		t.Fatalf("a long unknown path: %d %q; want its echo cut between characters", resp.StatusCode, p.Detail)
	}
}

type itemsBody struct {
	Items []struct {
		ItemID     string `json:"item_id"`
		Name       string `json:"name"`
		Latest     string `json:"latest"`
		Timeseries string `json:"timeseries"`
	} `json:"items"`
	Next       string `json:"next"`
	NextCursor string `json:"next_cursor"`
}

// /items pages through every item by keyset with no repeat and no gap; q finds by name prefix
// and puts an exact id first; each item links its own API URLs, which answer.
func TestItemsSearchPagesByKeyset(t *testing.T) {
	e := setup(t, nil)
	seen := map[string]bool{}
	path, pages := "/api/v1/items?limit=7", 0
	for path != "" {
		resp, b := e.get(t, path)
		if resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, b)
		}
		page := decode[itemsBody](t, b)
		for _, it := range page.Items {
			if seen[it.ItemID] {
				t.Fatalf("%s listed twice", it.ItemID)
			}
			seen[it.ItemID] = true
		}
		path, pages = page.Next, pages+1
	}
	if len(seen) != 33 || pages != 5 || seen["seed-0001"] {
		t.Fatalf("%d items over %d pages; want 33 over 5, no synthetic", len(seen), pages)
	}
	_, b := e.get(t, "/api/v1/items?q=filler%201")
	found := decode[itemsBody](t, b)
	if len(found.Items) != 10 || found.Items[0].Name != "Filler 10" {
		t.Fatalf("q=filler 1: %+v", found.Items)
	}
	_, b = e.get(t, "/api/v1/items?q="+hotItem)
	byID := decode[itemsBody](t, b)
	if len(byID.Items) != 1 || byID.Items[0].ItemID != hotItem {
		t.Fatalf("q=<id>: %+v", byID.Items)
	}
	for _, link := range []string{byID.Items[0].Latest, byID.Items[0].Timeseries} {
		if resp, b := e.get(t, link); resp.StatusCode != 200 {
			t.Fatalf("%s: %d %s", link, resp.StatusCode, b)
		}
	}
	// A fixture's exact id finds nothing either: /latest would not know it.
	if _, b = e.get(t, "/api/v1/items?q=seed-0001"); len(decode[itemsBody](t, b).Items) != 0 {
		t.Fatalf("q=seed-0001 lists the synthetic fixture: %s", b)
	}
}

// A client over its rate gets 429 with Retry-After and the RateLimit fields, others do not,
// and the bucket refills with time.
func TestRateLimitPerClient(t *testing.T) {
	e := setup(t, func(c *api.Config) { c.Rate = 1; c.Tokens = []config.Secret{"token-of-client-a", "token-of-client-b"} })
	auth := func(tok string) []string { return []string{"Authorization", "Bearer " + tok} }
	for i := range 2 { // the burst: twice the rate
		if resp, _ := e.get(t, "/api/v1/items?limit=1", auth("token-of-client-a")...); resp.StatusCode != 200 {
			t.Fatalf("request %d within the burst: %d", i, resp.StatusCode)
		}
	}
	resp, b := e.get(t, "/api/v1/items?limit=1", auth("token-of-client-a")...)
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" || decode[problem](t, b).Status != 429 {
		t.Fatalf("over the rate: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if got := resp.Header.Get("RateLimit"); got != `"client";r=0;t=2` {
		t.Fatalf("RateLimit %q", got)
	}
	if got := resp.Header.Get("RateLimit-Policy"); got != `"client";q=2;w=2` {
		t.Fatalf("RateLimit-Policy %q", got)
	}
	if resp, _ := e.get(t, "/api/v1/items?limit=1", auth("token-of-client-b")...); resp.StatusCode != 200 {
		t.Fatalf("another client: %d", resp.StatusCode)
	}
	e.clock.Advance(time.Second)
	if resp, _ := e.get(t, "/api/v1/items?limit=1", auth("token-of-client-a")...); resp.StatusCode != 200 {
		t.Fatalf("a second later: %d", resp.StatusCode)
	}
}

// With tokens configured every endpoint but the document needs one; the answer never echoes it.
func TestBearerTokens(t *testing.T) {
	const token = "a-long-secret-bearer-token"
	e := setup(t, func(c *api.Config) { c.Tokens = []config.Secret{token} })
	for _, hdr := range [][]string{nil, {"Authorization", "Bearer wrong-token-wrong-token"}, {"Authorization", "Basic " + token}} {
		resp, b := e.get(t, "/api/v1/latest", hdr...)
		if resp.StatusCode != 401 || !strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer") || strings.Contains(string(b), token) {
			t.Fatalf("%v: %d %q %s", hdr, resp.StatusCode, resp.Header.Get("WWW-Authenticate"), b)
		}
	}
	// The scheme's name is case-insensitive (RFC 9110 §11.1), and a client that pads the
	// token with a space still sends it.
	for _, v := range []string{"Bearer " + token, "bearer " + token, "BEARER  " + token + " "} {
		if resp, _ := e.get(t, "/api/v1/latest", "Authorization", v); resp.StatusCode != 200 {
			t.Fatalf("with the token as %q: %d", strings.ReplaceAll(v, token, "<token>"), resp.StatusCode)
		}
	}
	if resp, _ := e.get(t, "/api/v1/openapi.json"); resp.StatusCode != 200 {
		t.Fatalf("the document without a token: %d", resp.StatusCode)
	}
}

// Configured origins' pages may read answers and their validators; others may not.
func TestCORSOrigins(t *testing.T) {
	e := setup(t, func(c *api.Config) { c.CORSOrigins = []string{"https://prices.example.org"} })
	resp, _ := e.do(t, http.MethodOptions, "/api/v1/latest", "Origin", "https://prices.example.org",
		"Access-Control-Request-Method", "GET", "Access-Control-Request-Headers", "if-none-match")
	if resp.StatusCode != 204 || resp.Header.Get("Access-Control-Allow-Origin") != "https://prices.example.org" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Headers"), "If-None-Match") {
		t.Fatalf("preflight: %d %v", resp.StatusCode, resp.Header)
	}
	resp, _ = e.get(t, "/api/v1/latest", "Origin", "https://prices.example.org")
	if resp.Header.Get("Access-Control-Allow-Origin") != "https://prices.example.org" ||
		!strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "ETag") {
		t.Fatalf("simple request: %v", resp.Header)
	}
	resp, _ = e.get(t, "/api/v1/latest", "Origin", "https://evil.example")
	if resp.Header.Get("Access-Control-Allow-Origin") != "" {
		t.Fatal("an origin not configured was allowed")
	}
}

// The document is served, and it documents what the handler serves.
func TestOpenAPIIsServed(t *testing.T) {
	e := setup(t, nil)
	resp, b := e.get(t, "/api/v1/openapi.json")
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if resp.StatusCode != 200 || json.Unmarshal(b, &doc) != nil || doc.OpenAPI != "3.1.0" {
		t.Fatalf("%d %.100s", resp.StatusCode, b)
	}
	if resp, _ := e.do(t, http.MethodHead, "/api/v1/latest"); resp.StatusCode != 200 {
		t.Fatalf("HEAD: %d", resp.StatusCode)
	}
}

// Without tokens a client is its address; with them, a request without a valid one is limited
// by its address before it is refused, so guessing tokens is paced too.
func TestRateLimitByAddress(t *testing.T) {
	e := setup(t, func(c *api.Config) { c.Rate = 1 })
	for i := range 2 {
		if resp, _ := e.get(t, "/api/v1/items?limit=1"); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d", i, resp.StatusCode)
		}
	}
	if resp, _ := e.get(t, "/api/v1/items?limit=1"); resp.StatusCode != 429 {
		t.Fatalf("third request from one address: %d, want 429", resp.StatusCode)
	}
	g := setup(t, func(c *api.Config) { c.Rate = 1; c.Tokens = []config.Secret{"a-long-secret-bearer-token"} })
	for i, want := range []int{401, 401, 429} {
		if resp, _ := g.get(t, "/api/v1/latest", "Authorization", "Bearer guess-guess-guess-guess"); resp.StatusCode != want {
			t.Fatalf("guess %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
}

// HEAD answers the headers of GET without the body, 304 included; every answer that may be
// compressed says it varies by Accept-Encoding.
func TestHeadAndVary(t *testing.T) {
	e := setup(t, nil)
	get, body := e.get(t, "/api/v1/latest", "Accept-Encoding", "identity")
	head, none := e.do(t, http.MethodHead, "/api/v1/latest", "Accept-Encoding", "identity")
	if head.StatusCode != 200 || len(none) != 0 || head.Header.Get("Content-Length") != fmt.Sprint(len(body)) ||
		head.Header.Get("ETag") != get.Header.Get("ETag") {
		t.Fatalf("HEAD: %d, %d bytes, Content-Length %s (GET %d bytes), ETag %q / %q", head.StatusCode, len(none),
			head.Header.Get("Content-Length"), len(body), head.Header.Get("ETag"), get.Header.Get("ETag"))
	}
	if resp, _ := e.do(t, http.MethodHead, "/api/v1/latest", "If-None-Match", get.Header.Get("ETag")); resp.StatusCode != 304 ||
		!strings.Contains(resp.Header.Get("Vary"), "Accept-Encoding") {
		t.Fatalf("HEAD with the ETag: %d, Vary %q", resp.StatusCode, resp.Header.Get("Vary"))
	}
	if !strings.Contains(get.Header.Get("Vary"), "Accept-Encoding") {
		t.Fatalf("GET: Vary %q", get.Header.Get("Vary"))
	}
	// An explicit gzip wins over "*;q=0".
	if resp, _ := e.get(t, "/api/v1/latest", "Accept-Encoding", "*;q=0, gzip"); resp.Header.Get("Content-Encoding") != "gzip" {
		t.Fatal("*;q=0, gzip: not compressed")
	}
}

// With "*" any origin's pages may read answers; a preflight from an origin not configured gets
// no permission.
func TestCORSAnyOriginAndRefusedPreflight(t *testing.T) {
	e := setup(t, func(c *api.Config) { c.CORSOrigins = []string{"*"} })
	if resp, _ := e.get(t, "/api/v1/latest", "Origin", "https://anyone.example"); resp.Header.Get("Access-Control-Allow-Origin") != "*" {
		t.Fatalf("*: %v", resp.Header)
	}
	f := setup(t, func(c *api.Config) { c.CORSOrigins = []string{"https://prices.example.org"} })
	resp, _ := f.do(t, http.MethodOptions, "/api/v1/latest", "Origin", "https://evil.example", "Access-Control-Request-Method", "GET")
	if resp.Header.Get("Access-Control-Allow-Origin") != "" || resp.Header.Get("Access-Control-Allow-Methods") != "" {
		t.Fatalf("preflight from another origin: %v", resp.Header)
	}
}

// With the database gone, a poll past MaxAge answers 503 with Retry-After and a problem: the
// old copy is never passed off as current.
func TestLatestAnswers503WithoutTheDatabase(t *testing.T) {
	e := setup(t, func(c *api.Config) { c.MaxAge = time.Second })
	if resp, _ := e.get(t, "/api/v1/latest"); resp.StatusCode != 200 {
		t.Fatalf("first poll: %d", resp.StatusCode)
	}
	e.pool.Close()
	if resp, _ := e.get(t, "/api/v1/latest"); resp.StatusCode != 200 {
		t.Fatalf("within MaxAge the copy serves: %d", resp.StatusCode)
	}
	e.clock.Advance(2 * time.Second)
	resp, b := e.get(t, "/api/v1/latest")
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || decode[problem](t, b).Status != 503 {
		t.Fatalf("without the database: %d %s", resp.StatusCode, b)
	}
}

// A filtered poll is dated like the whole answer, so a rename (which moves no collection time)
// answers If-Modified-Since with the new name; and two answers dated in one second leave
// If-Modified-Since of that second unanswered by 304 until a later second re-dates the answer.
func TestIfModifiedSinceNeverHidesAChange(t *testing.T) {
	e := setup(t, func(c *api.Config) { c.MaxAge = time.Nanosecond })
	resp, _ := e.get(t, "/api/v1/latest?ids="+quietItem)
	modified := resp.Header.Get("Last-Modified")
	mustExec(t, e.pool, `UPDATE tracked_items SET updated_at = now(), item_name = 'Silver Thread II' WHERE item_id = $1`, quietItem)
	e.clock.Advance(time.Second)
	resp, b := e.get(t, "/api/v1/latest?ids="+quietItem, "If-Modified-Since", modified)
	if resp.StatusCode != 200 || decode[latestBody](t, b).Items[0].Name != "Silver Thread II" {
		t.Fatalf("after a rename: %d %s", resp.StatusCode, b)
	}
	// Two more changes back to back land in one second (or in two: then there is nothing to
	// hide and the check below still holds).
	mustExec(t, e.pool, `UPDATE tracked_items SET updated_at = now(), item_name = 'Silver Thread III' WHERE item_id = $1`, quietItem)
	e.clock.Advance(time.Second)
	first, _ := e.get(t, "/api/v1/latest?ids="+quietItem)
	mustExec(t, e.pool, `UPDATE tracked_items SET updated_at = now(), item_name = 'Silver Thread IV' WHERE item_id = $1`, quietItem)
	e.clock.Advance(time.Second)
	second, b := e.get(t, "/api/v1/latest?ids="+quietItem, "If-Modified-Since", first.Header.Get("Last-Modified"))
	if second.StatusCode != 200 || decode[latestBody](t, b).Items[0].Name != "Silver Thread IV" {
		t.Fatalf("a change within the second of the copy held: %d %s", second.StatusCode, b)
	}
}

// counted reads collector_api_requests_total for an endpoint and code, as /metrics shows it.
func counted(t *testing.T, a *api.API, endpoint, code string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(a.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "collector_api_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["endpoint"] == endpoint && labels["code"] == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// The API runs at most MaxReads reads on the database at once: with every slot taken a series
// request sends nothing until one is free, and then answers; one that waits past slotWait is
// answered 503 with Retry-After.
func TestReadsWaitForASlot(t *testing.T) {
	e := setup(t, func(c *api.Config) { c.MaxReads = 1 })
	release := e.api.TakeReadSlot()
	before := e.db.n.Load()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/api/v1/items/"+hotItem+"/timeseries", nil)
	if resp, err := e.client.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("answered %d with the only slot taken", resp.StatusCode)
	}
	if n := e.db.n.Load() - before; n != 0 {
		t.Fatalf("%d statements sent with the only slot taken", n)
	}
	// Nor does it wait without end: past slotWait it answers 503, asking to come back.
	defer api.SetSlotWait(100 * time.Millisecond)()
	resp, b := e.get(t, "/api/v1/items/"+hotItem+"/timeseries")
	if p := decode[problem](t, b); resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(p.Detail, "busy") {
		t.Fatalf("with the only slot taken past the wait: %d, Retry-After %q, %s; want 503 saying the reads are busy", resp.StatusCode, resp.Header.Get("Retry-After"), b)
	}
	if n := e.db.n.Load() - before; n != 0 {
		t.Fatalf("%d statements sent with the only slot taken", n)
	}
	release()
	if resp, _ := e.get(t, "/api/v1/items/"+hotItem+"/timeseries"); resp.StatusCode != 200 {
		t.Fatalf("with the slot free: %d", resp.StatusCode)
	}
}

// A refresh patches the rows written since the last read into the copy: the answer and its
// gzip (rebuilt from the chunks that changed) stay the same JSON, which gzip(1) reads too; an
// item that comes or leaves makes it read every row; a write that does not move updated_at
// (no writer of these columns does that) shows within fullEvery.
func TestLatestPatchesWhatChanged(t *testing.T) {
	e := setup(t, func(c *api.Config) { c.MaxAge = time.Nanosecond })
	check := func(what string) latestBody {
		t.Helper()
		e.clock.Advance(time.Second)
		_, plain := e.get(t, "/api/v1/latest", "Accept-Encoding", "identity")
		_, zipped := e.get(t, "/api/v1/latest", "Accept-Encoding", "gzip")
		if path, err := exec.LookPath("gzip"); err == nil {
			cmd := exec.Command(path, "-dc")
			cmd.Stdin = bytes.NewReader(zipped)
			out, err := cmd.Output()
			if err != nil || !bytes.Equal(out, plain) {
				t.Fatalf("%s: gzip -dc: %v, %d bytes, want the identity answer's %d", what, err, len(out), len(plain))
			}
		} else if os.Getenv("CI") != "" {
			t.Fatal("gzip(1) is missing")
		}
		return decode[latestBody](t, plain)
	}
	check("first read")
	mustExec(t, e.pool, `UPDATE tracked_items SET updated_at = now(), seen_lowest_price = 777 WHERE item_id = 'filler-29'`)
	if got := check("one item changed"); *find(t, got, "filler-29").Lowest != 777 {
		t.Fatal("the change is not in the answer")
	}
	storetest.Items(t, e.pool, storetest.Item{ID: "a-newcomer", Name: "Newcomer"})
	mustExec(t, e.pool, `DELETE FROM tracked_items WHERE item_id = 'filler-05'`)
	got := check("one item came, one left")
	if len(got.Items) != 33 || !findOK(got, "a-newcomer") || findOK(got, "filler-05") {
		t.Fatalf("after one came and one left: %d items", len(got.Items))
	}
	mustExec(t, e.pool, `UPDATE tracked_items SET seen_lowest_price = 555 WHERE item_id = 'filler-10'`) // updated_at not moved
	e.clock.Advance(15 * time.Second)
	if got := check("a write that did not move updated_at, after fullEvery"); *find(t, got, "filler-10").Lowest != 555 {
		t.Fatal("the full read did not pick it up")
	}
}

// A write that began before a /latest read and committed after it is in the next refresh,
// however long it ran: the refresh looks for rows written since the read's horizon (the start
// of the oldest transaction then running), not only a few seconds back, which would miss a
// write-back that waited on a lock.
func TestLatestPatchesAWriteCommittedAfterTheRead(t *testing.T) {
	e := setup(t, func(c *api.Config) { c.MaxAge = time.Nanosecond })
	e.api.SetChangeOverlap(0) // what is looked for then comes from the horizon alone
	ctx := context.Background()
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	// updated_at is the transaction's start, as every writer of these columns sets it.
	if _, err := tx.Exec(ctx, `UPDATE tracked_items SET updated_at = now(), seen_lowest_price = 444 WHERE item_id = 'filler-12'`); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second)
	_, b := e.get(t, "/api/v1/latest")
	if l := find(t, decode[latestBody](t, b), "filler-12").Lowest; l != nil && *l == 444 {
		t.Fatal("an uncommitted write is in the answer")
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	e.clock.Advance(time.Second) // well within fullEvery: this refresh patches
	_, b = e.get(t, "/api/v1/latest")
	if l := find(t, decode[latestBody](t, b), "filler-12").Lowest; l == nil || *l != 444 {
		t.Fatal("filler-12's lowest price is not the committed write's 444")
	}
}

func find(t *testing.T, b latestBody, id string) latestItem {
	t.Helper()
	for _, it := range b.Items {
		if it.ItemID == id {
			return it
		}
	}
	t.Fatalf("%s not in the answer", id)
	return latestItem{}
}

func findOK(b latestBody, id string) bool {
	for _, it := range b.Items {
		if it.ItemID == id {
			return true
		}
	}
	return false
}

// A synthetic fixture's series is unknown to the API, as the fixture is to /latest and /items:
// 404 naming the id, however its row and snapshots look.
func TestFixtureHasNoSeries(t *testing.T) {
	e := setup(t, nil)
	mustExec(t, e.pool, `
		INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, listing_count, listing_quantity, lowest_unit_price)
		VALUES ('seed-0001', gen_random_uuid(), now() - interval '1 hour', 'HOT_1M', 1, 1, 5)`)
	for _, interval := range []string{"raw", "1h"} {
		resp, b := e.get(t, "/api/v1/items/seed-0001/timeseries?interval="+interval)
		if p := decode[problem](t, b); resp.StatusCode != 404 || p.Param != "id" {
			t.Fatalf("the fixture's %s series: %d %s; want 404 naming id", interval, resp.StatusCode, b)
		}
	}
}

// /latest's refresh has a read slot of its own: with every slot series and item reads share
// taken, a poll that needs a refresh still answers at once.
func TestLatestRefreshHasItsOwnSlot(t *testing.T) {
	e := setup(t, nil)
	for range api.MaxReadsDefault {
		t.Cleanup(e.api.TakeReadSlot()) // on failure too: the refresh still waiting gets one
	}
	ctx, cancel := context.WithTimeout(context.Background(), testkit.Timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL+"/api/v1/latest?ids="+hotItem, nil)
	resp, err := e.client.Do(req)
	if err != nil {
		t.Fatalf("/latest with every shared read slot taken: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if got := decode[latestBody](t, b); resp.StatusCode != 200 || len(got.Items) != 1 {
		t.Fatalf("/latest with every shared read slot taken: %d %s", resp.StatusCode, b)
	}
}

// A query string that does not parse, and a parameter the endpoint does not take, are refused
// naming the parameter: dropping them would answer more than was asked (every item for a
// garbled ids=). Nothing reaches the database.
func TestMalformedOrUnknownParametersAreRefused(t *testing.T) {
	e := setup(t, nil)
	series := "/api/v1/items/" + hotItem + "/timeseries"
	cases := []struct{ path, param string }{
		{"/api/v1/latest?ids=abc%zz", "ids"},
		{"/api/v1/latest?ids=" + hotItem + ";" + quietItem, "ids"},
		{"/api/v1/latest?ids=" + hotItem + "&_=1700000000", "_"},
		{"/api/v1/latest?id=" + hotItem, "id"},
		{"/api/v1/items?q=gold%zz", "q"},
		{"/api/v1/items?limt=5", "limt"},
		{"/api/v1/items?q=a;limit=5", "q"},
		{series + "?interval=raw;since=2026-12-01", "interval"},
		{series + "?interval=raw&from=2026-12-01", "from"},
		{series + "?since=2026-12-01&%zz=1", ""}, // a name that does not read is not named
		// A second value would be dropped: a client adding its own limit to a next link.
		{"/api/v1/items?limit=10&limit=200", "limit"},
		{series + "?interval=1h&interval=raw", "interval"},
	}
	before := e.db.n.Load()
	for _, c := range cases {
		resp, b := e.get(t, c.path)
		if p := decode[problem](t, b); resp.StatusCode != 400 || p.Param != c.param || p.Detail == "" {
			t.Errorf("%s: %d %s; want 400 naming %q", c.path, resp.StatusCode, b, c.param)
		}
	}
	if n := e.db.n.Load() - before; n != 0 {
		t.Fatalf("%d statements reached the database for malformed or unknown parameters", n)
	}
}

// A raw window spans at most a week, so an answer holds about 10,000 points at most (an item
// collected every minute); a longer one is refused naming since, saying to page by until.
func TestRawWindowSpansAtMostAWeek(t *testing.T) {
	e := setup(t, nil)
	until := time.Now().UTC().Truncate(time.Second)
	window := func(span time.Duration) string {
		q := url.Values{"interval": {"raw"}, "since": {until.Add(-span).Format(time.RFC3339)}, "until": {until.Format(time.RFC3339)}}
		return "/api/v1/items/" + hotItem + "/timeseries?" + q.Encode()
	}
	if resp, b := e.get(t, window(7*24*time.Hour)); resp.StatusCode != 200 {
		t.Fatalf("a week of raw snapshots: %d %s", resp.StatusCode, b)
	}
	resp, b := e.get(t, window(7*24*time.Hour+time.Second))
	if p := decode[problem](t, b); resp.StatusCode != 400 || p.Param != "since" || !strings.Contains(p.Detail, "7 days") ||
		!strings.Contains(p.Detail, "page by until") {
		t.Fatalf("a week and a second of raw snapshots: %d %s; want 400 naming since, 7 days and paging", resp.StatusCode, b)
	}
}

// Times the answer could not hold (after 9999 in UTC, though not in their own offset) are
// refused as bad parameters, not read and then failed on as a 503 that clients retry forever.
func TestTimesPastYear9999AreRefused(t *testing.T) {
	e := setup(t, nil)
	series := "/api/v1/items/" + hotItem + "/timeseries?"
	before := e.db.n.Load()
	for _, c := range []struct{ query, param string }{
		{"until=9999-12-31T23:00:00-23:00", "until"},
		{"since=9999-12-31T22:00:00-23:00&until=9999-12-31T23:00:00-23:00", "since"},
		{"interval=raw&since=9999-12-31T12:00:00Z&until=9999-12-31T23:00:00-23:00", "until"},
	} {
		resp, b := e.get(t, series+c.query)
		if p := decode[problem](t, b); resp.StatusCode != 400 || p.Param != c.param || resp.Header.Get("Retry-After") != "" {
			t.Errorf("%s: %d %s; want 400 naming %s", c.query, resp.StatusCode, b, c.param)
		}
	}
	if n := e.db.n.Load() - before; n != 0 {
		t.Fatalf("%d statements reached the database for times past 9999", n)
	}
	if resp, b := e.get(t, series+"interval=raw&since=9999-12-31T12:00:00Z&until=9999-12-31T23:00:00Z"); resp.StatusCode != 200 {
		t.Fatalf("the last hours of 9999: %d %s", resp.StatusCode, b)
	}
}

// docs/api.md's CORS section names every header an allowed origin's page may read.
func TestCORSDocumentsEveryExposedHeader(t *testing.T) {
	e := setup(t, func(c *api.Config) { c.CORSOrigins = []string{"*"} })
	resp, _ := e.get(t, "/api/v1/latest", "Origin", "https://anyone.example")
	exposed := resp.Header.Get("Access-Control-Expose-Headers")
	doc, err := os.ReadFile("../../docs/api.md")
	if err != nil {
		t.Fatal(err)
	}
	_, section, _ := strings.Cut(string(doc), "\n### CORS\n")
	section, _, _ = strings.Cut(section, "\n#")
	if exposed == "" || section == "" {
		t.Fatalf("exposed headers %q, CORS section %q", exposed, section)
	}
	for h := range strings.SplitSeq(exposed, ",") {
		if h = strings.TrimSpace(h); !strings.Contains(section, "`"+h+"`") {
			t.Errorf("docs/api.md#cors does not name %s, which pages may read", h)
		}
	}
}
