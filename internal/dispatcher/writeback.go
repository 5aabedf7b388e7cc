package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/tiers"
)

// writer persists results as they arrive, grouping whatever is waiting (up to FlushSize) into
// one transaction: one item at a time when the provider is slow, large groups when it is fast.
type writer struct {
	d       *Dispatcher
	results chan result
	done    chan struct{}
	stats   writerStats
}

type writerStats struct {
	collected, failed, fenced int
	err                       error
}

func (d *Dispatcher) startWriter(ctx context.Context, tm *timings) *writer {
	w := &writer{d: d, results: make(chan result, 2*d.cfg.FlushSize), done: make(chan struct{})}
	// Results already fetched are written even when ctx is cancelled (shutdown): the work is
	// done and the leases are ours.
	wctx := context.WithoutCancel(ctx)
	go func() {
		defer close(w.done)
		buf := make([]result, 0, d.cfg.FlushSize)
		for r := range w.results {
			buf = append(buf[:0], r)
		drain:
			for len(buf) < d.cfg.FlushSize {
				select {
				case r, ok := <-w.results:
					if !ok {
						break drain
					}
					buf = append(buf, r)
				default:
					break drain
				}
			}
			t0 := time.Now()
			w.flush(wctx, buf)
			tm.add(&tm.persist, time.Since(t0))
		}
	}()
	return w
}

// finish closes the queue and waits until everything in it is written.
func (w *writer) finish() writerStats {
	close(w.results)
	<-w.done
	return w.stats
}

func (w *writer) flush(ctx context.Context, buf []result) {
	t0 := time.Now()
	fencedIDs, unwritten, err := w.store(ctx, buf)
	if err != nil {
		err = store.ExplainPooler(err)
		// Hand them back at once so another pass (or worker) retries them now; if even that
		// fails their leases expire. Nothing is lost either way.
		released, rerr := w.release(ctx, buf, unwritten)
		w.d.log.Error("write-back failed; items handed back for another attempt",
			zap.Strings("item_ids", unwritten), zap.Int64("released", released), zap.Error(err), zap.NamedError("release_error", rerr))
		w.stats.err = errors.Join(w.stats.err, err)
	}
	skip := map[string]bool{}
	for _, id := range fencedIDs {
		skip[id] = true
	}
	for _, id := range unwritten {
		skip[id] = true
	}
	var collected, failed int
	for _, r := range buf {
		switch {
		case skip[r.claim.ItemID]:
		case r.err == nil:
			collected++
			if r.salesGap {
				w.d.log.Warn("sales lost since the previous collection: a full page of only newer sales",
					zap.String("item_id", r.claim.ItemID))
				w.d.cfg.Observer.SalesGap(r.claim)
			}
		default:
			failed++
			w.d.log.Warn("item collection failed; rescheduled by tier",
				zap.String("item_id", r.claim.ItemID), zap.String("outcome", r.outcome), zap.Error(r.err))
		}
	}
	w.stats.collected += collected
	w.stats.failed += failed
	w.d.cfg.Observer.Written(collected, failed, len(fencedIDs), time.Since(t0))
	if len(fencedIDs) > 0 {
		w.stats.fenced += len(fencedIDs)
		w.d.log.Warn("write-back fenced out: the lease passed to another worker, nothing written",
			zap.Strings("item_ids", fencedIDs))
	}
}

// store writes buf back so that no item strands its batch-mates: a transient failure is
// retried (writeRetrying), and a group PostgreSQL refuses on its data is split in halves until
// the refused item is alone; that item is then rescheduled as failed with the error (buf is
// updated in place). It returns the fenced items, and the items it could not write at all
// with the error why (their leases then expire).
func (w *writer) store(ctx context.Context, buf []result) (fenced, unwritten []string, err error) {
	ws, err := w.writeRetrying(ctx, buf)
	switch {
	case err == nil:
		return ws.fenced, nil, nil
	case store.Transient(err), store.PoolerMismatch(err): // not the data: splitting cannot help
		return nil, itemIDs(buf), err
	case len(buf) > 1:
		h := len(buf) / 2
		f1, u1, err1 := w.store(ctx, buf[:h])
		f2, u2, err2 := w.store(ctx, buf[h:])
		return append(f1, f2...), append(u1, u2...), errors.Join(err1, err2)
	case buf[0].err != nil:
		return nil, itemIDs(buf), err // not even its failure could be recorded
	}
	r := &buf[0]
	w.d.log.Error("write-back refused this item's data; rescheduled as failed",
		zap.String("item_id", r.claim.ItemID), zap.Error(err))
	*r = result{claim: r.claim, at: r.at, outcome: "write_refused", err: fmt.Errorf("write-back refused: %w", err)}
	return w.store(ctx, buf)
}

// writeAttempts bounds the retries of one transiently failing write-back.
const writeAttempts = 8

// writeBackoff spaces write-back retries after transient database errors.
var writeBackoff = backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// writeRetrying runs writeBack, retrying a transient failure (connection lost, serialization
// failure, deadlock) with back-off. Before each retry it renews the group's leases, so the
// results still apply; once none of them is ours any more it stops, as nothing could apply.
func (w *writer) writeRetrying(ctx context.Context, buf []result) (writeStats, error) {
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ws, err := writeBack(actx, w.d.pool, buf)
		cancel()
		if err == nil || !store.Transient(err) || attempt == writeAttempts {
			return ws, err
		}
		wait := writeBackoff.Delay(attempt)
		w.d.log.Warn("write-back failed; retrying", zap.Int("items", len(buf)), zap.Int("attempt", attempt),
			zap.Duration("backoff_seconds", wait), zap.Error(err))
		if !backoff.Sleep(ctx, wait) {
			return ws, err
		}
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		held, rerr := renewLeases(rctx, w.d.pool, claimsOf(buf), w.d.cfg.Lease)
		rcancel()
		if rerr == nil && held == 0 {
			return ws, fmt.Errorf("%w (and every lease of the group has passed to another worker)", err)
		}
	}
}

// release hands back the leases of the items named in ids.
func (w *writer) release(ctx context.Context, buf []result, ids []string) (int64, error) {
	want := map[string]bool{}
	for _, id := range ids {
		want[id] = true
	}
	var cs []Claim
	for _, r := range buf {
		if want[r.claim.ItemID] {
			cs = append(cs, r.claim)
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return releaseLeases(rctx, w.d.pool, cs)
}

func itemIDs(rs []result) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.claim.ItemID
	}
	return ids
}

func claimsOf(rs []result) []Claim {
	cs := make([]Claim, len(rs))
	for i, r := range rs {
		cs[i] = r.claim
	}
	return cs
}

type writeStats struct {
	fenced []string // items whose lease had passed to another worker: nothing written
}

// writeBack stores a group of results in one short transaction, every statement fenced by the
// lease token: the change and sales counts of the collected items first (they compare with the
// item's row as the last collection left it, and need the token the reschedule clears), then
// the reschedule (it tells which leases are still ours), then sales, snapshots and outbox rows
// for those items only. Success or failure, every item that is still ours is rescheduled by its
// tier, so nothing can stay due forever.
func writeBack(ctx context.Context, pool *pgxpool.Pool, results []result) (writeStats, error) {
	var ws writeStats
	n := len(results)
	ids := make([]string, n)
	tokens := make([]pgtype.UUID, n)
	tierNames := make([]string, n)
	nextAt := make([]pgtype.Timestamptz, n)
	attemptAt := make([]time.Time, n)
	oks := make([]bool, n)
	outcomes := make([]string, n)
	errTexts := make([]*string, n)
	lastSale := make([]*time.Time, n)
	for i, r := range results {
		for j := range r.sales {
			if lastSale[i] == nil || r.sales[j].SoldAt.After(*lastSale[i]) {
				lastSale[i] = &r.sales[j].SoldAt
			}
		}
		ids[i], tokens[i], tierNames[i], attemptAt[i] = r.claim.ItemID, r.claim.Token, string(r.claim.Tier), r.at
		if next, ok := tiers.NextDue(r.claim.ItemID, r.claim.Tier, r.at); ok {
			nextAt[i] = pgtype.Timestamptz{Time: next, Valid: true}
		}
		oks[i] = r.err == nil
		outcomes[i] = r.outcome
		if r.err != nil {
			s := provider.Clean(r.err.Error(), provider.MaxErrorRunes)
			errTexts[i] = &s
		}
	}

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		collected := slices.DeleteFunc(slices.Clone(results), func(r result) bool { return r.err != nil })
		if err := observeChanges(ctx, tx, collected); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, RescheduleSQL,
			ids, tokens, tierNames, nextAt, attemptAt, oks, outcomes, errTexts, lastSale)
		if err != nil {
			return fmt.Errorf("reschedule: %w", err)
		}
		live, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("reschedule: %w", err)
		}
		liveSet := make(map[string]bool, len(live))
		for _, id := range live {
			liveSet[id] = true
		}
		ws.fenced = ws.fenced[:0]
		var ok []result
		for _, r := range results {
			switch {
			case !liveSet[r.claim.ItemID]:
				ws.fenced = append(ws.fenced, r.claim.ItemID)
			case r.err == nil:
				ok = append(ok, r)
			}
		}
		if len(ok) == 0 {
			return nil
		}
		agg, err := insertSales(ctx, tx, ok)
		if err != nil {
			return err
		}
		events, err := insertSnapshots(ctx, tx, ok, agg)
		if err != nil {
			return err
		}
		return outbox.EnqueueSnapshots(ctx, tx, events)
	})
	if err != nil {
		return writeStats{}, fmt.Errorf("write back %d items: %w", n, err)
	}
	return ws, nil
}

// observeChangesSQL adds one interval to each collected item's decayed counts (the same
// arithmetic as tierplan.Observations.Decay then Observe): the interval since its last
// successful collection, whether the listings (lowest unit price, count, quantity) changed or
// new sales arrived in it, and the new sales. The first collection only records the listings.
// Fenced by the lease token; it runs before the reschedule clears it.
const observeChangesSQL = `
WITH o AS (
	SELECT u.item_id, u.token, u.lowest, u.cnt, u.qty, u.new_sales, u.gap,
	       CASE WHEN obs THEN exp(-secs / u.win) ELSE 1 END AS f,
	       CASE WHEN obs THEN 1 ELSE 0 END AS n,
	       CASE WHEN obs AND (t.seen_lowest_price IS DISTINCT FROM u.lowest OR t.seen_listing_count IS DISTINCT FROM u.cnt
	                          OR t.seen_listing_quantity IS DISTINCT FROM u.qty OR u.new_sales > 0) THEN 1 ELSE 0 END AS x,
	       CASE WHEN obs THEN secs ELSE 0 END AS secs
	FROM unnest($1::text[], $2::uuid[], $3::timestamptz[], $4::bigint[], $5::int[], $6::bigint[], $7::int[], $8::bool[], $9::float8[])
	     AS u(item_id, token, at, lowest, cnt, qty, new_sales, gap, win)
	JOIN tracked_items t ON t.item_id = u.item_id AND t.lease_token = u.token
	CROSS JOIN LATERAL (SELECT extract(epoch FROM u.at - t.last_collected_at)::float8 AS secs) s
	CROSS JOIN LATERAL (SELECT t.seen_listing_count IS NOT NULL AND s.secs > 0 AS obs) b
)
UPDATE tracked_items t
SET est_collections = t.est_collections * o.f + o.n,
    est_changes = t.est_changes * o.f + o.x,
    est_changed_seconds = t.est_changed_seconds * o.f + o.x * o.secs,
    est_unchanged_seconds = t.est_unchanged_seconds * o.f + (o.n - o.x) * o.secs,
    est_sales = t.est_sales * o.f + o.n * o.new_sales,
    seen_lowest_price = o.lowest, seen_listing_count = o.cnt, seen_listing_quantity = o.qty,
    sales_gaps = t.sales_gaps + o.gap::int
FROM o
WHERE t.item_id = o.item_id AND t.lease_token = o.token`

// observeChanges updates the change and sales counts of the collected items in ok.
func observeChanges(ctx context.Context, tx pgx.Tx, ok []result) error {
	n := len(ok)
	ids := make([]string, n)
	tokens := make([]pgtype.UUID, n)
	at := make([]time.Time, n)
	lowest := make([]*int64, n)
	counts := make([]int32, n)
	qty := make([]int64, n)
	newSales := make([]int32, n)
	gaps := make([]bool, n)
	windows := make([]float64, n)
	for i, r := range ok {
		ids[i], tokens[i], at[i] = r.claim.ItemID, r.claim.Token, r.at
		lowest[i], counts[i], qty[i] = r.listings.Lowest, int32(r.listings.Count), r.listings.Quantity
		for _, s := range r.sales {
			// Sales of the stored second itself may be known; only later seconds are surely new.
			if r.claim.LastSaleAt == nil || s.SoldAt.After(*r.claim.LastSaleAt) {
				newSales[i]++
			}
		}
		gaps[i], windows[i] = r.salesGap, r.window.Seconds()
	}
	if _, err := tx.Exec(ctx, observeChangesSQL, ids, tokens, at, lowest, counts, qty, newSales, gaps, windows); err != nil {
		return fmt.Errorf("observe changes: %w", err)
	}
	return nil
}

// RescheduleSQL is the fenced write-back of a batch: each item whose lease token still matches
// gets its next slot and outcome, and its lease is cleared; it returns the items it matched.
// If the tier changed while the item was leased, whoever changed it also set the new schedule;
// that is kept rather than the slot computed for the old tier. Exported for the benchmark's
// raw-SQL ceiling.
const RescheduleSQL = `
UPDATE tracked_items t
SET next_collect_at = CASE WHEN t.collection_tier = u.tier THEN u.next_at ELSE t.next_collect_at END,
    lease_expires_at = NULL, lease_token = NULL, leased_by = NULL,
    last_attempt_at = u.attempt_at,
    last_collected_at = CASE WHEN u.ok THEN u.attempt_at ELSE t.last_collected_at END,
    last_outcome = u.outcome,
    failure_streak = CASE WHEN u.ok THEN 0 ELSE t.failure_streak + 1 END,
    last_error = u.err,
    last_sale_at = greatest(t.last_sale_at, u.last_sale),
    updated_at = now()
FROM unnest($1::text[], $2::uuid[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::bool[], $7::text[], $8::text[], $9::timestamptz[])
     AS u(item_id, token, tier, next_at, attempt_at, ok, outcome, err, last_sale)
WHERE t.item_id = u.item_id AND t.lease_token = u.token
RETURNING t.item_id`

type salesAgg struct {
	count    int
	quantity int64
	value    float64
}

// insertSales stores sales not seen before; what the insert returns is exactly the new ones,
// which is what the snapshot reports.
func insertSales(ctx context.Context, tx pgx.Tx, ok []result) (map[string]*salesAgg, error) {
	var ids []string
	var soldAt []time.Time
	var seqs []int32
	var qty, unit, total []int64
	for _, r := range ok {
		for _, s := range r.sales {
			ids = append(ids, r.claim.ItemID)
			soldAt = append(soldAt, s.SoldAt)
			seqs = append(seqs, s.Seq)
			qty = append(qty, s.Quantity)
			unit = append(unit, s.UnitPrice)
			total = append(total, s.Total)
		}
	}
	agg := map[string]*salesAgg{}
	if len(ids) == 0 {
		return agg, nil
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO auction_sales (item_id, sold_at, seq, quantity, unit_price, total_price)
		SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[])
		ON CONFLICT (item_id, sold_at, seq) DO NOTHING
		RETURNING item_id, quantity, unit_price`, ids, soldAt, seqs, qty, unit, total)
	if err != nil {
		return nil, fmt.Errorf("insert sales: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var q, u int64
		if err := rows.Scan(&id, &q, &u); err != nil {
			return nil, fmt.Errorf("insert sales: %w", err)
		}
		a := agg[id]
		if a == nil {
			a = &salesAgg{}
			agg[id] = a
		}
		a.count++
		a.quantity += q
		a.value += float64(q) * float64(u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert sales: %w", err)
	}
	return agg, nil
}

func insertSnapshots(ctx context.Context, tx pgx.Tx, ok []result, agg map[string]*salesAgg) ([]outbox.SnapshotEvent, error) {
	n := len(ok)
	ids := make([]string, n)
	tokens := make([]pgtype.UUID, n)
	at := make([]time.Time, n)
	tierNames := make([]string, n)
	counts := make([]int32, n)
	quantities := make([]int64, n)
	lowest := make([]*int64, n)
	median := make([]*int64, n)
	weighted := make([]*float64, n)
	apiAvg := make([]*int64, n)
	salesCount := make([]int32, n)
	salesQty := make([]int64, n)
	vwap := make([]*float64, n)
	truncated := make([]bool, n)
	packed := make([]bool, n)
	events := make([]outbox.SnapshotEvent, n)
	byID := make(map[string]int, n)
	for i, r := range ok {
		l := r.listings
		ids[i], tokens[i], at[i], tierNames[i] = r.claim.ItemID, r.claim.Token, r.at, string(r.claim.Tier)
		counts[i], quantities[i] = int32(l.Count), l.Quantity
		lowest[i], median[i], weighted[i], apiAvg[i] = l.Lowest, l.Median, l.Weighted, l.APIAverage
		truncated[i], packed[i] = l.Truncated, r.packed
		ev := outbox.SnapshotEvent{
			ItemID: r.claim.ItemID, ItemName: r.claim.ItemName, Tier: string(r.claim.Tier),
			CollectedAt: r.at.UTC(), ListingCount: l.Count, ListingQuantity: l.Quantity,
			LowestUnitPrice: l.Lowest, MedianUnitPrice: l.Median, WeightedUnitPrice: l.Weighted,
			APIAveragePrice: l.APIAverage, ListingsTruncated: l.Truncated, Packed: r.packed,
			SalesGap: r.salesGap,
		}
		if a := agg[r.claim.ItemID]; a != nil && a.quantity > 0 {
			v := a.value / float64(a.quantity)
			salesCount[i], salesQty[i], vwap[i] = int32(a.count), a.quantity, &v
			ev.SalesCount, ev.SalesQuantity, ev.SalesVWAP = a.count, a.quantity, &v
		}
		events[i] = ev
		byID[r.claim.ItemID] = i
	}
	rows, err := tx.Query(ctx, SnapshotSQL,
		ids, tokens, at, tierNames, counts, quantities, lowest, median, weighted, apiAvg, salesCount, salesQty, vwap,
		truncated, packed)
	if err != nil {
		return nil, fmt.Errorf("insert snapshots: %w", err)
	}
	inserted, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.SnapshotEvent, error) {
		var id int64
		var item string
		if err := row.Scan(&id, &item); err != nil {
			return outbox.SnapshotEvent{}, err
		}
		ev := events[byID[item]]
		ev.SnapshotID = id
		return ev, nil
	})
	if err != nil {
		return nil, fmt.Errorf("insert snapshots: %w", err)
	}
	return inserted, nil
}

// SnapshotSQL stores a batch's snapshots, once per claim; it returns the new snapshot ids.
// Exported for the benchmark's raw-SQL ceiling.
const SnapshotSQL = `
INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, listing_count, listing_quantity,
	lowest_unit_price, median_unit_price, weighted_unit_price, api_average_price,
	sales_count, sales_quantity, sales_vwap, listings_truncated, packed)
SELECT * FROM unnest($1::text[], $2::uuid[], $3::timestamptz[], $4::text[], $5::int[], $6::bigint[],
	$7::bigint[], $8::bigint[], $9::float8[], $10::bigint[], $11::int[], $12::bigint[], $13::float8[],
	$14::bool[], $15::bool[])
ON CONFLICT (claim_token) DO NOTHING
RETURNING snapshot_id, item_id`
