package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// buildCollector builds the product binary once per run, and beside it collector-dev
// (devBinary), whose `sim` the benchmarks run: the product binary does not link the simulator.
func buildCollector(ctx context.Context) (string, error) {
	bin := filepath.Join(os.TempDir(), "duecollector-bench-collector")
	for pkg, out := range map[string]string{"./cmd/collector": bin, "./cmd/collector-dev": devBinary(bin)} {
		if msg, err := exec.CommandContext(ctx, "go", "build", "-o", out, pkg).CombinedOutput(); err != nil {
			return "", fmt.Errorf("build %s: %v\n%s", pkg, err, msg)
		}
	}
	return bin, nil
}

// devBinary is where buildCollector put collector-dev.
func devBinary(bin string) string { return bin + "-dev" }

// simProcess is `collector-dev sim` as a separate process, so its memory is not the collector's.
type simProcess struct {
	cmd  *exec.Cmd
	base string
}

func startSim(ctx context.Context, bin string, items int, extra ...string) (*simProcess, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	args := append([]string{"sim", "--addr", addr, "--items", strconv.Itoa(items), "--seed", "1"}, extra...)
	cmd := exec.CommandContext(ctx, devBinary(bin), args...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &simProcess{cmd: cmd, base: "http://" + addr}
	deadline := time.Now().Add(time.Minute)
	for {
		resp, err := http.Get(s.base + "/_sim/stats")
		if err == nil {
			resp.Body.Close()
			return s, nil
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, fmt.Errorf("simulator at %s did not answer within a minute: %w", addr, err)
		}
		time.Sleep(100 * time.Millisecond) // polling a process we just started; no other signal exists
	}
}

func (s *simProcess) stop() {
	_ = s.cmd.Process.Signal(os.Interrupt)
	_ = s.cmd.Wait()
}

// trackCatalog tracks every simulator item as HOT_1M, all due a minute ago: ahead of any
// filler rows (less urgent tiers, due a second ago) in a claim's order (the most urgent tier
// first, then the longest due), so a collect-due pass claims the items the simulator knows
// first.
func (s *simProcess) trackCatalog(ctx context.Context, pool *pgxpool.Pool) (int, error) {
	resp, err := http.Get(s.base + "/_sim/catalog")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var cat struct {
		Rows []struct {
			ItemID   string `json:"itemId"`
			ItemName string `json:"itemName"`
		} `json:"rows"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&cat); err != nil {
		return 0, fmt.Errorf("simulator catalog: %w", err)
	}
	ids, names := make([]string, len(cat.Rows)), make([]string, len(cat.Rows))
	for i, r := range cat.Rows {
		ids[i], names[i] = r.ItemID, r.ItemName
	}
	tag, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		SELECT id, name, 'HOT_1M', now() - interval '1 minute'
		FROM unnest($1::text[], $2::text[]) AS u(id, name)
		ON CONFLICT DO NOTHING`, ids, names)
	if err != nil {
		return 0, fmt.Errorf("track simulator catalog: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// trackFiller tracks ids the simulator does not know (md5 of a counter, like seedDue) until
// the table holds n items, all due a second ago, in the tiers after HOT_1M.
func trackFiller(ctx context.Context, pool *pgxpool.Pool, n int) (int, error) {
	tag, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		SELECT md5(i::text), 'item ' || i, (ARRAY['ACTIVE_3M','WARM_5M','COLD_10M'])[1 + i % 3], now() - interval '1 second'
		FROM generate_series(1, $1 - (SELECT count(*) FROM tracked_items)) AS i
		ON CONFLICT DO NOTHING`, n)
	if err != nil {
		return 0, fmt.Errorf("track %d filler items: %w", n, err)
	}
	return int(tag.RowsAffected()), nil
}

// collectorEnv points the binary at a database and the simulator, with the client's own
// budget lifted so the limiter does not set the pace.
func collectorEnv(dbURL, simBase string) []string {
	return append(os.Environ(), "COLLECTOR_DATABASE_URL="+dbURL, "NEOPLE_API_BASE_URL="+simBase,
		"NEOPLE_MARKET_API_KEY=sim-market-key", "NEOPLE_ITEM_API_KEY=sim-item-key",
		"COLLECTOR_PROVIDER_MARKET_RATE=100000", "COLLECTOR_PROVIDER_MARKET_BURST=100000",
		"COLLECTOR_PROVIDER_MARKET_PER_MINUTE=100000000", "COLLECTOR_LOG_LEVEL=warn")
}

const (
	rssBatch      = 1000
	rssMaxBatches = 10
)

var collectedRE = regexp.MustCompile(`collected=(\d+)`)

func benchRSS(ctx context.Context, e *env, sz sizes, rep *report) error {
	bin, err := buildCollector(ctx)
	if err != nil {
		return err
	}
	if err := rssCollectDue(ctx, e, bin, sz.rss, rep); err != nil {
		return fmt.Errorf("collect-due at %d items: %w", sz.rss.tracked, err)
	}
	return nil
}

// rssCollectDue: the table holds sz.tracked items, all due; the simulator (a separate
// process) knows only the sz.collected the pass is capped at, and those are due first. A
// simulator catalog of 1M items would cost the harness ~2 GB and a 300 MB catalog download
// for items the capped pass never reaches.
func rssCollectDue(ctx context.Context, e *env, bin string, sz rssSize, rep *report) error {
	const db = "bench_rss"
	u, err := e.freshDB(ctx, db, true)
	if err != nil {
		return err
	}
	defer e.dropDB(ctx, db)
	sim, err := startSim(ctx, bin, sz.collected)
	if err != nil {
		return err
	}
	defer sim.stop()
	pool, err := openPool(ctx, u, 4)
	if err != nil {
		return err
	}
	t0 := time.Now()
	known, err := sim.trackCatalog(ctx, pool)
	var filler int
	if err == nil {
		filler, err = trackFiller(ctx, pool, sz.tracked)
	}
	if err == nil {
		_, err = pool.Exec(ctx, `VACUUM ANALYZE tracked_items`)
	}
	pool.Close()
	if err != nil {
		return err
	}
	seeded := time.Since(t0)
	tracked := known + filler
	// Memory is bounded by the batch, not by how much is due; capping the pass keeps the run
	// inside the time budget (every item also writes ~100 sales rows on this path).
	batches := max(1, known/rssBatch)
	cmd := exec.CommandContext(ctx, bin, "collect-due", "--batch-size", strconv.Itoa(rssBatch), "--concurrency", "32",
		"--max-batches", strconv.Itoa(batches))
	cmd.Env = collectorEnv(u, sim.base)
	cmd.Stderr = os.Stderr
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	t1 := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("collect-due: %w", err)
	}
	hwm := watchHWM(cmd.Process.Pid)
	err = cmd.Wait()
	peakKiB := hwm()
	took := time.Since(t1)
	out := stdout.Bytes()
	if err != nil {
		return fmt.Errorf("collect-due: %w\n%s", err, out)
	}
	m := collectedRE.FindSubmatch(out)
	var collected int
	if m != nil {
		collected, _ = strconv.Atoi(string(m[1]))
	}
	if want := min(known, batches*rssBatch); collected < want {
		return fmt.Errorf("collect-due collected %d, want %d: %s", collected, want, out)
	}
	// The figure is about a pass over real listings and sales: it must not have reached the
	// filler, whose empty listings are cheaper.
	if pool, err = openPool(ctx, u, 1); err != nil {
		return err
	}
	var fillerHit int
	err = pool.QueryRow(ctx, `SELECT count(*) FROM tracked_items WHERE last_collected_at IS NOT NULL AND item_name LIKE 'item %'`).Scan(&fillerHit)
	pool.Close()
	if err != nil {
		return err
	}
	if fillerHit > 0 {
		return fmt.Errorf("collect-due collected %d filler items the simulator does not know", fillerHit)
	}
	rep.note("collect-due at %s tracked items said: %s", count(tracked), bytes.TrimSpace(out))
	rep.add(fmt.Sprintf("collect-due peak RSS, %s tracked items all due", count(tracked)), fmt.Sprintf("%.1f MiB", float64(peakKiB)/1024),
		fmt.Sprintf("the built binary (`collector collect-due --batch-size %d --concurrency 32 --max-batches %d`) over a table of %s tracked items, all due (seeded in %s): the %s items of the simulator's catalog claimed first (HOT_1M, due longest), then %s ids it does not know (other tiers); the simulator is a separate process (`collector-dev sim --items %d`, ~100 sales per item) over HTTP, sized to the capped pass (a 1M-item simulator holds ~0.5 GB and serves a 300 MB catalog for items the pass never reaches); no filler item was collected (checked); peak VmHWM from /proc/PID/status polled every 50 ms; the pass collected %d items in %s (%.0f items/s end to end)",
			rssBatch, batches, count(tracked), seeded.Round(time.Second), count(known), count(filler), sz.collected, collected, took.Round(time.Second), float64(collected)/took.Seconds()))
	return nil
}
