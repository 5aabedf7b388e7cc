package console_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"html"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/duecollector/duecollector/internal/api"
	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/console"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// The console is driven by Debian's headless Chromium (chromedp never downloads a browser)
// against a console served over a real database.

const (
	testUser     = "operator"
	testPassword = "correct horse battery staple"
)

// chromiumPath finds the browser; without one the tests skip, except under CI, where they fail.
func chromiumPath(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("chromium is not installed, and CI is set: the browser tests must run (apt-get install chromium)")
	}
	t.Skip("chromium is not installed: browser tests skipped (apt-get install chromium)")
	return ""
}

// env is a console over a seeded database.
type env struct {
	pool *pgxpool.Pool
	srv  *httptest.Server
}

// Seeded items: a candle history, a snapshot history, and others to page and search through.
const (
	candleItem   = "item-candles"
	snapshotItem = "item-snapshots"
)

func setup(t *testing.T, password string) env {
	t.Helper()
	return setupWith(t, password, nil, nil)
}

// setupWith is setup, with prepare run on the seeded database before the console reads it and
// configure on the console's configuration.
func setupWith(t *testing.T, password string, prepare func(ctx context.Context, pool *pgxpool.Pool), configure func(*console.Config)) env {
	t.Helper()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	items := []storetest.Item{
		{ID: candleItem, Name: "Golden Needle", Tier: tiers.Hot, TierReason: "score 9.1 ≥ hot threshold 8"},
		{ID: snapshotItem, Name: "Silver Thread", Tier: tiers.Warm},
	}
	for i := range 60 {
		items = append(items, storetest.Item{ID: fmt.Sprintf("filler-%02d", i), Name: fmt.Sprintf("Filler %02d", i), Tier: tiers.Cold})
	}
	storetest.Items(t, pool, items...)
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET popularity_score = 9.1 WHERE item_id = $1`, candleItem); err != nil {
		t.Fatal(err)
	}
	// 48 hourly candles and a snapshot every 2 hours, ending now.
	if _, err := pool.Exec(ctx, `
		INSERT INTO price_candles (item_id, resolution, bucket, snapshots, open_price, high_price, low_price, close_price,
		                           listings_min, listings_max, sales_count, sales_quantity, sales_value)
		SELECT $1, '1h', date_trunc('hour', now()) - h * interval '1 hour', 1, 1000 + h, 1100 + h, 900 + h, 1000 + h, 3, 5, h % 3, h % 4, (h % 4) * 1000
		FROM generate_series(0, 47) h`, candleItem); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, listing_count, listing_quantity, lowest_unit_price, sales_quantity)
		SELECT $1, gen_random_uuid(), now() - h * interval '2 hours', 'WARM_5M', 4, 10, 500 + h, h % 2
		FROM generate_series(0, 23) h`, snapshotItem); err != nil {
		t.Fatal(err)
	}
	storetest.Sales(t, pool, storetest.Sale{ItemID: candleItem, SoldAt: storetest.Ago(time.Hour), Quantity: 2, UnitPrice: 950})
	if prepare != nil {
		prepare(ctx, pool)
	}
	cfg := console.Config{ProviderName: "neople", Market: config.Default().Provider.Market, PackSize: 10,
		User: testUser, Password: config.Secret(password), Refresh: time.Hour, Session: time.Hour, API: api.Prefix}
	if configure != nil {
		configure(&cfg)
	}
	c, err := console.New(pool, cfg, zaptest.NewLogger(t, zaptest.Level(zap.WarnLevel)))
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); c.Start(cctx) }()
	// The read API beside the console, as collector run and collector console serve them.
	ap, err := api.New(pool, api.Config{APIConfig: config.Default().API}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle(api.Prefix, ap.Handler())
	mux.Handle("/", c.Handler())
	srv := httptest.NewServer(mux)
	t.Cleanup(func() { srv.Close(); cancel(); <-done })
	return env{pool: pool, srv: srv}
}

// browser is a fresh headless Chromium whose console errors, uncaught exceptions and error
// log entries (a Content-Security-Policy violation is one) are kept.
type browser struct {
	ctx  context.Context
	mu   sync.Mutex
	errs []string
}

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path := chromiumPath(t)
	opts := []chromedp.ExecAllocatorOption{
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.WindowSize(1280, 900),
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	b := &browser{ctx: ctx}
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		cancelCtx()
		cancelAlloc()
		t.Fatalf("start chromium: %v", err)
	}
	msgs := chromedp.Console(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for m, err := range msgs {
			if err != nil {
				return
			}
			if m.Type == chromedp.ConsoleError || m.IsException() {
				b.add(m.String() + " (" + m.URL + ")")
			}
		}
	}()
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
		<-done
		b.check(t, "after the test")
	})
	return b
}

func (b *browser) add(s string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.errs = append(b.errs, s)
}

func (b *browser) check(t *testing.T, what string) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.errs) > 0 {
		t.Fatalf("%s: the browser reported errors:\n%s", what, strings.Join(b.errs, "\n"))
	}
}

// actionTimeout bounds one step, so a page that never shows what a step waits for fails the
// test instead of hanging it; generous for a loaded 2-core machine, never a speed assertion.
const actionTimeout = time.Minute

// do runs actions and fails on any error or any console error seen so far.
func (b *browser) do(t *testing.T, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	b.check(t, what)
}

// get runs one action that reads a value.
func get[T any](t *testing.T, b *browser, what string, a chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, actionTimeout)
	defer cancel()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	b.check(t, what)
	return v
}

func TestEveryPageLoadsWithoutConsoleErrors(t *testing.T) {
	e := setup(t, testPassword)
	b := newBrowser(t)
	for _, path := range []string{
		"/", "/items", "/items?filter=pinned", "/items?filter=overdue", "/items?filter=gaps",
		"/items?tier=COLD_10M", "/items?q=fill", "/items/" + snapshotItem, "/login",
	} {
		b.do(t, path, chromedp.Navigate(e.srv.URL+path), chromedp.WaitReady(chromedp.CSS("main")))
		if title := get(t, b, path, chromedp.Title()); !strings.Contains(title, "duecollector") {
			t.Errorf("%s: title %q", path, title)
		}
	}
	// The item page's chart loads asynchronously: wait until it has drawn (or said why not).
	b.do(t, "item page chart", chromedp.Navigate(e.srv.URL+"/items/"+candleItem), chromedp.WaitReady(chromedp.CSS("#chart[data-points]")))
	// The overview refreshes itself: the swap marks it, with no error on the way.
	b.do(t, "overview refresh", chromedp.Navigate(e.srv.URL+"/"), chromedp.WaitReady(chromedp.CSS("#overview[data-refreshed]")),
		chromedp.WaitVisible(chromedp.CSS("#tiers")))
	// No plan was stored: no tier claims a freshness.
	if fresh := tierFreshness(t, b); len(fresh) != 4 || fresh["HOT_1M"] != "—" || fresh["COLD_10M"] != "—" || fresh["total"] != "—" {
		t.Errorf("est. freshness without a stored plan: %v, want — for every tier", fresh)
	}
}

// tierFreshness reads the overview's est. freshness column by tier (and "total"), checking the
// column is the one its header names.
func tierFreshness(t *testing.T, b *browser) map[string]string {
	t.Helper()
	col := get(t, b, "freshness column", chromedp.Evaluate[int](
		`[...document.querySelectorAll("#tiers thead th")].findIndex(th => th.textContent == "est. freshness")`))
	if col < 0 {
		t.Fatal("the tier table has no est. freshness column")
	}
	cells := get(t, b, "freshness cells", chromedp.Evaluate[[][]string](fmt.Sprintf(
		`[...document.querySelectorAll("#tiers tbody tr, #tiers tfoot tr")].map(tr => [tr.cells[0].textContent.trim(), tr.cells[%d].textContent.trim()])`, col)))
	out := map[string]string{}
	for _, c := range cells {
		out[c[0]] = c[1]
	}
	return out
}

// A stored plan's predicted freshness shows beside its tier, with when it was planned.
func TestOverviewShowsThePlansEstimatedFreshness(t *testing.T) {
	var planned []catalog.TierForecast
	e := setupWith(t, "", func(ctx context.Context, pool *pgxpool.Pool) {
		c := config.Default()
		p := catalog.PolicyFromConfig(c.Catalog, budget.ConfiguredPlanLimit(c), packing.Model{})
		if _, err := catalog.RecalculatePopularity(ctx, pool, p); err != nil {
			t.Fatal(err)
		}
		var err error
		if planned, err = catalog.ReadForecast(ctx, pool); err != nil || len(planned) == 0 {
			t.Fatalf("the plan stored no forecast: %v", err)
		}
	}, nil)
	b := newBrowser(t)
	b.do(t, "overview", chromedp.Navigate(e.srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#forecast-note")))
	fresh := tierFreshness(t, b)
	for _, f := range planned {
		if want := strconv.FormatFloat(100*f.Freshness, 'f', 1, 64) + "%"; fresh[string(f.Tier)] != want {
			t.Errorf("%s: est. freshness %q, want the stored %q (all: %v)", f.Tier, fresh[string(f.Tier)], want, fresh)
		}
	}
	if !strings.HasSuffix(fresh["total"], "%") {
		t.Errorf("total est. freshness %q, want a percentage", fresh["total"])
	}
	if w := get(t, b, "database card", chromedp.Text(chromedp.CSS("#database-writes"))); w != "takes writes" {
		t.Errorf("database card %q, want %q", w, "takes writes")
	}
	note := get(t, b, "forecast note", chromedp.Text(chromedp.CSS("#forecast-note")))
	if want := planned[0].PlannedAt.UTC().Format("2006-01-02 15:04:05"); !strings.Contains(note, "predicted by the tier plan of "+want) {
		t.Errorf("below the tiers: %q, want when the plan was made, %s", note, want)
	}
}

// The overview says whether events are published through the outbox or are off
// (outbox.enabled=false), and shows the outbox's backlog either way: events written before
// they were turned off are still there.
func TestOverviewSaysWhetherEventsArePublished(t *testing.T) {
	b := newBrowser(t)
	for _, tc := range []struct {
		noOutbox bool
		want     string
	}{
		{false, "events published through the outbox."},
		{true, "events off: outbox.enabled=false, no outbox rows written."},
	} {
		e := setupWith(t, "", func(ctx context.Context, pool *pgxpool.Pool) {
			if _, err := pool.Exec(ctx, `
				WITH o AS (INSERT INTO outbox (event_type, item_id, payload) SELECT 't', $1, '{}' FROM generate_series(1, 2) RETURNING id, lane)
				INSERT INTO outbox_pending (id, lane) SELECT id, lane FROM o`, snapshotItem); err != nil {
				t.Fatal(err)
			}
		}, func(c *console.Config) { c.NoOutbox = tc.noOutbox })
		b.do(t, "overview", chromedp.Navigate(e.srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#events")))
		events := get(t, b, "events", chromedp.Text(chromedp.CSS("#events")))
		pending := get(t, b, "outbox pending", chromedp.Text(chromedp.CSS("#outbox-pending")))
		if events != tc.want || pending != "2" {
			t.Errorf("outbox.enabled=%v: the overview says %q with %s unpublished; want %q with 2", !tc.noOutbox, events, pending, tc.want)
		}
	}
}

// A full disk under the database is on the overview, as `collector status` names it: the
// console's status read makes the same write that needs space.
func TestOverviewShowsAFullDisk(t *testing.T) {
	e := setupWith(t, "", func(_ context.Context, pool *pgxpool.Pool) {
		storetest.FillDisk(t, pool)
	}, nil)
	b := newBrowser(t)
	b.do(t, "overview", chromedp.Navigate(e.srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#database-writes")))
	if w := get(t, b, "database card", chromedp.Text(chromedp.CSS("#database-writes"))); w != "refuses writes (disk_full)" {
		t.Errorf("database card %q, want %q", w, "refuses writes (disk_full)")
	}
	card := get(t, b, "database card", chromedp.Text(chromedp.CSS("#database-writes + p")))
	if !strings.Contains(card, "No space left on device") {
		t.Errorf("database card detail %q, want the server's words", card)
	}
}

// A paused provider whose probe's holder died: the overview names the holder and says its
// lease ran out, as `collector status` does.
func TestOverviewNamesTheProbesHolder(t *testing.T) {
	e := setupWith(t, "", func(ctx context.Context, pool *pgxpool.Pool) {
		if _, err := pool.Exec(ctx, `
			WITH s AS (UPDATE provider_status SET status = 'DEGRADED', reason = 'test', since = now() - interval '1 minute'
			           WHERE provider = 'neople' RETURNING since)
			INSERT INTO provider_probe (provider, episode_since, failures, next_probe_at, leased_by, lease_expires_at)
			SELECT 'neople', since, 2, now() - interval '40 seconds', 'host-a:12', now() - interval '10 seconds' FROM s`); err != nil {
			t.Fatal(err)
		}
	}, nil)
	b := newBrowser(t)
	b.do(t, "overview", chromedp.Navigate(e.srv.URL+"/"), chromedp.WaitVisible(chromedp.CSS("#provider-probe")))
	probe := get(t, b, "provider probe", chromedp.Text(chromedp.CSS("#provider-probe")))
	if !strings.HasPrefix(probe, "probe: host-a:12's lease ran out ") || !strings.Contains(probe, "the next check of any instance takes it") {
		t.Errorf("the overview says %q of the probe, want its dead holder named", probe)
	}
}

func TestItemChartDrawsDataPoints(t *testing.T) {
	e := setup(t, "")
	b := newBrowser(t)
	for _, c := range []struct {
		item, source string
		points       int
	}{{candleItem, "candles 1h", 48}, {snapshotItem, "snapshots", 24}} {
		b.do(t, c.item, chromedp.Navigate(e.srv.URL+"/items/"+c.item), chromedp.WaitVisible(chromedp.CSS("#chart canvas")))
		points := get(t, b, c.item, chromedp.Evaluate[int](`window.consoleChart.data[0].length`))
		prices := get(t, b, c.item, chromedp.Evaluate[int](`window.consoleChart.data[1].filter(v => v != null).length`))
		source := get(t, b, c.item, chromedp.Evaluate[string](`document.getElementById("chart").dataset.source`))
		canvases := get(t, b, c.item, chromedp.Evaluate[int](`document.querySelectorAll("#chart canvas").length`))
		if points != c.points || prices != c.points || source != c.source || canvases != 1 {
			t.Errorf("%s: chart has %d points (%d prices) from %q on %d canvases, want %d from %q on 1",
				c.item, points, prices, source, canvases, c.points, c.source)
		}
	}
}

// The item page links the item's read API answers, and each link opens one about this item.
func TestItemPageLinksItsAPI(t *testing.T) {
	e := setup(t, "")
	b := newBrowser(t)
	b.do(t, "item page", chromedp.Navigate(e.srv.URL+"/items/"+candleItem), chromedp.WaitVisible(chromedp.CSS("#api-links")))
	links := get(t, b, "links", chromedp.Evaluate[[]string](`[...document.querySelectorAll("#api-links a")].map(a => a.href)`))
	if len(links) != 4 {
		t.Fatalf("API links: %v, want 4", links)
	}
	for _, link := range links[:3] {
		b.do(t, link, chromedp.Navigate(link), chromedp.WaitReady(chromedp.CSS("body")))
		// Chromium shows JSON as text: parse what it shows.
		got := get(t, b, link, chromedp.Evaluate[string](`(() => { const d = JSON.parse(document.body.innerText);
			return d.item_id || (d.items && d.items.length == 1 && d.items[0].item_id) || "" })()`))
		if got != candleItem {
			t.Errorf("%s: answers about %q, want %q", link, got, candleItem)
		}
	}
	b.do(t, "openapi", chromedp.Navigate(links[3]), chromedp.WaitReady(chromedp.CSS("body")))
	if v := get(t, b, "openapi", chromedp.Evaluate[string](`JSON.parse(document.body.innerText).openapi`)); v != "3.1.0" {
		t.Errorf("%s: openapi %q", links[3], v)
	}
}

// A fixture's page links no read API answer: the API serves real items only and would answer
// each link 404.
func TestAFixturePageLinksNoAPI(t *testing.T) {
	fixture := catalog.SyntheticPrefix + "0001"
	e := setupWith(t, "", func(_ context.Context, pool *pgxpool.Pool) {
		storetest.Items(t, pool, storetest.Item{ID: fixture, Name: "Fixture Needle", Tier: tiers.Hot})
	}, nil)
	b := newBrowser(t)
	b.do(t, "fixture page", chromedp.Navigate(e.srv.URL+"/items/"+fixture), chromedp.WaitVisible(chromedp.CSS("#chart")))
	if n := get(t, b, "links", chromedp.Evaluate[int](`document.querySelectorAll("#api-links a").length`)); n != 0 {
		t.Fatalf("the fixture's page links %d read API answers, want none", n)
	}
}

// An item whose collections fail (one the provider no longer knows) says so on its page: how
// its last collection ended, how many failed in a row, and the error.
func TestAnItemPageSaysItsCollectionsFail(t *testing.T) {
	const dead = "0123456789abcdef0123456789abcdef"
	e := setupWith(t, "", func(ctx context.Context, pool *pgxpool.Pool) {
		storetest.Items(t, pool, storetest.Item{ID: dead, Name: "Lost Needle", Tier: tiers.Warm})
		if _, err := pool.Exec(ctx, `UPDATE tracked_items SET last_outcome = 'item_error', failure_streak = 3,
			last_error = 'DNF003: no such item' WHERE item_id = $1`, dead); err != nil {
			t.Fatal(err)
		}
	}, nil)
	b := newBrowser(t)
	b.do(t, "item page", chromedp.Navigate(e.srv.URL+"/items/"+dead), chromedp.WaitVisible(chromedp.CSS("#chart")))
	text := get(t, b, "page text", chromedp.Evaluate[string](`document.body.innerText`))
	if !strings.Contains(text, "Last collection: item_error, 3 failed in a row: DNF003: no such item.") {
		t.Fatalf("the page of an item failing item_error does not say so:\n%s", text)
	}
}

func TestSearchFindsAnItem(t *testing.T) {
	e := setup(t, "")
	b := newBrowser(t)
	b.do(t, "search from the header", chromedp.Navigate(e.srv.URL+"/"),
		chromedp.SendKeys(chromedp.CSS(`header input[name="q"]`), "silver\n"), chromedp.WaitVisible(chromedp.CSS("#items")))
	rows := get(t, b, "rows", chromedp.Nodes(chromedp.CSSAll("#items tbody tr")))
	text := get(t, b, "rows", chromedp.Text(chromedp.CSS("#items tbody")))
	if len(rows) != 1 || !strings.Contains(text, "Silver Thread") || !strings.Contains(text, snapshotItem) {
		t.Fatalf("search silver: %d rows: %q", len(rows), text)
	}
	b.do(t, "search by exact id", chromedp.Navigate(e.srv.URL+"/items?q="+candleItem), chromedp.WaitVisible(chromedp.CSS("#items")))
	if text := get(t, b, "rows", chromedp.Text(chromedp.CSS("#items tbody"))); !strings.Contains(text, "Golden Needle") {
		t.Fatalf("search by id %s: %q", candleItem, text)
	}
	// 60 fillers: a page of 50, then the next page by its keyset link, the last one.
	b.do(t, "tier filter", chromedp.Navigate(e.srv.URL+"/items?tier=COLD_10M"), chromedp.WaitVisible(chromedp.CSS("#items")))
	if rows := get(t, b, "rows", chromedp.Nodes(chromedp.CSSAll("#items tbody tr"))); len(rows) != 50 {
		t.Fatalf("tier COLD_10M, first page: %d rows, want 50", len(rows))
	}
	first := get(t, b, "rows", chromedp.Text(chromedp.CSS("#items tbody")))
	b.do(t, "next page", chromedp.Click(chromedp.CSS("#next-page")), chromedp.WaitVisible(chromedp.CSS("#first-page")))
	rows = get(t, b, "rows", chromedp.Nodes(chromedp.CSSAll("#items tbody tr")))
	second := get(t, b, "rows", chromedp.Text(chromedp.CSS("#items tbody")))
	last := get(t, b, "next link", chromedp.Evaluate[int](`document.querySelectorAll("#next-page").length`))
	if len(rows) != 10 || last != 0 || !strings.Contains(second, "Filler") || strings.Contains(first, strings.Split(second, "\n")[0]) {
		t.Fatalf("tier COLD_10M, second page: %d rows (next link %d), want the other 10 and no next link:\n%s", len(rows), last, second)
	}
}

func TestPinWorksLoggedInAndIsRefusedOtherwise(t *testing.T) {
	e := setup(t, testPassword)
	b := newBrowser(t)
	b.do(t, "log in and pin",
		chromedp.Navigate(e.srv.URL+"/login?back=/items/"+snapshotItem),
		chromedp.SendKeys(chromedp.CSS(`input[name="user"]`), testUser),
		chromedp.SendKeys(chromedp.CSS(`input[name="password"]`), testPassword),
		chromedp.Submit(chromedp.CSS(`form.login`)),
		chromedp.WaitVisible(chromedp.CSS("#pin")),
		chromedp.SetValue(chromedp.CSS(`select[name="tier"]`), "HOT_1M"),
		chromedp.Click(chromedp.CSS("#pin")),
		chromedp.WaitVisible(chromedp.CSS("#unpin")))
	if got := pinnedTier(t, e.pool, snapshotItem); got != tiers.Hot {
		t.Fatalf("after the pin form, item %s pinned %q, want HOT_1M", snapshotItem, got)
	}
	// The overview's actions show their effect on the page they return to.
	b.do(t, "pause the provider", chromedp.Navigate(e.srv.URL+"/"), chromedp.Click(chromedp.CSS("#provider-pause")),
		chromedp.WaitVisible(chromedp.CSS("#provider-resume")))
	if st := get(t, b, "status", chromedp.Text(chromedp.CSS("#provider-status"))); st != "MAINTENANCE" {
		t.Errorf("after pause the provider reads %q, want MAINTENANCE", st)
	}
	b.do(t, "resume the provider", chromedp.Click(chromedp.CSS("#provider-resume")), chromedp.WaitVisible(chromedp.CSS("#provider-pause")))
	if st := get(t, b, "status", chromedp.Text(chromedp.CSS("#provider-status"))); st != "HEALTHY" {
		t.Errorf("after resume the provider reads %q, want HEALTHY", st)
	}
	// Both show among the recent transitions, newest first.
	tr := get(t, b, "transitions", chromedp.TextContent(chromedp.CSS("#transitions")))
	if i, j := strings.Index(tr, "manual override cleared"), strings.Index(tr, "manual override MAINTENANCE: paused from the console, "+testUser); i < 0 || j < i {
		t.Errorf("recent transitions:\n%s", tr)
	}

	// Without a session, or with the session but a wrong CSRF token, the same POST is refused.
	form := url.Values{"item": {candleItem}, "tier": {"HOT_1M"}, "back": {"/"}}
	if code := post(t, http.DefaultClient, e.srv.URL+"/actions/pin", form); code != http.StatusForbidden {
		t.Errorf("pin without a session: %d, want 403", code)
	}
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar}
	if code := post(t, hc, e.srv.URL+"/login", url.Values{"user": {testUser}, "password": {"wrong"}}); code != http.StatusUnauthorized {
		t.Errorf("login with a wrong password: %d, want 401", code)
	}
	if code := post(t, hc, e.srv.URL+"/login", url.Values{"user": {testUser}, "password": {testPassword}}); code != http.StatusSeeOther {
		t.Fatalf("login: %d, want 303", code)
	}
	// The session cookie is out of reach of scripts and of other sites' requests.
	res, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).
		PostForm(e.srv.URL+"/login", url.Values{"user": {testUser}, "password": {testPassword}})
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	if cks := res.Cookies(); len(cks) != 1 || !cks[0].HttpOnly || cks[0].SameSite != http.SameSiteStrictMode || cks[0].Path != "/" {
		t.Errorf("login cookie: %+v, want one HttpOnly, SameSite=Strict cookie on /", cks)
	}
	form.Set("csrf", "forged")
	if code := post(t, hc, e.srv.URL+"/actions/pin", form); code != http.StatusForbidden {
		t.Errorf("pin with a bad CSRF token: %d, want 403", code)
	}
	if got := pinnedTier(t, e.pool, candleItem); got != "" {
		t.Fatalf("refused pins pinned item %s to %q", candleItem, got)
	}
	// The page's token sent from another site (as a browser says it was) is refused as well.
	form.Set("csrf", csrfOf(t, hc, e.srv.URL+"/items/"+candleItem))
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/actions/pin", strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Sec-Fetch-Site", "cross-site")
	if res, err := hc.Do(req); err != nil || res.StatusCode != http.StatusForbidden {
		t.Fatalf("pin with the page's token from another site: %v, %v; want 403", res, err)
	} else {
		_ = res.Body.Close()
	}
	if got := pinnedTier(t, e.pool, candleItem); got != "" {
		t.Fatalf("a cross-site pin pinned item %s to %q", candleItem, got)
	}
	// The token the page carries works.
	if code := post(t, hc, e.srv.URL+"/actions/pin", form); code != http.StatusSeeOther {
		t.Fatalf("pin with the page's CSRF token: %d, want 303", code)
	}
	if got := pinnedTier(t, e.pool, candleItem); got != tiers.Hot {
		t.Fatalf("item %s pinned %q, want HOT_1M", candleItem, got)
	}
	// A tier that cannot be pinned, or an id the database cannot take, is the caller's error.
	for _, bad := range []url.Values{{"tier": {"DORMANT"}}, {"item": {"\xff"}}} {
		f := url.Values{}
		for k, v := range form {
			f[k] = v
		}
		for k, v := range bad {
			f[k] = v
		}
		if code := post(t, hc, e.srv.URL+"/actions/pin", f); code != http.StatusBadRequest {
			t.Errorf("pin %v: %d, want 400", bad, code)
		}
	}
	// Logging out works from an error page too: its form carried no token, so the logout was
	// refused and the session stayed live.
	if code := post(t, hc, e.srv.URL+"/logout", url.Values{"csrf": {csrfOf(t, hc, e.srv.URL+"/items/no-such-item")}}); code != http.StatusSeeOther {
		t.Fatalf("log out from a 404 page: %d, want 303", code)
	}
	if code := post(t, hc, e.srv.URL+"/actions/pin", form); code != http.StatusForbidden {
		t.Errorf("pin after logging out: %d, want 403", code)
	}
	// A wrong password keeps where the login was to return.
	res, err = http.PostForm(e.srv.URL+"/login", url.Values{"user": {testUser}, "password": {"wrong"}, "back": {"/items/" + candleItem}})
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if !strings.Contains(string(body), `name="back" value="/items/`+candleItem+`"`) {
		t.Errorf("the login page after a wrong password lost its way back:\n%.500s", body)
	}
}

// A path or query value PostgreSQL cannot take as text is a 400 naming what is wrong, not a
// 500 (and a warning logged) per request.
func TestUnreadableInputIsABadRequest(t *testing.T) {
	e := setup(t, "")
	nulCursor := base64.RawURLEncoding.EncodeToString([]byte(`{"i":"x","n":"\u0000"}`))
	for path, want := range map[string]string{
		"/items?q=%FF":                "not valid UTF-8",
		"/items?q=a%00":               "contains a NUL character",
		"/items/%FF":                  "path: not valid UTF-8",
		"/items/%FF/chart.json":       "path: not valid UTF-8",
		"/items?after=" + nulCursor:   "after: not a page cursor",
		"/items?tier=HOT_1M&q=%FF%FE": "\"q\": not valid UTF-8",
	} {
		res, err := http.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if res.StatusCode != http.StatusBadRequest || !strings.Contains(html.UnescapeString(string(body)), want) ||
			res.Header.Get("Cache-Control") != "no-store" || !strings.HasPrefix(res.Header.Get("Content-Type"), "text/html") {
			t.Errorf("GET %s: %d %v, want a 400 page, not cached, saying %q:\n%.300s", path, res.StatusCode, res.Header, want, body)
		}
	}
	// Of two unreadable parameters the same one is named every time (the first by name).
	for range 10 {
		res, err := http.Get(e.srv.URL + "/items?tier=%FF&q=%00")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		if !strings.Contains(html.UnescapeString(string(body)), `"q": contains a NUL character`) {
			t.Fatalf("two unreadable parameters: %d, want q named:\n%.300s", res.StatusCode, body)
		}
	}
	// A malformed pair is dropped, as before: only text the database cannot take is refused.
	for _, path := range []string{"/items?q=50%", "/items?q=a;b", "/static/console.js"} {
		res, err := http.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != http.StatusOK {
			t.Errorf("GET %s: %d, want 200", path, res.StatusCode)
		}
	}
}

// Password guessing is paced: after a few failures every login is refused for a while, the
// right password too.
func TestFailedLoginsArePaced(t *testing.T) {
	e := setup(t, testPassword)
	for i := range 8 { // successes cost nothing: several operators log in within the minute
		if code := post(t, http.DefaultClient, e.srv.URL+"/login", url.Values{"user": {testUser}, "password": {testPassword}}); code != http.StatusSeeOther {
			t.Fatalf("login %d with the right password: %d, want 303", i+1, code)
		}
	}
	codes := map[int]int{}
	for range 6 {
		codes[post(t, http.DefaultClient, e.srv.URL+"/login", url.Values{"user": {testUser}, "password": {"guess"}})]++
	}
	if codes[http.StatusUnauthorized] != 5 || codes[http.StatusTooManyRequests] != 1 {
		t.Errorf("six wrong passwords answered %v, want 5 × 401 then 429", codes)
	}
	if code := post(t, http.DefaultClient, e.srv.URL+"/login", url.Values{"user": {testUser}, "password": {testPassword}}); code != http.StatusTooManyRequests {
		t.Errorf("the right password right after: %d, want 429", code)
	}
}

// A guesser paced out locks out only itself: the operator logging in from another address
// meanwhile is let in.
func TestAGuesserLocksOutOnlyItself(t *testing.T) {
	e := setup(t, testPassword)
	for range console.LoginBurst + 1 {
		post(t, http.DefaultClient, e.srv.URL+"/login", url.Values{"user": {testUser}, "password": {"guess"}})
	}
	if code := post(t, http.DefaultClient, e.srv.URL+"/login", url.Values{"user": {testUser}, "password": {testPassword}}); code != http.StatusTooManyRequests {
		t.Fatalf("the guesser's own address with the right password: %d, want 429", code)
	}
	// Another loopback address: Linux routes all of 127/8 to lo (macOS only 127.0.0.1).
	other := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}
	if ln, err := net.ListenTCP("tcp", other); err != nil {
		t.Skipf("no second loopback address to log in from: %v", err)
	} else {
		_ = ln.Close()
	}
	elsewhere := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: other}).DialContext}}
	if code := post(t, elsewhere, e.srv.URL+"/login", url.Values{"user": {testUser}, "password": {testPassword}}); code != http.StatusSeeOther {
		t.Fatalf("the operator from another address meanwhile: %d, want 303 (logged in)", code)
	}
}

// Guesses sent together are paced like guesses in a row: each takes its try before its
// password is compared.
func TestGuessesSentTogetherArePaced(t *testing.T) {
	e := setup(t, testPassword)
	codes := make(chan int, 20)
	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- post(t, http.DefaultClient, e.srv.URL+"/login", url.Values{"user": {testUser}, "password": {"guess"}})
		}()
	}
	wg.Wait()
	close(codes)
	n := map[int]int{}
	for c := range codes {
		n[c]++
	}
	if n[http.StatusUnauthorized] > 5 || n[http.StatusUnauthorized]+n[http.StatusTooManyRequests] != 20 {
		t.Errorf("20 guesses at once answered %v, want at most 5 compared (401), the rest 429", n)
	}
}

// Behind the TLS proxy the docs put in front, the session cookie is Secure: the browser's
// Origin says https though the console itself serves plain http.
func TestTheSessionCookieIsSecureBehindATLSProxy(t *testing.T) {
	e := setup(t, testPassword)
	for origin, secure := range map[string]bool{"https://": true, "http://": false} {
		u, _ := url.Parse(e.srv.URL)
		req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/login", strings.NewReader(url.Values{"user": {testUser}, "password": {testPassword}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", origin+u.Host)
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		cookies := res.Cookies()
		if res.StatusCode != http.StatusSeeOther || len(cookies) != 1 || cookies[0].Secure != secure {
			t.Errorf("login from %s: %d, cookies %v; want one session cookie, Secure %t", origin+u.Host, res.StatusCode, cookies, secure)
		}
	}
}

// A login another site's page sends is refused by what the browser says of it (Sec-Fetch-Site,
// else Origin); the console's own form is let in, also through a proxy that rewrote Host.
func TestCrossSiteLoginsAreRefused(t *testing.T) {
	e := setup(t, testPassword)
	u, _ := url.Parse(e.srv.URL)
	for _, tc := range []struct {
		what, site, origin string
		want               int
	}{
		{"another site's form", "cross-site", "https://evil.example", http.StatusForbidden},
		{"an older browser from another site (Origin alone)", "", "https://evil.example", http.StatusForbidden},
		{"the console's own form", "same-origin", "http://" + u.Host, http.StatusSeeOther},
		{"the console's own form through a proxy that rewrote Host", "same-origin", "https://console.example", http.StatusSeeOther},
		{"curl (neither header)", "", "", http.StatusSeeOther},
	} {
		req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/login", strings.NewReader(url.Values{"user": {testUser}, "password": {testPassword}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		if tc.site != "" {
			req.Header.Set("Sec-Fetch-Site", tc.site)
		}
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		res, err := http.DefaultTransport.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if res.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.what, res.StatusCode, tc.want)
		}
	}
}

func TestReadOnlyWithoutCredentials(t *testing.T) {
	e := setup(t, "")
	b := newBrowser(t)
	b.do(t, "item page without credentials", chromedp.Navigate(e.srv.URL+"/items/"+snapshotItem), chromedp.WaitReady(chromedp.CSS("main")))
	if n := get(t, b, "buttons", chromedp.Evaluate[int](`document.querySelectorAll("main form button").length`)); n != 0 {
		t.Errorf("a read-only console shows %d action buttons", n)
	}
	for _, path := range []string{"/actions/pin", "/actions/provider", "/actions/packing", "/actions/outbox-retry", "/login"} {
		if code := post(t, http.DefaultClient, e.srv.URL+path, url.Values{"item": {snapshotItem}, "tier": {"HOT_1M"}, "csrf": {"x"}}); code != http.StatusForbidden {
			t.Errorf("POST %s without credentials configured: %d, want 403", path, code)
		}
	}
	if got := pinnedTier(t, e.pool, snapshotItem); got != "" {
		t.Fatalf("a read-only console pinned %s to %q", snapshotItem, got)
	}
}
func TestEveryAnswerCarriesTheContentSecurityPolicy(t *testing.T) {
	e := setup(t, testPassword)
	for _, path := range []string{"/", "/overview.part", "/items", "/items/" + candleItem, "/items/" + candleItem + "/chart.json",
		"/login", "/static/console.js", "/static/vendor/uplot/LICENSE", "/items/nope"} {
		res, err := http.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = res.Body.Close()
		if got := res.Header.Get("Content-Security-Policy"); got != console.ContentSecurityPolicy {
			t.Errorf("%s: Content-Security-Policy %q", path, got)
		}
		if want := map[bool]int{true: 404, false: 200}[path == "/items/nope"]; res.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, res.StatusCode, want)
		}
	}
}

func post(t *testing.T, c *http.Client, u string, form url.Values) int {
	t.Helper()
	cc := *c
	cc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	res, err := cc.PostForm(u, form)
	if err != nil {
		t.Fatal(err)
	}
	_ = res.Body.Close()
	return res.StatusCode
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

func csrfOf(t *testing.T, c *http.Client, u string) string {
	t.Helper()
	res, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var sb strings.Builder
	buf := make([]byte, 32<<10)
	for {
		n, err := res.Body.Read(buf)
		sb.Write(buf[:n])
		if err != nil {
			break
		}
	}
	m := csrfField.FindStringSubmatch(sb.String())
	if m == nil {
		t.Fatalf("%s: no CSRF token on the page of a logged-in session", u)
	}
	return m[1]
}

func pinnedTier(t *testing.T, pool *pgxpool.Pool, id string) tiers.Tier {
	t.Helper()
	rows, err := catalog.ListItems(context.Background(), pool, catalog.ItemsQuery{ItemID: id})
	if err != nil || len(rows) != 1 {
		t.Fatalf("read item %s: %v (%d rows)", id, err, len(rows))
	}
	return rows[0].PinnedTier
}
