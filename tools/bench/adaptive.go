package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// benchAdaptive measures the adaptive budget against providers whose real limit is far below
// the configured one: one `collector run` with the default budget (500/s, 30,000/min) against
// `collector-dev sim --rate N`, for N = 5, 50 and 400. Once the daemon has learned the limit (its
// rate came down to N) and settled, it reports the share of N the provider served and the share
// of answers refused over a minute, and how long learning took. Then the first minute of a
// cold start (nothing learned, so the slow start's ramp) against the same providers.
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
	// The first minute from a cold start (nothing learned: the slow start's ramp). Quick mode
	// (CI) runs one provider for a shorter window.
	first, limits := time.Minute, []int{5, 50, 400}
	if sz.daemonWindow == 0 {
		first, limits = 20*time.Second, []int{50}
	}
	for _, limit := range limits {
		if err := adaptiveFirstMinute(ctx, e, bin, limit, first, rep); err != nil {
			return fmt.Errorf("first minute, provider limit %d/s: %w", limit, err)
		}
	}
	return nil
}

// adaptiveFirstMinute starts one `collector run` with the default budget and nothing learned
// for its key (no budget_rates row) against `collector-dev sim --rate N` and counts, over the first
// window from the daemon's start, the answers the provider refused and the requests it served
// (targets: ≤ 2 % refused, ≥ 80 % of N × window served).
func adaptiveFirstMinute(ctx context.Context, e *env, bin string, limit int, window time.Duration, rep *report) error {
	u, sim, ids, pool, cleanup, err := adaptiveProvider(ctx, e, bin, "bench_adaptive_cold", limit)
	if err != nil {
		return err
	}
	defer cleanup()
	t0 := time.Now()
	p, err := startDaemon(ctx, bin, u, sim.base, 500)
	if err != nil {
		return err
	}
	defer func() { _ = p.stop() }()
	// When the slow start ended: the first sample whose row is no longer marked slow start.
	var ended time.Duration
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for time.Since(t0) < window {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
		if ended == 0 {
			var slow bool
			err := pool.QueryRow(ctx, `SELECT slow_start FROM budget_rates`).Scan(&slow)
			if err != nil && !errors.Is(err, pgx.ErrNoRows) {
				return fmt.Errorf("slow start: %w", err)
			}
			if err == nil && !slow {
				ended = time.Since(t0)
			}
		}
	}
	ks, err := sim.keyStats(ctx, procMarketKey)
	if err != nil {
		return err
	}
	took := time.Since(t0).Seconds()
	var learned float64
	var collected int
	if err := pool.QueryRow(ctx, `SELECT (SELECT coalesce(max(rate), 0) FROM budget_rates),
		(SELECT count(*) FROM tracked_items WHERE last_collected_at IS NOT NULL)`).Scan(&learned, &collected); err != nil {
		return fmt.Errorf("learned rate: %w", err)
	}
	served := ks.Total - ks.RateLimited
	endedAt := "still ramping"
	if ended > 0 {
		endedAt = fmt.Sprintf("slow start ended at %.0f s", ended.Seconds())
	}
	rep.add(fmt.Sprintf("Adaptive budget, first %s from a cold start, provider limited to %d req/s: refused / served", window, limit),
		fmt.Sprintf("%.2f%% of answers (%d of %d) / %.0f%% of %d × %.0f s (%s items collected; %s, rate %.1f/s at the end)",
			100*float64(ks.RateLimited)/float64(max(ks.Total, 1)), ks.RateLimited, ks.Total,
			100*float64(served)/(float64(limit)*took), limit, took, count(collected), endedAt, learned),
		fmt.Sprintf("targets over the first minute (a shorter window, BENCH_QUICK, counts more of the ramp): ≤ 2 %% refused, ≥ 80 %% served. One `collector run` of the built binary with the default budget (500/s, daemon.budget.adaptive and slow_start on, slow_start_share 0.01: from 4.85/s) and no budget_rates row, `collector-dev sim --rate %d` as a separate process (token bucket, burst one second), %s HOT_1M items all due (first collections, alone: twice the limit's worth of work); the simulator's counts for the key over the first %s from the daemon's start (its start-up and the budget's 2 s join delay included); served = answered, not refused, ÷ (limit × that time)",
			limit, count(len(ids)), window))
	return nil
}

func adaptiveRun(ctx context.Context, e *env, bin string, limit int, warmup, window time.Duration, rep *report) error {
	u, sim, ids, pool, cleanup, err := adaptiveProvider(ctx, e, bin, "bench_adaptive", limit)
	if err != nil {
		return err
	}
	defer cleanup()
	p, err := startDaemon(ctx, bin, u, sim.base, 500)
	if err != nil {
		return err
	}
	defer func() { _ = p.stop() }()
	wait := func(d time.Duration) error { return sleepCtx(ctx, d) }
	// Converged: the slow start is over and the learned rate has come down to the real limit
	// (a slow start's ramp below the limit is no finding); then a short settling time. A daemon
	// that cannot send faster than the limit (a loaded machine against 400/s) is never refused
	// and learns nothing: after 30 s at the ceiling without a refusal it is measured as it is.
	started := time.Now()
	var learned float64
	var refusedAt time.Time // when the refused count last changed, once the slow start is over
	var lastRefused int64
	bound := false
	for learned = math.Inf(1); learned > float64(limit) && !bound; {
		if time.Since(started) > 3*time.Minute {
			return fmt.Errorf("the learned rate is still %.1f/s after 3 minutes", learned)
		}
		if err := wait(500 * time.Millisecond); err != nil {
			return err
		}
		if err := pool.QueryRow(ctx, `SELECT coalesce(max(rate) FILTER (WHERE NOT slow_start), 'Infinity') FROM budget_rates`).Scan(&learned); err != nil {
			return fmt.Errorf("learned rate: %w", err)
		}
		ks, err := sim.keyStats(ctx, procMarketKey)
		if err != nil {
			return err
		}
		switch {
		case math.IsInf(learned, 1):
		case refusedAt.IsZero() || ks.RateLimited != lastRefused:
			refusedAt, lastRefused = time.Now(), ks.RateLimited
		default:
			bound = time.Since(refusedAt) >= 30*time.Second
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
	note := fmt.Sprintf("converged in %.0f s", converged.Seconds())
	if bound {
		note = "never above the limit: the daemon, not the provider, was the bottleneck on this machine"
	}
	rep.add(fmt.Sprintf("Adaptive budget against a provider limited to %d req/s (configured 500/s): served / refused", limit),
		fmt.Sprintf("%.0f%% of %d req/s / %.2f%% of answers (learned %.1f/s; %s)", 100*served/float64(limit), limit,
			100*float64(refused)/float64(max(sent, 1)), learned, note),
		fmt.Sprintf("one `collector run` of the built binary with the default budget (daemon.budget.adaptive on, 500/s, 30,000/min, 3%% headroom, concurrency 16), `collector-dev sim --rate %d` as a separate process (token bucket, burst one second), %s HOT_1M items all due (twice the limit's worth of work); converged = from the daemon's start (nothing learned: daemon.budget.slow_start's ramp from 4.85/s) until the slow start had ended and the learned rate (budget_rates) first came down to the limit (or 30 s passed at the ceiling with no refusal: the daemon could not send faster); then %s to settle, and the simulator's served and refused (API002) counts for the key over %s; learned = budget_rates at the end",
			limit, count(len(ids)), warmup, window))
	return nil
}

// adaptiveProvider is a fresh database db (URL u) tracking HOT items all due, a simulator
// process allowing limit requests a second, and a pool on the database; cleanup undoes them.
// HOT items need 2 requests a minute each: 60 × limit of them ask for twice the limit.
func adaptiveProvider(ctx context.Context, e *env, bin, db string, limit int) (u string, sim *simProcess, ids []string, pool *pgxpool.Pool, cleanup func(), err error) {
	if u, err = e.freshDB(ctx, db, false); err != nil {
		return "", nil, nil, nil, nil, err
	}
	if sim, ids, err = hotCatalog(ctx, bin, u, max(300, 60*limit), "--rate", fmt.Sprint(limit)); err != nil {
		e.dropDB(ctx, db)
		return "", nil, nil, nil, nil, err
	}
	if pool, err = openPool(ctx, u, 2); err != nil {
		sim.stop()
		e.dropDB(ctx, db)
		return "", nil, nil, nil, nil, err
	}
	return u, sim, ids, pool, func() { pool.Close(); sim.stop(); e.dropDB(ctx, db) }, nil
}
