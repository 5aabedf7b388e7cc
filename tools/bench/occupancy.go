package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
)

const (
	occItems       = 50
	occConcurrency = 50
	occPool        = 8 // database.max_conns default
	occAppName     = "duecollector"
	pgbenchArgs    = "-c 4 -j 2 -R 100" // 4 clients, 100 TPC-B-like transactions/s: a steady neighbour, not a saturating one
)

// holdTracker records how long each pool connection is checked out, through the pool's hooks.
type holdTracker struct {
	mu        sync.Mutex
	since     map[*pgx.Conn]time.Time
	held, max int
	total     time.Duration
}

func (h *holdTracker) acquired(c *pgx.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.since[c] = time.Now()
	h.held++
	h.max = max(h.max, h.held)
}

func (h *holdTracker) released(c *pgx.Conn) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if t, ok := h.since[c]; ok {
		h.total += time.Since(t)
		delete(h.since, c)
		h.held--
	}
}

func benchOccupancy(ctx context.Context, e *env, sz sizes, rep *report) error {
	pgbench, err := exec.LookPath("pgbench")
	if err != nil {
		rep.note("connection occupancy: pgbench is not installed (apt package postgresql-contrib / postgresql-client); pgbench rows skipped")
	}
	const pgbenchDB = "bench_pgbench"
	var pgbenchURL string
	if pgbench != "" {
		if pgbenchURL, err = e.freshDB(ctx, pgbenchDB, false); err != nil {
			return err
		}
		defer e.dropDB(ctx, pgbenchDB)
		if out, err := exec.CommandContext(ctx, pgbench, "-i", "-q", "-s", "10", pgbenchURL).CombinedOutput(); err != nil {
			return fmt.Errorf("pgbench -i: %v\n%s", err, out)
		}
	}
	logDir, err := os.MkdirTemp("", "bench-pgbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(logDir)
	runPgbench := func(prefix string) (p50, p99 float64, err error) {
		args := append(strings.Fields(pgbenchArgs), "-T", strconv.Itoa(sz.pgbenchSecs), "-n", "-l",
			"--log-prefix", filepath.Join(logDir, prefix), pgbenchURL)
		cmd := exec.CommandContext(ctx, pgbench, args...)
		cmd.Dir = logDir
		if out, err := cmd.CombinedOutput(); err != nil {
			return 0, 0, fmt.Errorf("pgbench: %v\n%s", err, out)
		}
		return pgbenchLatency(filepath.Join(logDir, prefix))
	}

	var baseP50, baseP99 float64
	if pgbench != "" {
		if baseP50, baseP99, err = runPgbench("alone"); err != nil {
			return err
		}
	}

	const db = "bench_occupancy"
	u, err := e.freshDB(ctx, db, true)
	if err != nil {
		return err
	}
	defer e.dropDB(ctx, db)
	pp, err := openPool(ctx, u, 2)
	if err != nil {
		return err
	}
	err = createPartitions(ctx, pp)
	pp.Close()
	if err != nil {
		return err
	}
	sim := neoplesim.New(neoplesim.Options{Items: occItems, Seed: 1, Latency: sz.slowLatency})
	srv := httptest.NewServer(sim)
	defer srv.Close()
	client, err := provider.NewClient(provider.ClientConfig{Workload: provider.WorkloadMarket, BaseURL: srv.URL,
		Key: neoplesim.DefaultMarketKey, Timeout: sz.slowLatency + 10*time.Second})
	if err != nil {
		return err
	}
	hold := &holdTracker{since: map[*pgx.Conn]time.Time{}}
	pc, err := pgxpool.ParseConfig(u)
	if err != nil {
		return err
	}
	pc.MaxConns = occPool
	pc.ConnConfig.RuntimeParams["application_name"] = occAppName
	pc.PrepareConn = func(_ context.Context, c *pgx.Conn) (bool, error) { hold.acquired(c); return true, nil }
	pc.AfterRelease = func(c *pgx.Conn) bool { hold.released(c); return true }
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return err
	}
	defer pool.Close()
	var ids, names []string
	for _, it := range sim.Catalog() {
		ids, names = append(ids, it.ItemID), append(names, it.ItemName)
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		SELECT id, name, 'HOT_1M', now() - interval '1 second' FROM unnest($1::text[], $2::text[]) AS u(id, name)`, ids, names); err != nil {
		return fmt.Errorf("seed: %w", err)
	}
	dc := dispatcher.FromConfig(config.Default())
	dc.Concurrency, dc.PackSize = occConcurrency, 1 // every item alone
	d, err := newDispatcher(pool, client, dc)
	if err != nil {
		return err
	}
	// Only the pass is measured: the seed's connection time is not the collector's.
	hold.mu.Lock()
	hold.total, hold.max = 0, hold.held
	hold.mu.Unlock()

	sampler, err := pgx.Connect(ctx, e.adminURL)
	if err != nil {
		return err
	}
	defer sampler.Close(context.Background())
	stopSampling := make(chan struct{})
	var peakOpen, peakBusy int
	var busyTime time.Duration
	sampled := make(chan error, 1)
	go func() {
		const every = 50 * time.Millisecond
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				sampled <- nil
				return
			case <-tick.C:
			}
			var open, busy int
			if err := sampler.QueryRow(ctx, `
				SELECT count(*), count(*) FILTER (WHERE state <> 'idle') FROM pg_stat_activity
				WHERE datname = $1 AND application_name = $2`, db, occAppName).Scan(&open, &busy); err != nil {
				sampled <- err
				return
			}
			peakOpen, peakBusy = max(peakOpen, open), max(peakBusy, busy)
			busyTime += time.Duration(busy) * every
		}
	}()

	type pgbenchResult struct {
		p50, p99 float64
		err      error
	}
	withCollector := make(chan pgbenchResult, 1)
	if pgbench != "" {
		go func() {
			p50, p99, err := runPgbench("with-collector")
			withCollector <- pgbenchResult{p50, p99, err}
		}()
	}
	t0 := time.Now()
	sum, err := d.RunOnce(ctx)
	took := time.Since(t0)
	close(stopSampling)
	if serr := <-sampled; serr != nil && err == nil {
		err = fmt.Errorf("sample pg_stat_activity: %w", serr)
	}
	if err != nil {
		return err
	}
	if sum.Collected != occItems {
		return fmt.Errorf("collected %d of %d: %s", sum.Collected, occItems, sum)
	}
	hold.mu.Lock()
	held, peakHeld := hold.total, hold.max
	hold.mu.Unlock()

	setup := fmt.Sprintf("one collect-due pass (dispatcher.RunOnce, product defaults, concurrency %d, pool %d) over %d due items against the simulator in-process over httptest with %s added to every request (2 requests per item)",
		occConcurrency, occPool, occItems, sz.slowLatency)
	rep.add("Slow provider: pass wall time", took.Round(100*time.Millisecond).String(), setup)
	rep.add("Slow provider: peak DB connections checked out", strconv.Itoa(peakHeld),
		"pgxpool PrepareConn/AfterRelease hooks: most connections checked out at once during the pass")
	rep.add("Slow provider: peak DB connections open / non-idle", fmt.Sprintf("%d / %d", peakOpen, peakBusy),
		fmt.Sprintf("pg_stat_activity sampled every 50 ms (application_name=%s, this database): most backends open, and most not idle", occAppName))
	rep.add("Slow provider: connection time per item", fmt.Sprintf("%.2f ms", float64(held.Microseconds())/1000/occItems),
		"sum of checkout durations from the pool hooks ÷ items (a 50 ms pg_stat_activity sampler saw "+
			fmt.Sprintf("%.0f ms of non-idle backend time in total)", float64(busyTime.Milliseconds())))
	if pgbench != "" {
		r := <-withCollector
		if r.err != nil {
			return r.err
		}
		how := fmt.Sprintf("pgbench %s -T %d (TPC-B-like, scale 10, own database, same server), per-transaction log latencies", pgbenchArgs, sz.pgbenchSecs)
		rep.add("pgbench p50 / p99 latency, alone", fmt.Sprintf("%.2f / %.2f ms", baseP50, baseP99), how)
		rep.add("pgbench p50 / p99 latency, collector running", fmt.Sprintf("%.2f / %.2f ms", r.p50, r.p99), how+", started together with the slow-provider pass above")
		rep.note("pgbench's p99 on a shared 2-core machine moves by 2-3× between identical runs (other processes' CPU bursts), in either direction; " +
			"read the with/without pair together with the connection rows above, which say how much of the server the collector took")
	}
	return nil
}

// pgbenchLatency reads pgbench's per-transaction logs (prefix.PID[.N]); the third field is the
// transaction's latency in microseconds (with -R it includes the schedule lag).
func pgbenchLatency(prefix string) (p50, p99 float64, err error) {
	files, err := filepath.Glob(prefix + ".*")
	if err != nil || len(files) == 0 {
		return 0, 0, fmt.Errorf("no pgbench logs at %s.*", prefix)
	}
	var lat []float64
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return 0, 0, err
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 3 {
				continue
			}
			if us, err := strconv.ParseFloat(fields[2], 64); err == nil {
				lat = append(lat, us/1000)
			}
		}
		fh.Close()
	}
	if len(lat) == 0 {
		return 0, 0, fmt.Errorf("empty pgbench logs at %s.*", prefix)
	}
	slices.Sort(lat)
	at := func(p float64) float64 { return lat[int(p*float64(len(lat)-1))] }
	return at(0.50), at(0.99), nil
}
