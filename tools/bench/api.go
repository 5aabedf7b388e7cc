package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/api"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/tiers"
)

const (
	apiDB       = "bench_api"
	apiSeriesDB = "bench_api_series"
	apiSeed     = 29
	// apiPollers poll /latest at once, each a full answer every apiPollEvery: far more often
	// than a site needs (the copy changes at most every MaxAge/2), so the server is never idle.
	apiPollers   = 8
	apiPollEvery = 250 * time.Millisecond
	// apiPoll304Every paces each poller of the 304 loops: 800 requests a second in all, as
	// 4,000 sites polling every 5 s would send; back to back they would time the queue of
	// a saturated 2-core machine instead.
	apiPoll304Every = 10 * time.Millisecond
	// apiNewestEvery is how often the newest committed seen_at is sampled while full answers
	// are polled.
	apiNewestEvery = 50 * time.Millisecond
	// apiQuietItems are DORMANT items nobody collects: a poll of ?ids= naming them is answered
	// 304 while the rest of the market changes under it.
	apiQuietItems = 100
	// apiSeriesClients read /timeseries at once.
	apiSeriesClients = 4
	apiWarmReads     = 20
)

// apiSize is the API section's workload.
type apiSize struct {
	items  int           // HOT items collected in real time while /latest is polled
	window time.Duration // the full answers' polling; each 304 loop runs half as long
	series histSize      // stored history /timeseries reads
	reads  int           // timed /timeseries requests per interval
}

// benchAPI times the read API (internal/api) over HTTP: /latest while a daemon collects every
// item once a minute, and /timeseries over the history section's volume of stored rows.
func benchAPI(ctx context.Context, e *env, sz sizes, rep *report) error {
	if err := apiLatest(ctx, e, sz.api, rep); err != nil {
		return fmt.Errorf("/latest: %w", err)
	}
	if err := apiSeries(ctx, e, sz.api, rep); err != nil {
		return fmt.Errorf("/timeseries: %w", err)
	}
	return nil
}

// apiConfig is the product's API configuration without the per-client rate limit: the
// pollers share one address and would otherwise time 429s.
func apiConfig() api.Config {
	c := config.Default().API
	c.Rate = 0
	return api.Config{APIConfig: c}
}

// apiLatest runs a daemon in this process collecting n HOT items of the realistic simulated
// market (about n/60 collections a second) and, once its first collections are behind it,
// polls /latest: full answers with gzip, then 304s of a filtered poll while it collects, then
// 304s of the full answer once it has stopped.
func apiLatest(ctx context.Context, e *env, as apiSize, rep *report) error {
	n := as.items
	bin, err := buildCollector(ctx)
	if err != nil {
		return err
	}
	u, err := e.freshDB(ctx, apiDB, false)
	if err != nil {
		return err
	}
	defer e.dropDB(ctx, apiDB)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// As production runs: the simulator (the provider) and `collector run` (collection and
	// the API in one process) each their own process; this one only polls.
	sim, _, err := hotCatalog(lctx, bin, u, n, "--market", "realistic", "--seed", strconv.Itoa(apiSeed))
	if err != nil {
		return err
	}
	defer sim.stop()
	pool, err := openPool(ctx, u, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	quiet, err := apiSeedQuiet(ctx, pool)
	if err != nil {
		return err
	}
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	// Budget sharing's slow start (1 % of the ceiling until a limit is learned) would take
	// minutes to reach the simulator's unlimited key; the daemon section measures it. Pinned
	// HOT (apiSeedQuiet), the plan keeps every item collected each minute.
	d, err := startDaemon(lctx, bin, u, sim.base, 5000, "COLLECTOR_DAEMON_HTTP_ADDR="+addr,
		"COLLECTOR_DAEMON_BUDGET_ENABLED=false", "COLLECTOR_API_RATE=0", "COLLECTOR_CONSOLE_ENABLED=false")
	if err != nil {
		return err
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = d.stop()
		}
	}()
	started := time.Now()
	burst, err := apiFirstCollections(ctx, pool, n, nil)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, d.stderr.Bytes())
	}
	// An item's next slot is at least half an interval after its first collection, so the
	// rate is n/60 a second from half a minute after the last first collection on.
	steady := started.Add(burst + 32*time.Second)
	rep.note("api: %d HOT items' first collections (every item due at once) took %s; /latest is polled from %s after the daemon started",
		n, burst.Round(100*time.Millisecond), steady.Sub(started).Round(time.Second))

	c := newAPIClient("http://" + addr)
	// Warm, as a served API is: one poll every few seconds until the window keeps the
	// background refresh running (it stops 30 s after the last poll, and a poll finding the
	// copy older than 1 s then reads it itself), as sites polling it would.
	for time.Now().Before(steady) {
		if _, err := c.get(ctx, "/api/v1/latest", apiGet{}); err != nil {
			return err
		}
		if err := sleepCtx(ctx, min(5*time.Second, time.Until(steady))); err != nil {
			return err
		}
	}

	from, err := store.Now(ctx, pool)
	if err != nil {
		return err
	}
	sctx, stopSampling := context.WithCancel(ctx)
	sampled := make(chan []apiSample, 1)
	go func() { sampled <- apiSampleNewest(sctx, pool) }()
	full, probe, err := apiPollFull(ctx, c, as.window, n+apiQuietItems)
	// The last answers are compared with samples taken after them.
	_ = sleepCtx(ctx, 3*apiNewestEvery)
	stopSampling()
	samples := <-sampled
	if err != nil {
		return err
	}
	rep.note("api: load average at the end of the /latest full-answer window: %s (other work on the machine shares the cores with the daemon, the API and its clients)", loadAvg())
	age, missed := apiFreshness(probe.seen, samples)
	if len(missed) < len(probe.seen)*9/10 {
		return fmt.Errorf("only %d of %d answers have a sample of the newest seen_at around them (%d samples)", len(missed), len(probe.seen), len(samples))
	}
	ids := "/api/v1/latest?ids=" + strings.Join(quiet, ",")
	stalls := stallMeter()
	filtered, err := apiPoll304(ctx, c, ids, as.window/2)
	filteredStalls := stalls()
	if err != nil {
		return err
	}
	consFull, consFiltered, consStalls, err := apiConsole(ctx, lctx, bin, u, ids, as.window/2, n+apiQuietItems)
	if err != nil {
		return fmt.Errorf("collector console: %w", err)
	}
	to, err := store.Now(ctx, pool)
	if err != nil {
		return err
	}
	var collections int
	// Both loops together are shorter than a HOT interval, so an item collected in them was
	// collected once: items seen in the span count its collections.
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM tracked_items WHERE last_collected_at >= $1 AND last_collected_at <= $2`,
		from, to).Scan(&collections); err != nil {
		return fmt.Errorf("count collections: %w", err)
	}
	rate := float64(collections) / to.Sub(from).Seconds()
	// Collection stops, the API stays: the provider set to MAINTENANCE by hand,
	// the daemon stops dispatching and its answers stop changing.
	if out, err := exec.CommandContext(ctx, bin, "provider", "set", "MAINTENANCE", "--reason", "bench: collection stopped",
		"--for", "1h", "--database-url", u).CombinedOutput(); err != nil {
		return fmt.Errorf("collector provider set MAINTENANCE: %w\n%s", err, out)
	}
	if _, err := apiSettled(ctx, c, "/api/v1/latest"); err != nil {
		return err
	}
	paused, err := apiPoll304(ctx, c, "/api/v1/latest", as.window/2)
	if err != nil {
		return err
	}
	stopped = true
	if err := d.stop(); err != nil {
		return err
	}

	load := fmt.Sprintf("one `collector run` process of the built binary (product defaults: packing on, concurrency 16; budget sharing off, COLLECTOR_PROVIDER_MARKET_RATE=5000, the API's rate limit off, the console off) serving the API on its daemon.http_addr while it collects %s items pinned HOT_1M of `collector-dev sim --market realistic` (seed %d, a separate process) in real time, %.0f collections/s over the window (items whose last_collected_at fell in it); measured from %s after its first collections, when every item is on its phase-pinned slot; the clients in the bench process, every process on the same 2 cores",
		count(n), apiSeed, rate, (steady.Sub(started) - burst).Round(time.Second))
	rep.add(fmt.Sprintf("API /latest, %s items being collected: full answer p50 / p99 / max", count(n+apiQuietItems)),
		fmt.Sprintf("%.1f / %.1f / %.1f ms (%s gzip, %s JSON)", quantile(full.lat, 0.5), quantile(full.lat, 0.99), slices.Max(full.lat), kbOrMB(full.wire), kbOrMB(probe.raw)),
		fmt.Sprintf("target p99 ≤ 20 ms. %d clients each GET /api/v1/latest with Accept-Encoding: gzip every %s (staggered) for %s, %d answers, all 200 and gzip; from sending the request to the last byte of the gzip body read (not decompressed: at 32 answers a second that would take the clients more CPU than the machine has); a 9th client, the freshness prober below, polls beside them; %s",
			apiPollers, apiPollEvery, as.window, len(full.lat), load))
	rep.add("API /latest freshness: how long the oldest collection missing from an answer had been committed when it was received, p50 / p99 / max",
		fmt.Sprintf("%.0f / %.0f / %.0f ms", quantile(missed, 0.5), quantile(missed, 0.99), slices.Max(missed)),
		fmt.Sprintf("target ≤ 1 s (api.MaxAgeDefault): how far an answer trails what was committed. A prober GETs /api/v1/latest as plain JSON every %s beside the gzip clients for the same window (%d answers; p50 / p99 %.1f / %.1f ms for its %s), their newest seen_at (an item's last collection; a snapshot's collected_at is never newer) against max(tracked_items.last_collected_at) sampled every %s: an answer lacking a newer committed collection counts from the start of the last sample that did not see it either to its receipt (an upper bound, over by up to the sampling period), one lacking none counts 0; %d of %d answers compared. The copy is refreshed every 500 ms while polled and read again by a poll finding it older than 1 s; a refresh reads what was committed when it began",
			apiPollEvery, len(probe.lat), quantile(probe.lat, 0.5), quantile(probe.lat, 0.99), kbOrMB(probe.raw), apiNewestEvery, len(missed), len(probe.seen)))
	rep.add("API /latest age: received − newest seen_at in the answer, p50 / p99 / max",
		fmt.Sprintf("%.0f / %.0f / %.0f ms", quantile(age, 0.5), quantile(age, 0.99), slices.Max(age)),
		fmt.Sprintf("for information: the prober's answers against the wall clock, which adds how old the newest committed collection already was: the daemon starts its passes at least daemon.pack_wait (1 s) apart, claiming up to that long ahead, so even at %.0f collections/s the newest seen_at in the database steps once a second",
			rate))
	rep.add(fmt.Sprintf("API /latest 304, ?ids= of %d items not collected, while collecting: p50 / p99 / max", apiQuietItems),
		fmt.Sprintf("%.2f / %.2f / %.2f ms (%d of %d answers 304)", quantile(filtered.lat, 0.5), quantile(filtered.lat, 0.99), slices.Max(filtered.lat), filtered.notModified, len(filtered.lat)),
		fmt.Sprintf("target ≤ 2 ms. %d clients, each a request every %s (at most %d a second in all), for %s, each sending If-None-Match with the ETag it holds for /api/v1/latest?ids= naming %d DORMANT items (a 304 needs an unchanged answer: these are never collected, while the other %s items change every second); the ETag is hashed from the current copy per request; %s; same load: %s",
			apiPollers, apiPoll304Every, apiPollers*int(time.Second/apiPoll304Every), as.window/2, apiQuietItems, count(n), stallNote(filteredStalls), load))
	rep.add("API /latest served by `collector console` (its own process), while collecting: full answer p50 / p99 / max",
		fmt.Sprintf("%.1f / %.1f / %.1f ms (%s gzip)", quantile(consFull.lat, 0.5), quantile(consFull.lat, 0.99), slices.Max(consFull.lat), kbOrMB(consFull.wire)),
		fmt.Sprintf("for information (the targets are the daemon's rows above). The full-answer clients of the first row for %s, against a `collector console` process of the same binary on the same database (its own /latest copy, refreshed as the daemon's is), while the daemon collects as above",
			as.window/2))
	rep.add(fmt.Sprintf("API /latest served by `collector console` (its own process), while collecting: 304 of ?ids= of %d items, p50 / p99 / max", apiQuietItems),
		fmt.Sprintf("%.2f / %.2f / %.2f ms (%d of %d answers 304)", quantile(consFiltered.lat, 0.5), quantile(consFiltered.lat, 0.99), slices.Max(consFiltered.lat), consFiltered.notModified, len(consFiltered.lat)),
		fmt.Sprintf("for information. The 304 clients of the daemon's row above, against the console process; %s", stallNote(consStalls)))
	rep.add(fmt.Sprintf("API /latest 304, every item (%s), collection stopped: p50 / p99 / max", count(n+apiQuietItems)),
		fmt.Sprintf("%.2f / %.2f / %.2f ms (%d of %d answers 304)", quantile(paused.lat, 0.5), quantile(paused.lat, 0.99), slices.Max(paused.lat), paused.notModified, len(paused.lat)),
		fmt.Sprintf("target ≤ 2 ms. The same daemon once `collector provider set MAINTENANCE` stopped its collections (a full answer changes with every collection, so it is 304 only when nothing was collected): %d clients, each a request every %s (at most %d a second in all), for %s, each sending If-None-Match with the ETag of the full answer; the API's background refresh still reads all %s items every 500 ms and finds nothing changed",
			apiPollers, apiPoll304Every, apiPollers*int(time.Second/apiPoll304Every), as.window/2, count(n+apiQuietItems)))
	return nil
}

// apiSeedQuiet pins the tracked items HOT_1M (so the daemon's tier plan keeps them there) and
// tracks the quiet DORMANT items with a market seen an hour ago; it returns the quiet ids.
func apiSeedQuiet(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET pinned_tier = $1`, string(tiers.Hot)); err != nil {
		return nil, fmt.Errorf("pin the items: %w", err)
	}
	var quiet []string
	for i := range apiQuietItems {
		quiet = append(quiet, fmt.Sprintf("bench-quiet-%03d", i))
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at, last_collected_at, last_snapshot_at,
		    seen_listing_count, seen_listing_quantity, seen_lowest_price, seen_median_price, seen_weighted_price,
		    seen_api_average_price, seen_truncated)
		SELECT id, 'quiet ' || id, $2, NULL, now() - interval '1 hour', now() - interval '1 hour', 12, 340, 1000, 1100, 1050.5, 1020, false
		FROM unnest($1::text[]) AS id`, quiet, string(tiers.Dormant)); err != nil {
		return nil, fmt.Errorf("track the quiet items: %w", err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE tracked_items`); err != nil {
		return nil, fmt.Errorf("vacuum: %w", err)
	}
	return quiet, nil
}

// apiFirstCollections waits until every one of n items was collected once and returns how
// long that took from now.
func apiFirstCollections(ctx context.Context, pool *pgxpool.Pool, n int, ran <-chan error) (time.Duration, error) {
	t0 := time.Now()
	for {
		var done int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM tracked_items WHERE last_collected_at IS NOT NULL AND next_collect_at IS NOT NULL`).Scan(&done); err != nil {
			return 0, err
		}
		if done >= n {
			return time.Since(t0), nil
		}
		if time.Since(t0) > 10*time.Minute {
			return 0, fmt.Errorf("after %s the daemon had collected %d of %d items once", time.Since(t0).Round(time.Second), done, n)
		}
		select {
		case err := <-ran:
			return 0, fmt.Errorf("the daemon stopped: %v", err)
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// apiPolled is what a polling loop saw.
type apiPolled struct {
	lat         []float64 // ms per request
	seen        []apiSeen // the prober's answers
	wire, raw   int64     // a full answer's gzip and JSON bytes
	notModified int
}

// apiSeen is when a full answer was received and the newest seen_at in it.
type apiSeen struct{ received, newest time.Time }

// apiPollFull has every poller GET the full /latest with gzip every apiPollEvery until window
// ends, and a prober GET it as plain JSON every apiPollEvery for its freshness. The pollers only
// time and read their answers: decompressing 7 MB 32 times a second would take the clients
// more CPU than the two cores the server shares with them have.
func apiPollFull(ctx context.Context, c *apiClient, window time.Duration, want int) (full, probe apiPolled, err error) {
	end := time.Now().Add(window)
	probed := make(chan error, 1)
	go func() {
		var buf bytes.Buffer
		probed <- apiPace(ctx, apiPollers/2, apiPollEvery, end, func() error {
			r, err := c.get(ctx, "/api/v1/latest", apiGet{identity: true, buf: &buf})
			if err != nil {
				return err
			}
			if r.status != http.StatusOK {
				return fmt.Errorf("GET /latest: %d", r.status)
			}
			newest, items := newestSeenAt(r.body)
			if items < want {
				return fmt.Errorf("GET /latest answered %d items, want %d", items, want)
			}
			probe.lat = append(probe.lat, ms(r.took))
			probe.seen = append(probe.seen, apiSeen{received: r.received, newest: newest})
			probe.raw = int64(len(r.body))
			return nil
		})
	}()
	full, err = apiPollAll(ctx, func(i int, p *apiPolled) error {
		var buf bytes.Buffer
		return apiPace(ctx, i, apiPollEvery, end, func() error {
			r, err := c.get(ctx, "/api/v1/latest", apiGet{buf: &buf})
			if err != nil {
				return err
			}
			if r.status != http.StatusOK || r.header.Get("Content-Encoding") != "gzip" {
				return fmt.Errorf("GET /latest: %d, Content-Encoding %q", r.status, r.header.Get("Content-Encoding"))
			}
			p.lat = append(p.lat, ms(r.took))
			p.wire = int64(len(r.body))
			return nil
		})
	})
	return full, probe, errors.Join(err, <-probed)
}

// apiPace calls poll every `every` until end, the i-th poller of apiPollers staggered by its
// share of the period, so the pollers' requests spread evenly; a late call does not make the
// next one early.
func apiPace(ctx context.Context, i int, every time.Duration, end time.Time, poll func() error) error {
	next := time.Now().Add(time.Duration(i) * every / apiPollers)
	for next.Before(end) {
		if err := sleepCtx(ctx, time.Until(next)); err != nil {
			return err
		}
		if next = next.Add(every); time.Now().After(next) {
			next = time.Now()
		}
		if err := poll(); err != nil {
			return err
		}
	}
	return nil
}

// apiPoll304 has every poller GET path every apiPoll304Every until window ends, each sending
// the ETag of the last answer it got.
func apiPoll304(ctx context.Context, c *apiClient, path string, window time.Duration) (apiPolled, error) {
	first, err := apiSettled(ctx, c, path)
	if err != nil {
		return apiPolled{}, err
	}
	end := time.Now().Add(window)
	return apiPollAll(ctx, func(i int, p *apiPolled) error {
		etag := first
		return apiPace(ctx, i, apiPoll304Every, end, func() error {
			r, err := c.get(ctx, path, apiGet{etag: etag})
			if err != nil {
				return err
			}
			switch r.status {
			case http.StatusNotModified:
				p.notModified++
			case http.StatusOK:
				etag = r.header.Get("ETag")
			default:
				return fmt.Errorf("GET %s: %d", path, r.status)
			}
			p.lat = append(p.lat, ms(r.took))
			return nil
		})
	})
}

// apiSettled returns path's ETag once a poll sending it is answered 304: after collection
// stops, the copy changes until the last write-back's refresh.
func apiSettled(ctx context.Context, c *apiClient, path string) (string, error) {
	for range 20 {
		r, err := c.get(ctx, path, apiGet{})
		if err != nil {
			return "", err
		}
		etag := r.header.Get("ETag")
		if err := sleepCtx(ctx, api.MaxAgeDefault+200*time.Millisecond); err != nil {
			return "", err
		}
		if r, err = c.get(ctx, path, apiGet{etag: etag}); err != nil {
			return "", err
		}
		if r.status == http.StatusNotModified {
			return etag, nil
		}
	}
	return "", fmt.Errorf("GET %s never answered 304 to its own ETag", path)
}

// apiPollAll runs poll on apiPollers goroutines and merges what they saw.
func apiPollAll(ctx context.Context, poll func(i int, p *apiPolled) error) (apiPolled, error) {
	res := make([]apiPolled, apiPollers)
	errs := make([]error, apiPollers)
	var wg sync.WaitGroup
	for i := range apiPollers {
		wg.Go(func() { errs[i] = poll(i, &res[i]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return apiPolled{}, err
	}
	var all apiPolled
	for _, p := range res {
		all.lat = append(all.lat, p.lat...)
		all.notModified += p.notModified
		all.wire, all.raw = max(all.wire, p.wire), max(all.raw, p.raw)
	}
	if len(all.lat) == 0 {
		return all, errors.New("no request completed")
	}
	return all, nil
}

// apiSample is the newest committed seen_at, read by a query begun at `at`.
type apiSample struct{ at, newest time.Time }

// apiSampleNewest reads the newest committed seen_at every apiNewestEvery until ctx ends.
func apiSampleNewest(ctx context.Context, pool *pgxpool.Pool) []apiSample {
	var out []apiSample
	t := time.NewTicker(apiNewestEvery)
	defer t.Stop()
	for {
		at := time.Now()
		var newest time.Time
		if err := pool.QueryRow(ctx, `SELECT max(last_collected_at) FROM tracked_items`).Scan(&newest); err == nil {
			out = append(out, apiSample{at, newest})
		}
		select {
		case <-ctx.Done():
			return out
		case <-t.C:
		}
	}
}

// apiFreshness returns, per answer, its age on the wall clock (received − its newest seen_at)
// and how long before its receipt the oldest collection missing from it had been committed:
// the last sample not yet seeing anything newer than the answer began before that commit, so
// receipt − that sample's start bounds it from above, within the sampling period. Answers
// not followed by a sample are left out of the second.
func apiFreshness(seen []apiSeen, samples []apiSample) (age, missed []float64) {
	for _, s := range seen {
		age = append(age, ms(s.received.Sub(s.newest)))
		if len(samples) == 0 || samples[len(samples)-1].at.Before(s.received) {
			continue
		}
		// Samples' newest only grows: the first newer than the answer's is the first commit it
		// lacks.
		i := sort.Search(len(samples), func(i int) bool { return samples[i].newest.After(s.newest) })
		switch {
		case i == len(samples):
			missed = append(missed, 0)
		case i > 0: // 0 when the sample not seeing it began after the receipt
			missed = append(missed, ms(max(0, s.received.Sub(samples[i-1].at))))
		}
	}
	return age, missed
}

// newestSeenAt scans a /latest body for its newest seen_at and counts its items. The API
// writes every time in one fixed-width UTC layout, so the newest is the greatest string.
func newestSeenAt(raw []byte) (time.Time, int) {
	key := []byte(`"seen_at":"`)
	var newest []byte
	for rest := raw; ; {
		i := bytes.Index(rest, key)
		if i < 0 {
			break
		}
		rest = rest[i+len(key):]
		if j := bytes.IndexByte(rest, '"'); j > 0 && bytes.Compare(rest[:j], newest) > 0 {
			newest = rest[:j]
		}
	}
	t, _ := time.Parse(time.RFC3339Nano, string(newest))
	return t, bytes.Count(raw, []byte(`"item_id":`))
}

// apiSeries seeds the history section's stored volume and times /timeseries of random items.
func apiSeries(ctx context.Context, e *env, as apiSize, rep *report) error {
	u, err := e.freshDB(ctx, apiSeriesDB, true)
	if err != nil {
		return err
	}
	defer e.dropDB(ctx, apiSeriesDB)
	pool, err := openPool(ctx, u, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	h := as.series
	t0 := time.Now()
	seed, err := seedHistory(ctx, pool, h, time.Now())
	if err != nil {
		return err
	}
	rep.note("api: seeded %s snapshot rows and %s candle rows for /timeseries in %s", approx(seed.rows), approx(seed.candles), time.Since(t0).Round(time.Second))
	a, err := api.New(pool, apiConfig(), zap.NewNop())
	if err != nil {
		return err
	}
	srv := httptest.NewServer(a.Handler())
	defer srv.Close()
	c := newAPIClient(srv.URL)
	stored := fmt.Sprintf("%s snapshot rows (%d items × %d a day over %d days and today) and %s hourly and daily candle rows (every item, every bucket), seeded as the history section seeds them",
		approx(seed.rows), h.items, h.perDay(), h.days, approx(seed.candles))
	for _, s := range []struct {
		label, interval, target, spanLabel string
		span                               time.Duration
	}{
		{"30 days of hourly candles", history.Hourly, "target p99 ≤ 10 ms", "30 days", 30 * 24 * time.Hour},
		{"one day of raw snapshots", "raw", "for information (history.ReadBetween's target for a day of raw snapshots is 20 ms)", "24 h", 24 * time.Hour},
	} {
		path := func(id string) string {
			return fmt.Sprintf("/api/v1/items/%s/timeseries?interval=%s&since=%s", id, s.interval, time.Now().Add(-s.span).UTC().Format(time.RFC3339))
		}
		// Every connection of the pool has prepared the statements before the timed reads.
		for _, id := range seed.items[:apiWarmReads] {
			if err := apiSeriesGet(ctx, c, path(id)); err != nil {
				return err
			}
		}
		// One client: what a request costs; then apiSeriesClients at once: how they queue on
		// two cores and on the API's MaxReadsDefault reads at a time.
		for _, clients := range []int{1, apiSeriesClients} {
			lat, rows, wire, err := apiSeriesReads(ctx, c, seed.items, as.reads, clients, path)
			if err != nil {
				return err
			}
			target, who := s.target, "one client"
			if clients > 1 {
				target, who = "for information", fmt.Sprintf("%d clients at once", clients)
			}
			rep.add(fmt.Sprintf("API /timeseries, %s, %s, p50 / p99", s.label, who),
				fmt.Sprintf("%.2f / %.2f ms (%.0f rows, %s gzip an answer)", quantile(lat, 0.5), quantile(lat, 0.99), rows, kbOrMB(wire)),
				fmt.Sprintf("%s. GET /api/v1/items/{id}/timeseries?interval=%s&since=now − %s with Accept-Encoding: gzip for %d random items, %s, after %d untimed; from sending the request to the last byte read; the API (api.New, rate limit off, at most %d database reads at once) over httptest, an 8-connection pool; over %s",
					target, s.interval, s.spanLabel, as.reads, who, apiWarmReads, api.MaxReadsDefault, stored))
		}
	}
	return nil
}

// apiSeriesReads GETs path(item) for n random items on clients goroutines; it
// returns the latencies, the rows of an answer and its gzip bytes (averages). Rows are counted
// in every tenth answer: decompressing them all would take the clients a good share of the
// cores the server runs on.
func apiSeriesReads(ctx context.Context, c *apiClient, items []string, n, clients int, path func(string) string) ([]float64, float64, int64, error) {
	work := make(chan string, n)
	rnd := rand.New(rand.NewPCG(apiSeed, 1))
	for range n {
		work <- items[rnd.IntN(len(items))]
	}
	close(work)
	var mu sync.Mutex
	var lat []float64
	var rows, counted, wire int64
	var wg sync.WaitGroup
	errs := make([]error, clients)
	for i := range clients {
		wg.Go(func() {
			var buf bytes.Buffer
			for id := range work {
				r, err := c.get(ctx, path(id), apiGet{buf: &buf})
				if err == nil && r.status != http.StatusOK {
					err = fmt.Errorf("GET %s: %d", path(id), r.status)
				}
				if err != nil {
					errs[i] = err
					return
				}
				mu.Lock()
				lat = append(lat, ms(r.took))
				wire += int64(len(r.body))
				check := len(lat)%10 == 0
				mu.Unlock()
				if check {
					got, err := apiSeriesRows(r, path(id))
					if err != nil {
						errs[i] = err
						return
					}
					mu.Lock()
					rows, counted = rows+int64(got), counted+1
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, 0, 0, err
	}
	return lat, float64(rows) / float64(max(counted, 1)), wire / int64(n), nil
}

// apiSeriesGet GETs one series and checks that it holds rows.
func apiSeriesGet(ctx context.Context, c *apiClient, path string) error {
	r, err := c.get(ctx, path, apiGet{})
	if err != nil {
		return err
	}
	_, err = apiSeriesRows(r, path)
	return err
}

// apiSeriesRows counts an answer's rows (candles or points) without decoding it.
func apiSeriesRows(r apiAnswer, path string) (int, error) {
	raw, err := r.json()
	if err != nil {
		return 0, err
	}
	if r.status != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %d: %.200s", path, r.status, raw)
	}
	n := bytes.Count(raw, []byte(`{"bucket":`)) + bytes.Count(raw, []byte(`{"collected_at":`))
	if n == 0 {
		return 0, fmt.Errorf("GET %s: an empty series", path)
	}
	return n, nil
}

// apiClient is a poller's HTTP client: it asks for gzip itself so that it can time the
// compressed body as the wire carries it.
type apiClient struct {
	base string
	hc   *http.Client
}

func newAPIClient(base string) *apiClient {
	return &apiClient{base: base, hc: &http.Client{Transport: &http.Transport{DisableCompression: true, MaxIdleConnsPerHost: 16}}}
}

// apiAnswer is one answer as received.
type apiAnswer struct {
	status   int
	header   http.Header
	body     []byte // as sent: gzip when Content-Encoding says so; apiGet.buf's bytes when given
	took     time.Duration
	received time.Time
}

// apiGet says how one request is made: the ETag to send back, whether to ask for the JSON as
// is instead of gzip, and a buffer to read the body into (reused by a poller: a fresh
// megabytes-long slice per answer costs the clients more than the server spends).
type apiGet struct {
	etag     string
	identity bool
	buf      *bytes.Buffer
}

func (c *apiClient) get(ctx context.Context, path string, o apiGet) (apiAnswer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+path, nil)
	if err != nil {
		return apiAnswer{}, err
	}
	if !o.identity {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	if o.etag != "" {
		req.Header.Set("If-None-Match", o.etag)
	}
	buf := o.buf
	if buf == nil {
		buf = new(bytes.Buffer)
	}
	buf.Reset()
	t := time.Now()
	res, err := c.hc.Do(req)
	if err != nil {
		return apiAnswer{}, err
	}
	defer res.Body.Close()
	if res.ContentLength > 0 {
		buf.Grow(int(res.ContentLength))
	}
	if _, err := buf.ReadFrom(res.Body); err != nil {
		return apiAnswer{}, fmt.Errorf("GET %s: %w", path, err)
	}
	now := time.Now()
	return apiAnswer{status: res.StatusCode, header: res.Header, body: buf.Bytes(), took: now.Sub(t), received: now}, nil
}

// json is the answer's body decompressed.
func (r apiAnswer) json() ([]byte, error) {
	if r.header.Get("Content-Encoding") != "gzip" {
		return r.body, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(r.body))
	if err != nil {
		return nil, fmt.Errorf("gunzip: %w", err)
	}
	return io.ReadAll(zr)
}

// apiConsole times the same polls against the API served by its own `collector console`
// process, as docs/api.md suggests when polls must not wait behind collection: the
// collector's passes keep its cores busy in bursts, and a request waits for one. The process
// runs only for its windows, so its refreshes do not load the daemon's.
func apiConsole(ctx, lctx context.Context, bin, u, ids string, window time.Duration, want int) (full, filtered apiPolled, stalls []float64, err error) {
	cons, err := startConsole(lctx, bin, u)
	if err != nil {
		return full, filtered, nil, err
	}
	defer cons.stop()
	cc := newAPIClient("http://" + cons.addr)
	// Warm as the daemon's was: its first read is of every row, and polled, its background
	// refresh keeps the copy current.
	for range 12 {
		if _, err := cc.get(ctx, "/api/v1/latest", apiGet{}); err != nil {
			return full, filtered, nil, err
		}
		if err := sleepCtx(ctx, apiPollEvery); err != nil {
			return full, filtered, nil, err
		}
	}
	if full, _, err = apiPollFull(ctx, cc, window, want); err != nil {
		return full, filtered, nil, err
	}
	stop := stallMeter()
	filtered, err = apiPoll304(ctx, cc, ids, window)
	return full, filtered, stop(), err
}

// consoleProc is `collector console` serving the read API from its own process.
type consoleProc struct {
	cmd  *exec.Cmd
	addr string
	out  bytes.Buffer
}

// startConsole starts `collector console` on dbURL and returns once it answers.
func startConsole(ctx context.Context, bin, dbURL string) (*consoleProc, error) {
	addr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	p := &consoleProc{cmd: exec.CommandContext(ctx, bin, "console", "--addr", addr), addr: addr}
	p.cmd.Env = append(os.Environ(), "COLLECTOR_DATABASE_URL="+dbURL, "COLLECTOR_API_RATE=0", "COLLECTOR_LOG_LEVEL=warn")
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start collector console: %w", err)
	}
	c := newAPIClient("http://" + addr)
	for range 100 {
		if r, err := c.get(ctx, "/api/v1/openapi.json", apiGet{}); err == nil && r.status == http.StatusOK {
			return p, nil
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			break
		}
	}
	p.stop()
	return nil, fmt.Errorf("collector console did not answer on %s within 10 s\n%s", addr, p.out.Bytes())
}

func (p *consoleProc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Wait()
}

// stallMeter has a thread of this process sleep 1 ms at a time until the returned function is
// called, which returns by how much each sleep overslept (ms): how long anything on this
// machine may wait for a core over that window, an answer included.
func stallMeter() (stop func() []float64) {
	done, out := make(chan struct{}), make(chan []float64, 1)
	go func() {
		runtime.LockOSThread()
		var over []float64
		t := time.Now()
		for {
			select {
			case <-done:
				out <- over
				return
			default:
			}
			time.Sleep(time.Millisecond)
			now := time.Now()
			over = append(over, ms(now.Sub(t)-time.Millisecond))
			t = now
		}
	}()
	return func() []float64 { close(done); return <-out }
}

// stallNote says what the stall meter saw.
func stallNote(over []float64) string {
	if len(over) == 0 {
		return "no stall samples"
	}
	return fmt.Sprintf("over the same window a thread of the bench process sleeping 1 ms at a time overslept p99 %.2f / max %.1f ms (%d sleeps; the machine's own waits, which no answer can beat)",
		quantile(over, 0.99), slices.Max(over), len(over))
}

// freeAddr is a loopback address nothing listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}
