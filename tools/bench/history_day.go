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
)

// histDaySize is the simulated stretch both history modes collect: items, each collected at
// every pass, passes histDayStep of simulated time apart.
type histDaySize struct{ items, passes int }

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
	reasons    map[string]int64
	series     map[string][]dayState // item → its snapshots in pass order
}

// historyDay collects the same simulated stretch of the realistic market twice, into fresh
// databases, once with history.mode every and once with changes, and compares what each
// stored, and the series rebuilt from the change-only rows with every collection's.
func historyDay(ctx context.Context, e *env, d histDaySize, rep *report) error {
	start := time.Now().Add(-time.Duration(d.passes) * histDayStep).Truncate(time.Minute)
	every, err := historyDayRun(ctx, e, d, start, config.HistoryEvery)
	if err != nil {
		return fmt.Errorf("history.mode every: %w", err)
	}
	changes, err := historyDayRun(ctx, e, d, start, config.HistoryChanges)
	if err != nil {
		return fmt.Errorf("history.mode changes: %w", err)
	}
	instants, diffs := rebuildDiffs(every.series, changes.series)
	if want := int64(d.items * d.passes); every.collected != want || changes.collected != want || int64(instants) != want {
		return fmt.Errorf("collections every %d, changes %d, every-mode snapshots %d: want %d each", every.collected, changes.collected, instants, want)
	}
	simulated := fmt.Sprintf("%g h", (time.Duration(d.passes) * histDayStep).Hours())
	how := fmt.Sprintf("in-process collect-due passes (dispatcher.FromConfig(config.Default()) with history.mode set, batch 500, concurrency 16, collect.pack_* defaults, shadow checks off) over %d items of `collector sim --market realistic` (seed %d), every item HOT_1M and collected at every pass (not the default budget plan's tiers: every item at the fastest tier, the issue's 20,000-item case), %d passes %s of simulated time apart (%s simulated); before each pass the database's last collection and last snapshot times are moved back by the simulated step less the real time that passed, so intervals and the 1 h heartbeat run on market time; the same simulated instants for both modes, each in a fresh database",
		d.items, histDaySeed, d.passes, histDayStep.String(), simulated)
	size := "rows: count(*); bytes: pg_total_relation_size (table, TOAST, indexes) summed over the leaf partitions (pg_partition_tree) of auction_snapshots and auction_sales, plus price_candles, outbox and outbox_pending, right after the last pass (no VACUUM)"
	for _, r := range []struct {
		mode, how string
		res       dayResult
	}{{config.HistoryEvery, how + "; " + size, every}, {config.HistoryChanges, "the same simulated stretch, instants and measures as the row above, history.mode changes", changes}} {
		c := r.res.end
		rep.add(fmt.Sprintf("History stored, history.mode %s, %d items × %s", r.mode, d.items, simulated),
			fmt.Sprintf("%d snapshot, %d outbox, %d sales, %d candle rows; %.2f MB", c.snapshots, c.outbox, c.sales, c.candles, mb(c.bytes)), r.how)
	}
	ev, ch := every.end, changes.end
	rep.add("History changes / every: snapshot + outbox rows, all rows, bytes",
		fmt.Sprintf("%.3f× / %.3f× / %.3f×", ratioOf(ch.snapshots+ch.outbox, ev.snapshots+ev.outbox), ratioOf(ch.rows(), ev.rows()), ratioOf(ch.bytes, ev.bytes)),
		"target ≤ 0.3×. The two rows above; all rows = snapshots + outbox + sales + candles (sales are the same in both modes, candles nearly so). Includes the first pass, where both modes write every item and store its backlog of past sales (most of the sales rows of a short run, and their candles)")
	perDay := func(c dayCounts) string {
		f := float64(24*time.Hour/histDayStep) / float64(d.passes-1) * float64(dayScaleItems) / float64(d.items)
		return fmt.Sprintf("%s rows (%s snapshots), %.2f GB", approx(int64(float64(c.rows())*f)), approx(int64(float64(c.snapshots)*f)), float64(c.bytes)*f/(1<<30))
	}
	evDay, chDay := ev.minus(every.first), ch.minus(changes.first)
	rep.add(fmt.Sprintf("History per simulated day per %s items, every / changes", count(dayScaleItems)),
		fmt.Sprintf("%s / %s (%.3f× rows, %.3f× bytes)", perDay(evDay), perDay(chDay), ratioOf(chDay.rows(), evDay.rows()), ratioOf(chDay.bytes, evDay.bytes)),
		fmt.Sprintf("extrapolated linearly, not measured at that size: what passes 2…%d added (rows and bytes after the last pass less after the first) × %d passes a day / %d × %d items / %d", d.passes, 24*time.Hour/histDayStep, d.passes-1, dayScaleItems, d.items))
	rc := changes.reasons
	steady := changes.collected - rc["first"]
	rep.add("Collections that saw a change (history.mode changes)",
		fmt.Sprintf("%.1f %% (%d change, %d heartbeat, %d unchanged of %d after the first; %d first); predicted %.1f %%", 100*ratioOf(rc["change"], steady),
			rc["change"], rc["heartbeat"], steady-rc["change"]-rc["heartbeat"], steady, rc["first"], 100*realisticChangeShare(d.items, histDaySeed, histDayStep)),
		"snapshot rows by reason in the changes-mode database; unchanged = collections (dispatcher pass summaries) − snapshots. Predicted: the simulator's own per-item rates, mean of 1 − e^(−(λ+σ)·60 s) over the same items")
	rep.add("Rebuilt series differences (changes vs every)", fmt.Sprintf("%d of %d collection instants", diffs, instants),
		"target 0. For each item and pass k, the every-mode snapshot of pass k against the latest changes-mode snapshot at or before pass k in its own database (passes told apart by the database time taken before each pass): lowest, median, weighted and API average price, listing count, quantity, truncated flag equal, and new sales equal (0 when the changes-mode snapshot is from an earlier pass)")
	return nil
}

func ratioOf(a, b int64) float64 { return float64(a) / float64(max(b, 1)) }

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

func historyDayRun(ctx context.Context, e *env, d histDaySize, start time.Time, mode string) (dayResult, error) {
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
	rs, err := newRealisticSim(d.items, histDaySeed, &now)
	if err != nil {
		return res, err
	}
	defer rs.close()
	ids := rs.ids
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		SELECT id, 'item ' || id, 'HOT_1M', now() FROM unnest($1::text[]) AS id`, ids); err != nil {
		return res, err
	}
	cfg := config.Default()
	cfg.History.Mode = mode
	dc := dispatcher.FromConfig(cfg)
	dc.BatchSize, dc.Concurrency, dc.Owner, dc.ShadowFraction = 500, 16, db, 0
	disp, err := dispatcher.New(pool, rs.client, dc, nil)
	if err != nil {
		return res, err
	}
	passAt := make([]time.Time, d.passes) // database time before each pass
	for k := range d.passes {
		now.Store(start.Add(time.Duration(k) * histDayStep).Unix())
		if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&passAt[k]); err != nil {
			return res, err
		}
		// The items come due in the same order in both runs (so packed calls group alike), and
		// the last collection and snapshot lie as far back as the market moved since them.
		shift := time.Duration(0)
		if k > 0 {
			shift = histDayStep - passAt[k].Sub(passAt[k-1])
		}
		if _, err := pool.Exec(ctx, `
			UPDATE tracked_items t SET next_collect_at = $2::timestamptz - interval '1 hour' + u.ord * interval '1 millisecond',
			    last_collected_at = CASE WHEN t.last_collected_at IS NOT NULL THEN $2::timestamptz - $3 * interval '1 millisecond' END,
			    last_snapshot_at = t.last_snapshot_at - $4 * interval '1 microsecond'
			FROM unnest($1::text[]) WITH ORDINALITY AS u(id, ord) WHERE t.item_id = u.id`,
			ids, passAt[k], histDayStep.Milliseconds(), shift.Microseconds()); err != nil {
			return res, err
		}
		s, err := disp.RunOnce(ctx)
		if err != nil {
			return res, err
		}
		if s.Collected != d.items {
			return res, fmt.Errorf("pass %d collected %d of %d: %s", k, s.Collected, d.items, s)
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
// changes-mode series holds at that pass: its latest snapshot at or before it.
func rebuildDiffs(every, changes map[string][]dayState) (instants, diffs int) {
	for item, evs := range every {
		ch := changes[item]
		j := -1
		for _, ev := range evs {
			instants++
			for j+1 < len(ch) && ch[j+1].pass <= ev.pass {
				j++
			}
			switch {
			case j < 0:
				diffs++
			case ch[j].pass == ev.pass && (ch[j].figures != ev.figures || ch[j].sales != ev.sales):
				diffs++
			case ch[j].pass < ev.pass && (ch[j].figures != ev.figures || ev.sales != 0):
				diffs++
			}
		}
	}
	return instants, diffs
}
