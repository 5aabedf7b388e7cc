package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"github.com/jackc/pgx/v5/pgxpool"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
)

// Keys of the process benchmarks: not the simulator's defaults, so a run proves the binary
// really sent what it was configured with.
const (
	procMarketKey = "bench-market-key"
	procItemKey   = "bench-item-key"
	fidelityRate  = 100 // req/s for the market key, cluster-wide
	fidelityItems = 3_000
	fidelityProcs = 3
	rssRate       = 500 // req/s for the daemon RSS run: the product's default
)

// daemonProc is one `collector run` process; its stderr is kept for the error message.
type daemonProc struct {
	cmd    *exec.Cmd
	stderr bytes.Buffer
	hwm    func() int64 // peak resident set in KiB (watchHWM)
}

func startDaemon(ctx context.Context, bin, dbURL, simBase string, rate float64, env ...string) (*daemonProc, error) {
	p := &daemonProc{cmd: exec.CommandContext(ctx, bin, "run")}
	p.cmd.Env = append(os.Environ(), "COLLECTOR_DATABASE_URL="+dbURL, "NEOPLE_API_BASE_URL="+simBase,
		"NEOPLE_MARKET_API_KEY="+procMarketKey, "NEOPLE_ITEM_API_KEY="+procItemKey,
		fmt.Sprintf("COLLECTOR_PROVIDER_MARKET_RATE=%g", rate),
		"COLLECTOR_DAEMON_HTTP_ADDR=127.0.0.1:0", "COLLECTOR_COLLECT_CONCURRENCY=16",
		"COLLECTOR_DAEMON_SHUTDOWN_GRACE=5s", "COLLECTOR_LOG_LEVEL=warn")
	p.cmd.Env = append(p.cmd.Env, env...)
	p.cmd.Stderr = &p.stderr
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start collector run: %w", err)
	}
	p.hwm = watchHWM(p.cmd.Process.Pid)
	return p, nil
}

// stop sends SIGTERM (the production shutdown path) and waits; a non-zero exit is an error.
func (p *daemonProc) stop() error {
	p.hwm() // the peak before shutdown; the process is gone after Wait
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	if err := p.cmd.Wait(); err != nil {
		return fmt.Errorf("collector run (pid %d): %w\n%s", p.cmd.Process.Pid, err, p.stderr.Bytes())
	}
	return nil
}

func (p *daemonProc) maxRSSKiB() int64 { return p.hwm() }

// watchHWM polls the process's VmHWM (its own peak resident set) until the returned function is
// called. ru_maxrss from wait4 is no good here: Go starts children with CLONE_VM, so a child's
// ru_maxrss includes the parent's resident set at exec time, i.e. this harness's.
func watchHWM(pid int) func() int64 {
	var mu sync.Mutex
	var peak int64
	stop := make(chan struct{})
	done := make(chan struct{})
	read := func() {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			return
		}
		for _, line := range strings.Split(string(b), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmHWM:" {
				if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					mu.Lock()
					peak = max(peak, v)
					mu.Unlock()
				}
			}
		}
	}
	go func() {
		defer close(done)
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			read()
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() int64 {
		once.Do(func() { close(stop); <-done })
		mu.Lock()
		defer mu.Unlock()
		return peak
	}
}

// keyStats reads the simulator's counters of one key.
func (s *simProcess) keyStats(ctx context.Context, key string) (neoplesim.KeyStats, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/_sim/stats", nil)
	if err != nil {
		return neoplesim.KeyStats{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return neoplesim.KeyStats{}, err
	}
	defer resp.Body.Close()
	var st neoplesim.Stats
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return neoplesim.KeyStats{}, fmt.Errorf("simulator stats: %w", err)
	}
	return st.Keys[neoplesim.KeyLabel(key)], nil
}

// catalogIDs returns the simulator's item ids.
func (s *simProcess) catalogIDs(ctx context.Context) ([]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+"/_sim/catalog", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var cat struct {
		Rows []struct {
			ItemID string `json:"itemId"`
		} `json:"rows"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&cat); err != nil {
		return nil, fmt.Errorf("simulator catalog: %w", err)
	}
	ids := make([]string, len(cat.Rows))
	for i, r := range cat.Rows {
		ids[i] = r.ItemID
	}
	return ids, nil
}

// migrateUp applies the schema with the binary itself, as an operator would.
func migrateUp(ctx context.Context, bin, dbURL string) error {
	cmd := exec.CommandContext(ctx, bin, "migrate", "up")
	cmd.Env = append(os.Environ(), "COLLECTOR_DATABASE_URL="+dbURL, "COLLECTOR_LOG_LEVEL=warn")
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("collector migrate up: %w\n%s", err, out)
	}
	return nil
}

// benchDaemonProcs measures what only separate `collector run` processes show: budget fidelity
// across instances and the daemon's peak RSS over a large tracked set.
func benchDaemonProcs(ctx context.Context, e *env, sz sizes, rep *report) error {
	window, rssN := 20*time.Second, envInt("BENCH_DAEMON_RSS_ITEMS", 1_000_000)
	if sz.daemonWindow == 0 {
		window, rssN = 10*time.Second, 100_000
	}
	bin, err := buildCollector(ctx)
	if err != nil {
		return err
	}
	if err := budgetFidelity(ctx, e, bin, window, rep); err != nil {
		return fmt.Errorf("budget fidelity: %w", err)
	}
	if err := daemonRSS(ctx, e, bin, rssN, window, rep); err != nil {
		return fmt.Errorf("daemon RSS at %d items: %w", rssN, err)
	}
	return nil
}

// hotCatalog migrates database u, starts a simulator of n items with the process keys (and
// simArgs) and tracks every item as HOT_1M, due now. The caller stops the simulator.
func hotCatalog(ctx context.Context, bin, u string, n int, simArgs ...string) (*simProcess, []string, error) {
	if err := migrateUp(ctx, bin, u); err != nil {
		return nil, nil, err
	}
	sim, err := startSim(ctx, bin, n, append([]string{"--market-key", procMarketKey, "--item-key", procItemKey}, simArgs...)...)
	if err != nil {
		return nil, nil, err
	}
	ids, err := sim.catalogIDs(ctx)
	if err == nil {
		var pool *pgxpool.Pool
		if pool, err = openPool(ctx, u, 2); err == nil {
			_, err = pool.Exec(ctx, `
				INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
				SELECT id, 'item ' || id, 'HOT_1M', now() - interval '1 second' FROM unnest($1::text[]) AS id`, ids)
			pool.Close()
		}
	}
	if err != nil {
		sim.stop()
		return nil, nil, fmt.Errorf("track %d HOT items: %w", n, err)
	}
	return sim, ids, nil
}

func budgetFidelity(ctx context.Context, e *env, bin string, window time.Duration, rep *report) error {
	const db = "bench_fidelity"
	u, err := e.freshDB(ctx, db, false)
	if err != nil {
		return err
	}
	defer e.dropDB(ctx, db)
	sim, ids, err := hotCatalog(ctx, bin, u, fidelityItems)
	if err != nil {
		return err
	}
	defer sim.stop()

	procs := make([]*daemonProc, 0, fidelityProcs)
	defer func() {
		for _, p := range procs {
			_ = p.stop()
		}
	}()
	for range fidelityProcs {
		// Sharing, not learning, is measured here: the simulator sets no limit, and a slow
		// start's ramp would only shorten the window the budget is full in.
		p, err := startDaemon(ctx, bin, u, sim.base, fidelityRate, "COLLECTOR_DAEMON_BUDGET_SLOW_START=false")
		if err != nil {
			return err
		}
		procs = append(procs, p)
	}
	// Sample the served total every 250 ms: the first non-zero sample starts the clock, the
	// steady window starts 2 s later (the budget's join delay, 2 × heartbeat) and ends at SIGTERM.
	var first, steadyAt time.Time
	var steadyTotal int64
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	deadline := time.Now().Add(window + 30*time.Second)
	for first.IsZero() || time.Since(first) < window {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no request reached the simulator within %s", window+30*time.Second)
		}
		ks, err := sim.keyStats(ctx, procMarketKey)
		if err != nil {
			return err
		}
		switch {
		case first.IsZero() && ks.Total > 0:
			first = time.Now()
		case !first.IsZero() && steadyAt.IsZero() && time.Since(first) >= 2*time.Second:
			steadyAt, steadyTotal = time.Now(), ks.Total
		}
	}
	end, err := sim.keyStats(ctx, procMarketKey)
	if err != nil {
		return err
	}
	endAt := time.Now()
	var stopErr error
	for _, p := range procs {
		if err := p.stop(); err != nil && stopErr == nil {
			stopErr = err
		}
	}
	procs = nil
	if stopErr != nil {
		return stopErr
	}
	after, err := sim.keyStats(ctx, procMarketKey)
	if err != nil {
		return err
	}
	item, err := sim.keyStats(ctx, procItemKey)
	if err != nil {
		return err
	}
	if after.Total >= int64(2*len(ids)) {
		rep.note("budget fidelity: all %d items were collected before the window ended, so the work did not exceed the budget throughout", len(ids))
	}
	steady := endAt.Sub(steadyAt).Seconds()
	util := float64(end.Total-steadyTotal) / (steady * fidelityRate)
	how := fmt.Sprintf("%d `collector run` processes of the built binary started at once (COLLECTOR_PROVIDER_MARKET_RATE=%d, budget sharing on with its default 3%% headroom, concurrency 16 each), one fresh database (`collector migrate up`) with %s HOT_1M items all due (2 market requests each, so the work exceeds the budget for the whole run), `collector-dev sim` as a separate process; SIGTERM after %s of traffic",
		fidelityProcs, fidelityRate, count(len(ids)), window)
	rep.add(fmt.Sprintf("Budget fidelity, %d processes sharing one key: worst second / budget", fidelityProcs),
		fmt.Sprintf("%d / %d req/s (%.2f×)", after.MaxPerSecond, fidelityRate, float64(after.MaxPerSecond)/fidelityRate),
		how+"; worst second = the simulator's max_per_second for the key (most requests received in one wall-clock second) over the whole run, start-up and shutdown included")
	rep.add(fmt.Sprintf("Budget utilisation, %d processes sharing one key", fidelityProcs),
		fmt.Sprintf("%.0f%% of %d req/s", 100*util, fidelityRate),
		fmt.Sprintf("same run; requests the simulator served the key from 2 s after the first request (the join delay) to SIGTERM (%d in %.1f s) ÷ (that window × %d); %d market requests in all, %d on the item key",
			end.Total-steadyTotal, steady, fidelityRate, after.Total, item.Total))
	return nil
}

func daemonRSS(ctx context.Context, e *env, bin string, n int, window time.Duration, rep *report) error {
	const db = "bench_daemon_rss"
	u, err := e.freshDB(ctx, db, false)
	if err != nil {
		return err
	}
	defer e.dropDB(ctx, db)
	if err := migrateUp(ctx, bin, u); err != nil {
		return err
	}
	pool, err := openPool(ctx, u, 2)
	if err != nil {
		return err
	}
	t0 := time.Now()
	// Due times spread evenly over the next 10 minutes: the daemon holds the whole tracked set
	// in the database and a trickle in memory, which is what its RSS should show.
	_, err = pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		SELECT md5(i::text), 'item ' || i, 'COLD_10M', now() + (i % 600000) * interval '1 millisecond'
		FROM generate_series(1, $1) AS i`, n)
	if err == nil {
		_, err = pool.Exec(ctx, `VACUUM ANALYZE tracked_items`)
	}
	pool.Close()
	if err != nil {
		return fmt.Errorf("seed %d COLD items: %w", n, err)
	}
	seeded := time.Since(t0)
	sim, err := startSim(ctx, bin, 1_000, "--market-key", procMarketKey, "--item-key", procItemKey)
	if err != nil {
		return err
	}
	defer sim.stop()
	p, err := startDaemon(ctx, bin, u, sim.base, rssRate)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		_ = p.stop()
		return ctx.Err()
	case <-time.After(window): // the measurement window itself, not synchronisation
	}
	if err := p.stop(); err != nil {
		return err
	}
	ks, err := sim.keyStats(ctx, procMarketKey)
	if err != nil {
		return err
	}
	load := "a trickle within the budget"
	if n/600 > rssRate/2 {
		load = fmt.Sprintf("more than the %d items/s the budget allows, so work is always waiting and this is the RSS of a daemon with a backlog", rssRate/2)
	}
	rep.add(fmt.Sprintf("Daemon peak RSS, %s tracked items", count(n)), fmt.Sprintf("%.1f MiB", float64(p.maxRSSKiB())/1024),
		fmt.Sprintf("one `collector run` process of the built binary (COLLECTOR_PROVIDER_MARKET_RATE=%d, concurrency 16) for %s, then SIGTERM; %s COLD_10M items (seeded in %s) due evenly over the next 10 minutes, so ~%d/s come due (%s); `collector-dev sim --items 1000` as a separate process (most ids unknown to it: empty listings); it served %d market requests (2 per item); peak VmHWM from /proc/PID/status polled every 50 ms until SIGTERM",
			rssRate, window, count(n), seeded.Round(time.Second), n/600, load, ks.Total))
	return nil
}
