package main

import (
	"context"
	"fmt"
	"math"
	"time"
)

// benchAdaptive measures the adaptive budget against providers whose real limit is far below
// the configured one: one `collector run` with the default budget (500/s, 30,000/min) against
// `collector sim --rate N`, for N = 5, 50 and 400. Once the daemon has learned the limit (its
// rate came down to N) and settled, it reports the share of N the provider served and the share
// of answers refused over a minute, and how long learning took.
func benchAdaptive(ctx context.Context, e *env, sz sizes, rep *report) error {
	warmup, window := 10*time.Second, time.Minute
	if sz.daemonWindow == 0 {
		warmup, window = 5*time.Second, 20*time.Second
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
	// Converged: the learned rate has come down to the real limit (from the configured 500/s
	// that takes about a dozen cuts a couple of seconds apart); then a short settling time.
	started := time.Now()
	var learned float64
	for learned = math.Inf(1); learned > float64(limit); {
		if time.Since(started) > 3*time.Minute {
			return fmt.Errorf("the learned rate is still %.1f/s after 3 minutes", learned)
		}
		if err := wait(500 * time.Millisecond); err != nil {
			return err
		}
		if err := pool.QueryRow(ctx, `SELECT coalesce(max(rate), 'Infinity') FROM budget_rates`).Scan(&learned); err != nil {
			return fmt.Errorf("learned rate: %w", err)
		}
	}
	converged := time.Since(started)
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
	if err := pool.QueryRow(ctx, `SELECT rate FROM budget_rates`).Scan(&learned); err != nil {
		return fmt.Errorf("learned rate: %w", err)
	}
	sent, refused := b.Total-a.Total, b.RateLimited-a.RateLimited
	served := float64(sent-refused) / took
	rep.add(fmt.Sprintf("Adaptive budget against a provider limited to %d req/s (configured 500/s): served / refused", limit),
		fmt.Sprintf("%.0f%% of %d req/s / %.2f%% of answers (learned %.1f/s; converged in %.0f s)", 100*served/float64(limit), limit,
			100*float64(refused)/float64(max(sent, 1)), learned, converged.Seconds()),
		fmt.Sprintf("one `collector run` of the built binary with the default budget (daemon.budget.adaptive on, 500/s, 30,000/min, 3%% headroom, concurrency 16), `collector sim --rate %d` as a separate process (token bucket, burst one second), %s HOT_1M items all due (twice the limit's worth of work); converged = from the daemon's start until the learned rate (budget_rates) first came down to the limit; then %s to settle, and the simulator's served and refused (API002) counts for the key over %s; learned = budget_rates at the end",
			limit, count(len(ids)), warmup, window))
	return nil
}
