package main

import (
	"context"
	"fmt"
	"html"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/console"
)

const consoleDB = "bench_console"

// consoleSize is the catalog and history the console is timed on.
type consoleSize struct {
	items, rows int // tracked items; stored snapshot rows
	requests    int // timed requests per page
}

// benchConsole times every console page over HTTP on a catalog of items tracked items and rows
// stored snapshots: the overview, the item list's first and later keyset pages, its filters,
// a name search, an item page and its chart from candles and from snapshots.
func benchConsole(ctx context.Context, e *env, sz sizes, rep *report) error {
	cs := sz.console
	u, err := e.freshDB(ctx, consoleDB, true)
	if err != nil {
		return err
	}
	defer e.dropDB(ctx, consoleDB)
	pool, err := openPool(ctx, u, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	// Two days of snapshots in daily partitions plus today's; candles for the first 2 % of the
	// items (the rest chart from snapshots), as a catalog whose history issue landed late would.
	h := histSize{items: cs.items, days: 2, rows: cs.rows, candleItems: max(1, cs.items/50)}
	t0 := time.Now()
	seed, err := seedHistory(ctx, pool, h, time.Now())
	if err != nil {
		return err
	}
	// A catalog as planning leaves it: scores spread, tiers by score, 1 % pinned, 5 % with
	// lost-sale gaps, schedules spread over ±5 min, names from a few words.
	if _, err := pool.Exec(ctx, `
		UPDATE tracked_items SET popularity_score = s.score,
		       collection_tier = CASE WHEN s.score > 8 THEN 'HOT_1M' WHEN s.score > 6 THEN 'ACTIVE_3M' WHEN s.score > 3 THEN 'WARM_5M' ELSE 'COLD_10M' END,
		       pinned_tier = CASE WHEN s.r < 0.01 THEN 'HOT_1M' END,
		       sales_gaps = CASE WHEN s.r > 0.95 THEN 1 + (s.r * 1000)::int % 5 ELSE 0 END,
		       next_collect_at = now() + (s.r * 600 - 300) * interval '1 second',
		       item_name = (ARRAY['Golden', 'Silver', 'Iron', 'Crystal', 'Ancient', 'Shadow'])[1 + get_byte(decode(item_id, 'hex'), 0) % 6] || ' ' || item_name
		FROM (SELECT item_id AS id, round((random() * 10)::numeric, 3)::float8 AS score, random() AS r FROM tracked_items) s
		WHERE item_id = s.id`); err != nil {
		return fmt.Errorf("spread the catalog: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE tracked_items`); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	rep.note("console: seeded %d tracked items, %s snapshot rows and %s candle rows in %s", cs.items, approx(seed.rows), approx(seed.candles), time.Since(t0).Round(time.Second))

	c, err := console.New(pool, console.Config{ProviderName: "neople", Market: config.Default().Provider.Market, PackSize: 10,
		Refresh: time.Hour, Session: time.Hour}, zap.NewNop())
	if err != nil {
		return err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go c.Start(cctx)
	srv := httptest.NewServer(c.Handler())
	defer srv.Close()
	client := srv.Client()

	get := func(path string) (string, error) {
		res, err := client.Get(srv.URL + path)
		if err != nil {
			return "", err
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			return "", err
		}
		if res.StatusCode != http.StatusOK {
			return "", fmt.Errorf("GET %s: %d: %.200s", path, res.StatusCode, b)
		}
		return string(b), nil
	}
	t0 = time.Now()
	if _, err := get("/"); err != nil { // waits for the first status refresh
		return err
	}
	rep.note("console: the first overview, which waits for the first status read (re-read in the background while pages are viewed, never in a request after that), took %s on %d items", time.Since(t0).Round(time.Millisecond), cs.items)
	// Later pages: the cursors of pages 2 … requests+1, followed as a reader would.
	next := regexp.MustCompile(`href="/items\?([^"]+)" id="next-page"`)
	var deep []string
	for path := "/items"; len(deep) < cs.requests; {
		body, err := get(path)
		if err != nil {
			return err
		}
		m := next.FindStringSubmatch(body)
		if m == nil {
			break
		}
		path = "/items?" + html.UnescapeString(m[1])
		if !strings.Contains(path, "after=") {
			return fmt.Errorf("the next-page link %q carries no cursor", path)
		}
		deep = append(deep, path)
	}
	rnd := rand.New(rand.NewPCG(1, 2))
	item := func(candled bool) string {
		if candled {
			return seed.items[rnd.IntN(h.candleItems)]
		}
		return seed.items[h.candleItems+rnd.IntN(len(seed.items)-h.candleItems)]
	}
	filters := []string{"/items?filter=pinned", "/items?filter=overdue", "/items?filter=gaps", "/items?tier=ACTIVE_3M", "/items?tier=HOT_1M&filter=pinned"}
	prefixes := []string{"gold", "silver+item+1", "iron+item+42", "crystal", "anc", "shadow+item+9"}
	for _, p := range []struct {
		name string
		path func(i int) string
	}{
		{"overview (/)", func(int) string { return "/" }},
		{"overview refresh (/overview.part)", func(int) string { return "/overview.part" }},
		{"items, first page", func(int) string { return "/items" }},
		{fmt.Sprintf("items, pages 2–%d (keyset)", len(deep)+1), func(i int) string { return deep[i%len(deep)] }},
		{"items, filters (pinned, overdue, gaps, tier)", func(i int) string { return filters[i%len(filters)] }},
		{"items, name search", func(i int) string { return "/items?q=" + prefixes[i%len(prefixes)] }},
		{"item page", func(int) string { return "/items/" + item(false) }},
		{"item chart JSON, hourly candles (7 days)", func(int) string { return "/items/" + item(true) + "/chart.json" }},
		{"item chart JSON, snapshots (7 days)", func(int) string { return "/items/" + item(false) + "/chart.json" }},
	} {
		for i := range 10 { // warm the pool's prepared statements
			if _, err := get(p.path(i)); err != nil {
				return err
			}
		}
		var lat []float64
		for i := range cs.requests {
			t := time.Now()
			if _, err := get(p.path(i)); err != nil {
				return err
			}
			lat = append(lat, ms(time.Since(t)))
		}
		rep.add("Console "+p.name+", p50 / p99", fmt.Sprintf("%.1f / %.1f ms", quantile(lat, 0.5), quantile(lat, 0.99)),
			fmt.Sprintf("target p99 ≤ 100 ms. %d GETs one after another over HTTP (httptest) after 10 untimed, rendered in full; %d tracked items, %s snapshot rows, candles for %d items",
				cs.requests, cs.items, approx(seed.rows), h.candleItems))
	}
	return nil
}
