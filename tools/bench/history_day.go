package main

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
	"github.com/duecollector/duecollector/internal/tiers"
)

// histDaySize is the simulated day both history modes collect: items of the realistic market,
// a sample of a catalog of planned items (the 20,000 by default) collected at the tiers
// planned for them, over passes histDayStep of simulated time apart.
type histDaySize struct{ items, passes, planned int }

const (
	histDayStep = time.Minute
	histDaySeed = 17
	// dayScaleItems is the catalog the per-day figures are scaled to (the realistic one).
	dayScaleItems = 20_000
)

// histTables are the history's tables (the outbox with its pending list), each summed over its
// partitions when it has any.
var histTables = []string{"auction_snapshots", "auction_sales", "price_candles", "outbox", "outbox_pending"}

// dayCounts are the history's rows by table and its bytes (tables, TOAST and indexes).
type dayCounts struct {
	snapshots, sales, candles, outbox int64
	bytes                             int64
}

func (c dayCounts) minus(o dayCounts) dayCounts {
	return dayCounts{c.snapshots - o.snapshots, c.sales - o.sales, c.candles - o.candles, c.outbox - o.outbox, c.bytes - o.bytes}
}

func (c dayCounts) rows() int64 { return c.snapshots + c.sales + c.candles + c.outbox }

// dayState is one stored snapshot: the pass it was collected in, its listing figures as text
// (lowest / median / weighted / API average price, count, quantity, truncated) and its new sales.
type dayState struct {
	pass    int
	figures string
	sales   int32
}

type dayResult struct {
	first, end dayCounts // after the first pass (every item's first snapshot), after the last
	collected  int64
	inPasses   time.Duration // spent in the dispatcher's passes
	reasons    map[string]int64
	series     map[string][]dayState // item → its snapshots in pass order
}

// historyDay collects the same simulated day of the realistic market twice, into fresh
// databases, once with history.mode every and once with changes, each pass collecting the
// items due then on their planned tiers, and compares what each stored, and the series rebuilt
// from the change-only rows with every collection's. It fails when the two series differ at
// any collection instant or no heartbeat was written.
func historyDay(ctx context.Context, e *env, d histDaySize, rep *report) error {
	d.planned = max(d.planned, d.items)
	plan, err := planRealistic(d.planned, histDaySeed)
	if err != nil {
		return err
	}
	ids := plan.sample(d.items)
	due := daySchedule(ids, plan, d.passes)
	var want int64
	for _, p := range due {
		want += int64(len(p))
	}
	start := time.Now().Add(-time.Duration(d.passes) * histDayStep).Truncate(time.Minute)
	t0 := time.Now()
	every, err := historyDayRun(ctx, e, ids, plan, due, start, config.HistoryEvery)
	if err != nil {
		return fmt.Errorf("history.mode every: %w", err)
	}
	t1 := time.Now()
	changes, err := historyDayRun(ctx, e, ids, plan, due, start, config.HistoryChanges)
	if err != nil {
		return fmt.Errorf("history.mode changes: %w", err)
	}
	rep.note("history: the simulated day took %s in history.mode every (%s in dispatcher passes), %s in changes (%s) (%d passes, %d collections each)",
		t1.Sub(t0).Round(time.Second), every.inPasses.Round(time.Second), time.Since(t1).Round(time.Second), changes.inPasses.Round(time.Second), d.passes, want)
	instants, diffs, moved := rebuildDiffs(every.series, changes.series)
	if every.collected != want || changes.collected != want || int64(instants) != want {
		return fmt.Errorf("collections every %d, changes %d, every-mode snapshots %d: want %d each", every.collected, changes.collected, instants, want)
	}
	simulated := fmt.Sprintf("%g h", (time.Duration(d.passes) * histDayStep).Hours())
	s := plan.summary
	planned := fmt.Sprintf("the default budget plan: tierplan.ApplyBudget, as recalculate-popularity and `collector plan --apply` apply it under config.Default() (catalog.policy budget, provider.market %.0f req/s and %d/min, as budget.ConfiguredPlanLimit leaves it: %.0f req/s, collect.pack_* packing), over the realistic market of %d items, each planned as the estimator knows it after a steady day at HOT_1M (its true rate of collections that see a change, listing changes and sales; its sales rate and order-book size) and scored as the freshness section scores it (sales, and views at its weight); planned demand %.1f req/s, %.2f requests a collection, tiers %s; the %d collected items are a sample of them stratified by change rate (in order of λ + σ, the middle item of each of %d equal slices): %s",
		plan.market.Rate, plan.market.PerMinute, s.Limit, d.planned, s.DemandAfter, s.Requests, plan.mix(plan.ids), d.items, d.items, plan.mix(ids))
	how := fmt.Sprintf("in-process collect-due passes (dispatcher.FromConfig(config.Default()) with history.mode set, batch 500, concurrency 16, collect.pack_* defaults, shadow checks off) over %d items of `collector-dev sim --market realistic` (seed %d) on %s; %d passes %s of simulated time apart (%s simulated), the first collecting every item (first collections, as after an import), each later one the items due then on their tier's phase grid (tiers.Phase, at least half an interval after the last collection, as tiers.NextSlot), %d collections in all; before each pass the database's last collection and last snapshot times are moved back by the simulated time less the real time that passed, so intervals and the 1 h heartbeat run on market time; the same simulated instants for both modes, each in a fresh database",
		d.items, histDaySeed, planned, d.passes, histDayStep.String(), simulated, want)
	size := "rows: count(*); bytes: pg_total_relation_size (table, TOAST, indexes) summed over the leaf partitions (pg_partition_tree) of auction_snapshots and auction_sales, plus price_candles, outbox and outbox_pending, right after the last pass (no VACUUM). Candles of snapshots are bucketed by collected_at, the database's real clock, so a simulated day's snapshots share the few real hours the run took: hourly candles of hours without a sale are missing from both modes (at most 25 rows an item a day)"
	for _, r := range []struct {
		mode, how string
		res       dayResult
	}{{config.HistoryEvery, how + "; " + size, every}, {config.HistoryChanges, "the same simulated day, plan, instants and measures as the row above, history.mode changes", changes}} {
		c := r.res.end
		rep.add(fmt.Sprintf("History stored, history.mode %s, %d items × %s", r.mode, d.items, simulated),
			fmt.Sprintf("%d snapshot, %d outbox, %d sales, %d candle rows; %.2f MB", c.snapshots, c.outbox, c.sales, c.candles, mb(c.bytes)), r.how)
	}
	ratios := func(ev, ch dayCounts) string {
		return fmt.Sprintf("%.3f× / %.3f× / %.3f× (target ≤ 0.3×)", ratioOf(ch.snapshots+ch.outbox, ev.snapshots+ev.outbox), ratioOf(ch.rows(), ev.rows()), ratioOf(ch.bytes, ev.bytes))
	}
	ev, ch := every.end, changes.end
	evDay, chDay := ev.minus(every.first), ch.minus(changes.first)
	rep.add(fmt.Sprintf("History changes / every, the whole %s: snapshot + outbox rows, all rows, bytes", simulated), ratios(ev, ch),
		"target ≤ 0.3× in rows and bytes. The two rows above; all rows = snapshots + outbox + sales + candles (sales are the same in both modes, candles nearly so). Includes the first pass, where both modes write every item and store its backlog of past sales")
	rep.add("History changes / every, after the first pass: snapshot + outbox rows, all rows, bytes", ratios(evDay, chDay),
		fmt.Sprintf("the same, counting what passes 2…%d added (rows and bytes after the last pass less after the first): a day of a collector that has already collected every item once", d.passes))
	perDay := func(c dayCounts) string {
		f := float64(24*time.Hour/histDayStep) / float64(d.passes-1) * float64(dayScaleItems) / float64(d.items)
		return fmt.Sprintf("%s rows (%s snapshots), %.2f GB", approx(int64(float64(c.rows())*f)), approx(int64(float64(c.snapshots)*f)), float64(c.bytes)*f/(1<<30))
	}
	rep.add(fmt.Sprintf("History per simulated day per %s items, every / changes (scaled)", count(dayScaleItems)),
		fmt.Sprintf("%s / %s", perDay(evDay), perDay(chDay)),
		fmt.Sprintf("scaled linearly, not measured at that size: what passes 2…%d added × %d passes a day / %d × %d items / %d (rows and bytes per item scale with the items; the tiers are those of the collected items)", d.passes, 24*time.Hour/histDayStep, d.passes-1, dayScaleItems, d.items))
	rc := changes.reasons
	steady := changes.collected - rc["first"]
	rep.add("Collections that saw a change (history.mode changes)",
		fmt.Sprintf("%.1f %% (%d change, %d heartbeat, %d unchanged of %d after the first; %d first); predicted %.1f %% (%.1f %% over the %s planned items)", 100*ratioOf(rc["change"], steady),
			rc["change"], rc["heartbeat"], steady-rc["change"]-rc["heartbeat"], steady, rc["first"], 100*scheduleChangeShare(plan, ids, due), 100*plan.changeShare, count(d.planned)),
		"snapshot rows by reason in the changes-mode database; unchanged = collections (dispatcher pass summaries) − snapshots. Predicted: the simulator's own per-item rates, the mean of 1 − e^(−(λ+σ)·t) over the collections after the first, t the time since the item's previous collection; over the planned catalog, the mean per collection at each item's tier interval (how far the collected items stand for it)")
	rep.add("Rebuilt series differences (changes vs every)", fmt.Sprintf("%d of %d collection instants (%d with a sale at the settle boundary counted one collection apart)", diffs, instants, moved),
		"target 0 (the section fails otherwise). For each item and each pass that collected it, the every-mode snapshot of that pass against the latest changes-mode snapshot at or before it in its own database (passes told apart by the database time taken before each pass): lowest, median, weighted and API average price, listing count, quantity, truncated flag equal, and new sales equal (0 when the changes-mode snapshot is from an earlier pass)")
	if diffs > 0 {
		return fmt.Errorf("the series rebuilt from history.mode changes differs from history.mode every at %d of %d collection instants", diffs, instants)
	}
	if rc["heartbeat"] == 0 {
		return fmt.Errorf("history.mode changes wrote no heartbeat snapshot in %s simulated", simulated)
	}
	return nil
}

// daySchedule is the items (indexes into ids) each pass collects: every item at pass 0, then
// each at the passes on its planned tier's phase grid, at least half an interval after its last
// collection, as tiers.NextSlot schedules it.
func daySchedule(ids []string, plan dayPlan, passes int) [][]int {
	due := make([][]int, passes)
	for i, id := range ids {
		iv, ok := plan.tiers[id].Interval()
		if !ok {
			continue // DORMANT: never collected on schedule
		}
		n := int(iv / histDayStep)
		phase := int(tiers.Phase(id, iv) / histDayStep)
		for k := 0; k < passes; {
			due[k] = append(due[k], i)
			k += (n + 1) / 2
			for (k-phase)%n != 0 {
				k++
			}
		}
	}
	return due
}

func ratioOf(a, b int64) float64 { return float64(a) / float64(max(b, 1)) }

// scheduleChangeShare is the expected share of the scheduled collections after each item's
// first that see a listing change or a sale, from the simulator's true rates.
func scheduleChangeShare(plan dayPlan, ids []string, due [][]int) float64 {
	last := make([]int, len(ids))
	var sum float64
	var n int
	for k, p := range due {
		for _, i := range p {
			if k > 0 {
				tr := plan.truths[ids[i]]
				sum += -math.Expm1(-(tr.ChangesPerHour + tr.SalesPerHour) / 3600 * float64(k-last[i]) * histDayStep.Seconds())
				n++
			}
			last[i] = k
		}
	}
	return sum / float64(max(n, 1))
}

// realisticChangeShare is the expected share of collections every `every` that see a listing
// change or a sale, from the simulator's true rates of its first n items.
func realisticChangeShare(n int, seed int64, every time.Duration) float64 {
	m, err := market.New(market.Realistic, n, seed)
	if err != nil {
		panic(err) // market.Realistic is a known kind
	}
	var sum float64
	for _, tr := range m.Truths() {
		sum += 1 - math.Exp(-(tr.ChangesPerHour+tr.SalesPerHour)/3600*every.Seconds())
	}
	return sum / float64(n)
}

// changedShare says whether an item falls in the first share of a stable hash of its id.
func changedShare(itemID string, share float64) bool {
	h := fnv.New32a()
	_, _ = h.Write([]byte(itemID))
	return float64(h.Sum32())/(1<<32) < share
}

// historyDayRun collects the schedule due (item indexes per pass) of ids at their planned
// tiers, in a fresh database with the given history.mode, the simulated clock at start + k
// steps for pass k.
func historyDayRun(ctx context.Context, e *env, ids []string, plan dayPlan, due [][]int, start time.Time, mode string) (dayResult, error) {
	res := dayResult{reasons: map[string]int64{}, series: map[string][]dayState{}}
	db := "bench_history_" + mode
	u, err := e.freshDB(ctx, db, true)
	if err != nil {
		return res, err
	}
	defer e.dropDB(ctx, db)
	pool, err := openPool(ctx, u, 8)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	var now atomic.Int64
	now.Store(start.Unix())
	rs, err := newRealisticSim(len(plan.ids), histDaySeed, &now)
	if err != nil {
		return res, err
	}
	defer rs.close()
	tierOf := make([]string, len(ids))
	for i, id := range ids {
		tierOf[i] = string(plan.tiers[id])
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		SELECT id, 'item ' || id, tier, now() FROM unnest($1::text[], $2::text[]) AS u(id, tier)`, ids, tierOf); err != nil {
		return res, err
	}
	cfg := config.Default()
	cfg.History.Mode = mode
	dc := dispatcher.FromConfig(cfg)
	dc.BatchSize, dc.Concurrency, dc.Owner, dc.ShadowFraction = 500, 16, db, 0
	disp, err := newDispatcher(pool, rs.client, dc)
	if err != nil {
		return res, err
	}
	passAt := make([]time.Time, len(due)) // database time before each pass
	last := make([]int, len(ids))         // the pass that last collected each item
	isDue := make([]bool, len(ids))
	gapMs := make([]int64, len(ids))
	for k, items := range due {
		now.Store(start.Add(time.Duration(k) * histDayStep).Unix())
		if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&passAt[k]); err != nil {
			return res, err
		}
		clear(isDue)
		for _, i := range items {
			isDue[i], gapMs[i] = true, int64(k-last[i])*histDayStep.Milliseconds()
			last[i] = k
		}
		// The due items come due in the same order in both runs (so packed calls group alike),
		// the others not before the run ends, and the last collection and snapshot lie as far
		// back as the market moved since them.
		shift := time.Duration(0)
		if k > 0 {
			shift = histDayStep - passAt[k].Sub(passAt[k-1])
		}
		if _, err := pool.Exec(ctx, `
			UPDATE tracked_items t SET
			    next_collect_at = CASE WHEN u.due THEN $3::timestamptz - interval '1 hour' + u.ord * interval '1 millisecond'
			                           ELSE $3::timestamptz + interval '1 day' END,
			    last_collected_at = CASE WHEN u.due AND t.last_collected_at IS NOT NULL THEN $3::timestamptz - u.gap * interval '1 millisecond'
			                             ELSE t.last_collected_at END,
			    last_snapshot_at = t.last_snapshot_at - $5 * interval '1 microsecond'
			FROM unnest($1::text[], $2::bool[], $4::bigint[]) WITH ORDINALITY AS u(id, due, gap, ord) WHERE t.item_id = u.id`,
			ids, isDue, passAt[k], gapMs, shift.Microseconds()); err != nil {
			return res, err
		}
		tp := time.Now()
		s, err := disp.RunOnce(ctx)
		if err != nil {
			return res, err
		}
		res.inPasses += time.Since(tp)
		if s.Collected != len(items) {
			return res, fmt.Errorf("pass %d collected %d of %d due: %s", k, s.Collected, len(items), s)
		}
		res.collected += int64(s.Collected)
		if k == 0 {
			if res.first, err = historyCounts(ctx, pool); err != nil {
				return res, err
			}
		}
	}
	if res.end, err = historyCounts(ctx, pool); err != nil {
		return res, err
	}
	return res, readDaySeries(ctx, pool, passAt, &res)
}

func historyCounts(ctx context.Context, pool *pgxpool.Pool) (dayCounts, error) {
	var c dayCounts
	err := pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM auction_snapshots), (SELECT count(*) FROM auction_sales),
		       (SELECT count(*) FROM price_candles), (SELECT count(*) FROM outbox),
		       (SELECT coalesce(sum(pg_total_relation_size(p.relid)), 0)::bigint
		        FROM unnest($1::regclass[]) AS t, pg_partition_tree(t) AS p WHERE p.isleaf)`, histTables).
		Scan(&c.snapshots, &c.sales, &c.candles, &c.outbox, &c.bytes)
	if err != nil {
		return c, fmt.Errorf("history counts: %w", err)
	}
	return c, nil
}

// readDaySeries reads every stored snapshot with the pass it was collected in, and the
// snapshot count by reason.
func readDaySeries(ctx context.Context, pool *pgxpool.Pool, passAt []time.Time, res *dayResult) error {
	rows, err := pool.Query(ctx, `
		SELECT item_id, collected_at, reason, sales_count,
		       format('%s/%s/%s/%s/%s/%s/%s', lowest_unit_price, median_unit_price, weighted_unit_price, api_average_price,
		              listing_count, listing_quantity, listings_truncated)
		FROM auction_snapshots ORDER BY item_id, collected_at`)
	if err != nil {
		return fmt.Errorf("read snapshots: %w", err)
	}
	var item, reason string
	var at time.Time
	var st dayState
	_, err = pgx.ForEachRow(rows, []any{&item, &at, &reason, &st.sales, &st.figures}, func() error {
		// The pass is the last one that began at or before the collection.
		k, found := slices.BinarySearchFunc(passAt, at, func(p, t time.Time) int { return p.Compare(t) })
		if !found {
			k--
		}
		if k < 0 {
			return fmt.Errorf("snapshot of %s at %s before the first pass", item, at)
		}
		st.pass = k
		res.series[item] = append(res.series[item], st)
		res.reasons[reason]++
		return nil
	})
	if err != nil {
		return fmt.Errorf("read snapshots: %w", err)
	}
	return nil
}

// rebuildDiffs compares every every-mode snapshot (one per item and pass) with the state the
// change-only rows give at that pass: the latest changes-mode snapshot at or before it, its
// listing figures equal, and its new sales (0 when it is from an earlier pass) equal.
//
// A sale in the seconds history.SalesSettle holds back can fall to one collection in one run
// and to the next in the other: the settle point is the provider's answer time, which the
// harness's simulated clock gives in whole seconds while the runs' real timing differs. Such a
// sale moved to the item's next collection is counted in moved, not as a difference; sales
// still owed after that next collection, or at the end, are differences.
func rebuildDiffs(every, changes map[string][]dayState) (instants, diffs, moved int) {
	for item, evs := range every {
		ch := changes[item]
		j := -1
		var owed int32 // sales the changes-mode series stored ahead of the every-mode one
		for _, ev := range evs {
			instants++
			for j+1 < len(ch) && ch[j+1].pass <= ev.pass {
				j++
			}
			if j < 0 || ch[j].figures != ev.figures {
				diffs++
				continue
			}
			var sales int32
			if ch[j].pass == ev.pass {
				sales = ch[j].sales
			}
			before := owed
			owed += sales - ev.sales
			switch {
			case sales == ev.sales && owed == 0:
			case before != 0 && owed != 0:
				diffs++ // owed past the next collection
			default:
				moved++
			}
		}
		if owed != 0 {
			diffs++
		}
	}
	return instants, diffs, moved
}
