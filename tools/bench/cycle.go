package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/provider"
)

// The collector's pass is sized like internal/dispatcher's BenchmarkClaimRescheduleCycle; the
// ceiling uses the same batch and flush sizes and the product's default pool size.
// ceilingLoops is how many claim→write-back loops run in parallel: one per core measured best
// (1, 2 and 4 were tried; the differences were within the run-to-run noise).
var ceilingLoops = envInt("BENCH_CEILING_LOOPS", runtime.NumCPU())

// cycleRounds is how many times each contender runs per size (BENCH_CYCLE_ROUNDS); rows are medians.
var cycleRounds = envInt("BENCH_CYCLE_ROUNDS", 3)

const (
	cycleBatch = 1000
	cycleFlush = 500
	cyclePool  = 8
)

// cycleShare is the share of collections that see a change when the realistic market is
// collected every minute (the simulator's own rates over a 20,000-item catalog): the share of
// the timed collections that write a snapshot and an event in history.mode changes.
var cycleShare = sync.OnceValue(func() float64 { return realisticChangeShare(dayScaleItems, histDaySeed, time.Minute) })

// The listing every seeded item's last snapshot saw (seedDue), and the cheaper one an item in
// the changed share sees now.
const (
	cyclePrice, cycleChangedPrice  = 100, 99
	cycleQuantity, cycleAPIAverage = 3, 90
)

// steadyFetcher answers at once with one listing and no sales, so only the claim, write-back
// and reschedule path is measured: the seeded last snapshot's listing, or for the items in the
// changed share (changedShare of their id) a cheaper one.
type steadyFetcher struct {
	dispatcher.NoPacking
	share   float64
	changed *atomic.Int64
}

func (f steadyFetcher) Auction(_ context.Context, itemID string) (provider.Answer[provider.Listing], error) {
	price := int64(cyclePrice)
	if changedShare(itemID, f.share) {
		price = cycleChangedPrice
		f.changed.Add(1)
	}
	return provider.Answer[provider.Listing]{Rows: []provider.Listing{{UnitPrice: price, Count: cycleQuantity, AveragePrice: cycleAPIAverage}}, Sent: 1}, nil
}
func (steadyFetcher) AuctionSold(context.Context, string) (provider.Answer[provider.Sale], error) {
	return provider.Answer[provider.Sale]{}, nil
}
func (steadyFetcher) AuctionLimit() int { return provider.MaxAuctionLimit }
func (steadyFetcher) SoldLimit() int    { return provider.MaxSoldLimit }

// cycleSeedDB holds one size's seeded table; each contender of ours runs on a copy of it.
const cycleSeedDB = "bench_cycle_seed"

func benchCycle(ctx context.Context, e *env, sz sizes, rep *report) error {
	for _, c := range sz.cycle {
		if err := cycleAt(ctx, e, c, rep); err != nil {
			return err
		}
	}
	return nil
}

func cycleAt(ctx context.Context, e *env, c cycleSize, rep *report) error {
	n, k := c.tracked, c.timed
	label, table, items := count(n)+" items", fmt.Sprintf("over %s due items in a table cloned from one vacuumed seed", count(n)), count(n)
	if k < n {
		// The timed part is a prefix of the table in claim order: every claim still plans and
		// scans against the full-size table and its indexes, which is what the row is about.
		label = fmt.Sprintf("%s items (%s timed)", count(n), count(k))
		table = fmt.Sprintf("over the first %s claims from a table of %s tracked items, all due, cloned from one vacuumed seed (the rate at a %s-row table; the rest stay due)", count(k), count(n), count(n))
		items = count(k)
	}
	t0 := time.Now()
	if err := seedCycleDB(ctx, e, n); err != nil {
		return fmt.Errorf("seed %d items: %w", n, err)
	}
	defer e.dropDB(ctx, cycleSeedDB)
	seeded := time.Since(t0)

	// One run of each on this 2-core machine varies by up to a third from run to run (both
	// sides: checkpoints and autovacuum land differently), so the contenders run in
	// interleaved rounds and each row is the median, with the range beside it.
	var ours, ceil, riv []float64
	var cloned time.Duration
	for range cycleRounds {
		o, cl, err := cycleOurs(ctx, e, c)
		if err != nil {
			return fmt.Errorf("collector at %d items: %w", n, err)
		}
		cc, err := cycleCeiling(ctx, e, c)
		if err != nil {
			return fmt.Errorf("raw-SQL ceiling at %d items: %w", n, err)
		}
		r, err := cycleRiver(ctx, e, c)
		if err != nil {
			return fmt.Errorf("bench/river at %d jobs: %w", n, err)
		}
		ours, ceil, riv, cloned = append(ours, o), append(ceil, cc), append(riv, r), cl
	}
	mo, mc, mr := median(ours), median(ceil), median(riv)
	share := fmt.Sprintf("history.mode changes (the default) at the realistic market's change share: every item seeded as collected a minute ago with its last snapshot ten minutes ago, and %.1f %% of the collections (a fixed hash of the item id; 1 − e^(−(λ+σ)·60 s) averaged over `collector-dev sim --market realistic`'s 20,000 items) see a cheaper listing than that snapshot and write a snapshot + outbox row, the rest only their reschedule", 100*cycleShare())
	rounds := fmt.Sprintf("median of %d interleaved rounds (collector, ceiling, River in turn)", cycleRounds)
	rep.add("Claim+reschedule cycle, collector, "+label, spread(mo, ours, "items/s"),
		fmt.Sprintf("dispatcher.RunOnce (one collect-due pass, zero-latency in-process provider, batch %d, flush %d, concurrency 8, pool %d, MaxBatches %d) %s: claim, one fenced write per item (next slot, change counts, seen state; its row locks hold until commit), then snapshot + candles + outbox insert per changed item; %s; %s items / wall time (the snapshots written checked against the changed answers); %s", cycleBatch, cycleFlush, cyclePool, (k+cycleBatch-1)/cycleBatch, table, share, items, rounds))
	rep.add("Claim+reschedule cycle, raw-SQL ceiling, "+label, spread(mc, ceil, "items/s"),
		fmt.Sprintf("the same claim statement (catalog.ClaimDue) and write-back transaction (dispatcher.WriteCollected: the fenced item write for every item, then history.Policy.Write, a snapshot with its candles and outbox event for the same changed share, %.1f %%) driven by %d plain loops (claim %d → two %d-row transactions) until %s items are written back, without the pass's fetch and writer queue, a copy of the same seed, same pool size; %s", 100*cycleShare(), ceilingLoops, cycleBatch, cycleFlush, items, rounds))
	rep.add("Ratio collector / ceiling, "+label, fmt.Sprintf("%.2f", mo/mc), "the two medians above")
	rep.note("cycle at %s tracked items: seeding took %s (generate_series insert, VACUUM ANALYZE, CHECKPOINT; not timed), each contender's copy %s (CREATE DATABASE … TEMPLATE, CHECKPOINT)", count(n), seeded.Round(100*time.Millisecond), cloned.Round(100*time.Millisecond))
	riverHow := fmt.Sprintf("bench/river: rivermigrate into a fresh database, InsertManyFast %s no-op jobs (not timed), then a client (default queue, MaxWorkers 10000, default fetch settings) from Start to the last JobCompleted event; completed count checked in river_job", count(n))
	if k < n {
		riverHow = fmt.Sprintf("bench/river -work %d: rivermigrate into a fresh database, InsertManyFast %s available no-op jobs (not timed), then a client (default queue, MaxWorkers 10000, default fetch settings) from Start until %s JobCompleted events (River's rate with %s jobs in river_job, the rest left available); at least that many completed checked in river_job", k, count(n), items, count(n))
	}
	rep.add("River v0.51.2 no-op jobs, "+strings.Replace(label, "items", "jobs", 1), spread(mr, riv, "jobs/s"), riverHow+"; "+rounds)
	rep.add("Ratio collector / River, "+label, fmt.Sprintf("%.2f", mo/mr),
		fmt.Sprintf("the two medians: collector items/s ÷ River jobs/s; target ≥ 1.0 (per round: %s). A collector item also updates its change counts and, for the %.1f %% that changed, writes a snapshot, its candles and an outbox row; a River job only its own state", ratios(ours, riv), 100*cycleShare()))
	return nil
}

// seedCycleDB creates the seed database of one cycle size; the contenders copy it instead of
// seeding their own, so they start from byte-identical tables and the seed is paid once.
func seedCycleDB(ctx context.Context, e *env, n int) error {
	u, err := e.freshDB(ctx, cycleSeedDB, true)
	if err != nil {
		return err
	}
	pool, err := openPool(ctx, u, 2)
	if err != nil {
		return err
	}
	// A template must have no connections when it is copied.
	defer pool.Close()
	if err := createPartitions(ctx, pool); err != nil {
		return err
	}
	return seedDue(ctx, pool, n)
}

// median of a few runs (the mean of the middle two for an even count).
func median(v []float64) float64 {
	w := slices.Clone(v)
	slices.Sort(w)
	if len(w)%2 == 1 {
		return w[len(w)/2]
	}
	return (w[len(w)/2-1] + w[len(w)/2]) / 2
}

// spread is a median with the runs' range: "18217 items/s (16090–19514)".
func spread(m float64, v []float64, unit string) string {
	if len(v) < 2 {
		return rate(m, unit)
	}
	return fmt.Sprintf("%s (%.0f–%.0f)", rate(m, unit), slices.Min(v), slices.Max(v))
}

// ratios lists each round's collector ÷ River.
func ratios(ours, riv []float64) string {
	r := make([]string, len(ours))
	for i := range ours {
		r[i] = fmt.Sprintf("%.2f", ours[i]/riv[i])
	}
	return strings.Join(r, ", ")
}

func count(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n >= 1000 && n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
}

func rate(v float64, unit string) string { return fmt.Sprintf("%.0f %s", v, unit) }

func cycleOurs(ctx context.Context, e *env, c cycleSize) (float64, time.Duration, error) {
	t0 := time.Now()
	u, err := e.cloneDB(ctx, "bench_cycle_ours", cycleSeedDB)
	if err != nil {
		return 0, 0, err
	}
	cloned := time.Since(t0)
	defer e.dropDB(ctx, "bench_cycle_ours")
	pool, err := openPool(ctx, u, cyclePool)
	if err != nil {
		return 0, 0, err
	}
	defer pool.Close()
	// Rescheduled items are phase-pinned and may come due again while a long pass runs; the
	// seeded ones are older, so exactly timed/batch batches take exactly that many seeded items.
	dc := dispatcher.FromConfig(config.Default())
	dc.BatchSize, dc.Concurrency, dc.FlushSize, dc.MaxBatches = cycleBatch, 8, cycleFlush, (c.timed+cycleBatch-1)/cycleBatch
	f := steadyFetcher{share: cycleShare(), changed: new(atomic.Int64)}
	d, err := newDispatcher(pool, f, dc)
	if err != nil {
		return 0, 0, err
	}
	t1 := time.Now()
	s, err := d.RunOnce(ctx)
	took := time.Since(t1)
	if err != nil {
		return 0, 0, err
	}
	if s.Collected != c.timed {
		return 0, 0, fmt.Errorf("collected %d of %d: %s", s.Collected, c.timed, s)
	}
	// Only the changed answers write: the seeded last snapshot is what the others saw.
	var written int64
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM auction_snapshots`).Scan(&written); err != nil {
		return 0, 0, err
	}
	if written != f.changed.Load() {
		return 0, 0, fmt.Errorf("wrote %d snapshots for %d changed answers", written, f.changed.Load())
	}
	return float64(c.timed) / took.Seconds(), cloned, nil
}

func cycleCeiling(ctx context.Context, e *env, c cycleSize) (float64, error) {
	u, err := e.cloneDB(ctx, "bench_cycle_ceiling", cycleSeedDB)
	if err != nil {
		return 0, err
	}
	defer e.dropDB(ctx, "bench_cycle_ceiling")
	pool, err := openPool(ctx, u, cyclePool)
	if err != nil {
		return 0, err
	}
	defer pool.Close()
	n := c.timed
	done := make([]int, ceilingLoops)
	var left atomic.Int64 // claims are reserved so the loops take exactly the n timed items (see cycleOurs)
	left.Store(int64(n))
	t0 := time.Now()
	gctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errs := make([]error, ceilingLoops)
	for w := range ceilingLoops {
		wg.Go(func() {
			if errs[w] = ceilLoop(gctx, pool, &left, &done[w]); errs[w] != nil {
				cancel()
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return 0, err
	}
	took := time.Since(t0)
	total := 0
	for _, d := range done {
		total += d
	}
	if total != n {
		return 0, fmt.Errorf("wrote back %d of %d items", total, n)
	}
	return float64(n) / took.Seconds(), nil
}

func claimBatch(ctx context.Context, pool *pgxpool.Pool, k int) ([]catalog.Claim, error) {
	return catalog.ClaimDue(ctx, pool, k, 2*time.Minute, "ceiling", 0)
}

// ceilWriteBack is writeback.go's write-back for all-successful results with one listing and
// no sales (dispatcher.WriteCollected: the fenced item write, then history.Policy.Write, a
// snapshot with its candles and event for the items in the changed share) without the pass's
// writer queue around it.
func ceilWriteBack(ctx context.Context, pool *pgxpool.Pool, claims []catalog.Claim) error {
	cfg := config.Default()
	states := make([]history.State, len(claims))
	for i, c := range claims {
		price := int64(cyclePrice)
		if changedShare(c.ItemID, cycleShare()) {
			price = cycleChangedPrice
		}
		weighted, api := float64(price), int64(cycleAPIAverage)
		states[i] = history.State{Count: 1, Quantity: cycleQuantity, Lowest: &price, Median: &price, Weighted: &weighted, APIAverage: &api}
	}
	n, err := dispatcher.WriteCollected(ctx, pool, history.FromConfig(cfg), claims, states, time.Now(), cfg.Catalog.EstimateWindow)
	if err == nil && n != len(claims) {
		err = fmt.Errorf("fence matched %d of %d", n, len(claims))
	}
	return err
}

// cycleRiver runs bench/river (its own module, so it is built from its directory) on a fresh
// empty database: c.tracked jobs inserted, c.timed of them worked while timed.
func cycleRiver(ctx context.Context, e *env, c cycleSize) (float64, error) {
	u, err := e.freshDB(ctx, "bench_river", false)
	if err != nil {
		return 0, err
	}
	defer e.dropDB(ctx, "bench_river")
	bin := filepath.Join(os.TempDir(), "duecollector-riverbench")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, ".")
	build.Dir = filepath.Join("bench", "river")
	if out, err := build.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("build bench/river: %v\n%s", err, out)
	}
	cmd := exec.CommandContext(ctx, bin, "-url", u, "-jobs", fmt.Sprint(c.tracked), "-work", fmt.Sprint(c.timed))
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return 0, fmt.Errorf("bench/river: %w", err)
	}
	var res struct {
		JobsPerSec float64 `json:"jobs_per_second"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &res); err != nil {
		return 0, fmt.Errorf("bench/river output %q: %w", out, err)
	}
	return res.JobsPerSec, nil
}

func ceilLoop(ctx context.Context, pool *pgxpool.Pool, left *atomic.Int64, done *int) error {
	for {
		k := min(left.Add(-cycleBatch)+cycleBatch, cycleBatch)
		if k <= 0 {
			return nil
		}
		claims, err := claimBatch(ctx, pool, int(k))
		if err != nil || len(claims) == 0 {
			return err
		}
		for lo := 0; lo < len(claims); lo += cycleFlush {
			if err := ceilWriteBack(ctx, pool, claims[lo:min(lo+cycleFlush, len(claims))]); err != nil {
				return err
			}
		}
		*done += len(claims)
	}
}
