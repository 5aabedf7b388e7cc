package main

import (
	"context"
	"fmt"
	"time"
)

// benchAdaptive measures the adaptive budget against providers whose real limit is far below
// the configured one: one `collector run` with the default budget (500/s, 30,000/min) against
// `collector sim --rate N`, for N = 5, 50 and 400. After a warm-up in which the daemon learns
// the limit, it reports the share of N the provider served and the share of answers refused.
func benchAdaptive(ctx context.Context, e *env, sz sizes, rep *report) error {
	warmup, window := 30*time.Second, time.Minute
	if sz.daemonWindow == 0 {
		warmup, window = 20*time.Second, 20*time.Second
	}
	bin, err := buildCollector(ctx)
	if err != nil {
		return err
	}
	for _, limit := range []int{5, 50, 400} {
		if err := adaptiveRun(ctx, e, bin, limit, warmup, window, rep); err != nil {
			return fmt.Errorf("provider limit %d/s: %w", limit, err)
		}
	}
	return nil
}

func adaptiveRun(ctx context.Context, e *env, bin string, limit int, warmup, window time.Duration, rep *report) error {
	const db = "bench_adaptive"
	u, err := e.freshDB(ctx, db, false)
	if err != nil {
		return err
	}
	defer e.dropDB(ctx, db)
	// HOT items need 2 requests a minute each: 60 × limit of them ask for twice the limit.
	sim, ids, err := hotCatalog(ctx, bin, u, max(300, 60*limit), "--rate", fmt.Sprint(limit))
	if err != nil {
		return err
	}
	defer sim.stop()
	pool, err := openPool(ctx, u, 2)
	if err != nil {
		return err
	}
	defer pool.Close()
	p, err := startDaemon(ctx, bin, u, sim.base, 500)
	if err != nil {
		return err
	}
	defer func() { _ = p.stop() }()
	wait := func(d time.Duration) error {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			return nil
		}
	}
	if err := wait(warmup); err != nil {
		return err
	}
	a, err := sim.keyStats(ctx, procMarketKey)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := wait(window); err != nil {
		return err
	}
	b, err := sim.keyStats(ctx, procMarketKey)
	if err != nil {
		return err
	}
	took := time.Since(t0).Seconds()
	var learned float64
	if err := pool.QueryRow(ctx, `SELECT rate FROM budget_rates`).Scan(&learned); err != nil {
		return fmt.Errorf("learned rate: %w", err)
	}
	sent, refused := b.Total-a.Total, b.RateLimited-a.RateLimited
	served := float64(sent-refused) / took
	rep.add(fmt.Sprintf("Adaptive budget against a provider limited to %d req/s (configured 500/s): served / refused", limit),
		fmt.Sprintf("%.0f%% of %d req/s / %.2f%% of answers (learned %.1f/s)", 100*served/float64(limit), limit,
			100*float64(refused)/float64(max(sent, 1)), learned),
		fmt.Sprintf("one `collector run` of the built binary with the default budget (daemon.budget.adaptive on, 500/s, 30,000/min, 3%% headroom, concurrency 16), `collector sim --rate %d` as a separate process (token bucket, burst one second), %s HOT_1M items all due (twice the limit's worth of work); after %s of warm-up, the simulator's served and refused (API002) counts for the key over %s; learned = budget_rates at the end",
			limit, count(len(ids)), warmup, window))
	return nil
}
