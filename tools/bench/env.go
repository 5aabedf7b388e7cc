package main

import (
	"bufio"
	"context"
	"fmt"
	"net/url"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/store"
)

// env is the database server every section runs against, and what the report says about it.
type env struct {
	adminURL string
	admin    *pgx.Conn
	facts    [][2]string
	created  []string
}

func newEnv(ctx context.Context) (*env, error) {
	u := os.Getenv("DUECOLLECTOR_TEST_DATABASE_URL")
	if u == "" {
		u = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	admin, err := pgx.Connect(ctx, u)
	if err != nil {
		return nil, fmt.Errorf("connect to %s (start PostgreSQL or set DUECOLLECTOR_TEST_DATABASE_URL): %w", config.RedactURL(u), err)
	}
	e := &env{adminURL: u, admin: admin}
	e.facts = append(e.facts,
		[2]string{"CPU", fmt.Sprintf("%d × %s", runtime.NumCPU(), cpuModel())},
		[2]string{"Memory", memTotal()},
		[2]string{"Go", runtime.Version()},
		[2]string{"Load average at start", loadAvg()})
	var version string
	if err := admin.QueryRow(ctx, "SELECT version()").Scan(&version); err != nil {
		return nil, err
	}
	e.facts = append(e.facts, [2]string{"PostgreSQL", version})
	var settings []string
	for _, s := range []string{"shared_buffers", "synchronous_commit", "max_connections", "fsync", "work_mem"} {
		var v string
		if err := admin.QueryRow(ctx, "SELECT current_setting($1)", s).Scan(&v); err != nil {
			return nil, err
		}
		settings = append(settings, s+"="+v)
	}
	e.facts = append(e.facts, [2]string{"PostgreSQL settings", strings.Join(settings, ", ")},
		[2]string{"Database server", "same host as the benchmark (127.0.0.1), shared by every section"})
	return e, nil
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}

func memTotal() string {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return "unknown"
	}
	var kb int64
	for _, line := range strings.Split(string(b), "\n") {
		if _, err := fmt.Sscanf(line, "MemTotal: %d kB", &kb); err == nil {
			return fmt.Sprintf("%.1f GiB", float64(kb)/(1<<20))
		}
	}
	return "unknown"
}

// urlFor is the admin URL pointed at another database on the same server.
func (e *env) urlFor(db string) string {
	u, _ := url.Parse(e.adminURL)
	u.Path = "/" + db
	return u.String()
}

// freshDB (re)creates an empty database; migrated applies the collector's schema to it.
func (e *env) freshDB(ctx context.Context, name string, migrated bool) (string, error) {
	id := pgx.Identifier{name}.Sanitize()
	if _, err := e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop %s: %w", name, err)
	}
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+id); err != nil {
		return "", fmt.Errorf("create %s: %w", name, err)
	}
	e.created = append(e.created, name)
	u := e.urlFor(name)
	if migrated {
		if err := store.Migrate(ctx, u, nil); err != nil {
			return "", fmt.Errorf("migrate %s: %w", name, err)
		}
	}
	return u, nil
}

// createPartitions creates the history partitions before anything is measured, as `migrate up`
// and the daemon keep them: a write finding none would create them on its measured path.
func createPartitions(ctx context.Context, pool *pgxpool.Pool) error {
	parts, err := keeper(pool)
	if err != nil {
		return err
	}
	if _, err := parts.RunOnce(ctx); err != nil {
		return fmt.Errorf("create history partitions: %w", err)
	}
	return nil
}

// keeper is the partition keeper a collector process builds once (internal/cli's app.keeper),
// with the default configuration.
func keeper(pool *pgxpool.Pool) (*partition.Partitions, error) {
	return partition.New(pool, pool, partition.FromConfig(config.Default()))
}

// newDispatcher is dispatcher.New over pool with the partition keeper a collector process
// builds once (keeper).
func newDispatcher(pool *pgxpool.Pool, f dispatcher.Fetcher, dc dispatcher.Config) (*dispatcher.Dispatcher, error) {
	parts, err := keeper(pool)
	if err != nil {
		return nil, err
	}
	dc.Partitions = parts
	return dispatcher.New(pool, f, dc, nil)
}

// cloneDB (re)creates a database as a copy of another (which must have no connections), then
// checkpoints so the copy's writes are not flushed in the middle of a measured run.
func (e *env) cloneDB(ctx context.Context, name, from string) (string, error) {
	id := pgx.Identifier{name}.Sanitize()
	if _, err := e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return "", fmt.Errorf("drop %s: %w", name, err)
	}
	if _, err := e.admin.Exec(ctx, "CREATE DATABASE "+id+" TEMPLATE "+pgx.Identifier{from}.Sanitize()); err != nil {
		return "", fmt.Errorf("create %s from %s: %w", name, from, err)
	}
	e.created = append(e.created, name)
	if _, err := e.admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return "", fmt.Errorf("checkpoint after copying %s: %w", from, err)
	}
	return e.urlFor(name), nil
}

// dropDB drops a database as soon as a section is done with it, so the next one runs on a
// server not carrying its dead rows and dirty buffers.
func (e *env) dropDB(ctx context.Context, name string) {
	_, _ = e.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
}

func (e *env) close() {
	ctx := context.Background()
	for _, n := range e.created {
		e.dropDB(ctx, n)
	}
	e.admin.Close(ctx)
}

func openPool(ctx context.Context, u string, maxConns int32) (*pgxpool.Pool, error) {
	return store.Open(ctx, store.PoolConfig{URL: u, MaxConns: maxConns, ApplicationName: "duecollector-bench"})
}

// seedDue inserts n tracked items, spread over the four tiers, all due now (the same rows as
// internal/dispatcher's BenchmarkClaimRescheduleCycle), in steady state: each collected a
// minute ago, its last snapshot (the listing steadyFetcher answers for an unchanged item) ten
// minutes ago. It vacuums so every contender starts from the same clean table.
func seedDue(ctx context.Context, pool *pgxpool.Pool, n int) error {
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at, last_collected_at, last_snapshot_at,
		    seen_listing_count, seen_listing_quantity, seen_lowest_price, seen_median_price, seen_weighted_price,
		    seen_api_average_price, seen_truncated)
		SELECT md5(i::text), 'item ' || i,
		       (ARRAY['HOT_1M','ACTIVE_3M','WARM_5M','COLD_10M'])[1 + i % 4], now() - interval '1 second',
		       now() - interval '1 minute', now() - interval '10 minutes', 1, $2, $3, $3, $4, $5, false
		FROM generate_series(1, $1) AS i`, n, cycleQuantity, cyclePrice, float64(cyclePrice), cycleAPIAverage); err != nil {
		return fmt.Errorf("seed %d tracked items: %w", n, err)
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE tracked_items`); err != nil {
		return fmt.Errorf("vacuum: %w", err)
	}
	// The seed's WAL is flushed now, not by a checkpoint in the middle of the measured run.
	if _, err := pool.Exec(ctx, `CHECKPOINT`); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return nil
}

// loadAvg is reported because a benchmark on a shared 2-core machine is only as quiet as the
// machine was.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ") + " (1/5/15 min)"
}

// sleepCtx waits d, or less when ctx ends first.
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
