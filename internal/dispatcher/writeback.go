package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/tiers"
)

// writer persists results as they arrive, grouping whatever is waiting (up to FlushSize) into
// one transaction: one item at a time when the provider is slow, large groups when it is fast.
// writers transactions run at once: while one waits for its commit to reach the disk the other
// works (one alone left the database idle half the time at a million items: 0.66x of the same
// statements driven two at a time); the items of two groups never overlap, so they never wait
// on each other's locks.
type writer struct {
	d *Dispatcher
	// pass is the pass's context: once it ends (shutdown), a write the database refuses is no
	// longer retried until the leases expire, only writeAttempts times.
	pass    context.Context
	results chan result
	done    chan struct{}
	mu      sync.Mutex // guards stats
	stats   writerStats
}

const writers = 2

type writerStats struct {
	collected, failed, fenced int
	err                       error
}

func (d *Dispatcher) startWriter(ctx context.Context, tm *timings) *writer {
	w := &writer{d: d, pass: ctx, results: make(chan result, 2*d.cfg.FlushSize), done: make(chan struct{})}
	// Results already fetched are written even when ctx is cancelled (shutdown): the work is
	// done and the leases are ours.
	wctx := context.WithoutCancel(ctx)
	var wg sync.WaitGroup
	for range writers {
		wg.Go(func() { w.run(wctx, tm) })
	}
	go func() {
		wg.Wait()
		close(w.done)
	}()
	return w
}

// run writes groups of whatever results are waiting until the queue is closed and empty.
func (w *writer) run(ctx context.Context, tm *timings) {
	d := w.d
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
		w.flush(ctx, buf)
		tm.add(&tm.persist, time.Since(t0))
	}
}

// failed reports a write-back that failed for good (its items were handed back).
func (w *writer) failed() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats.err != nil
}

// finish closes the queue and waits until everything in it is written.
func (w *writer) finish() writerStats {
	close(w.results)
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}

func (w *writer) flush(ctx context.Context, buf []result) {
	t0 := time.Now()
	fencedIDs, unwritten, stored, err := w.store(ctx, buf)
	if err != nil {
		err = store.ExplainPooler(err)
		// Recorded before the items are handed back, so this pass sees it (failed) before it
		// could claim them again.
		w.mu.Lock()
		w.stats.err = errors.Join(w.stats.err, err)
		w.mu.Unlock()
		// Hand them back at once so another pass (or worker) retries them now; if even that
		// fails their leases expire. Nothing is lost either way.
		released, rerr := w.release(ctx, buf, unwritten)
		w.d.log.Error("write-back failed; items handed back for another attempt",
			zap.Strings("item_ids", unwritten), zap.Int64("released", released), zap.Error(err), zap.NamedError("release_error", rerr))
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
	w.mu.Lock()
	w.stats.collected += collected
	w.stats.failed += failed
	w.stats.fenced += len(fencedIDs)
	w.mu.Unlock()
	if len(stored) > 0 {
		reasons := map[history.Reason]int{}
		for _, st := range stored {
			reasons[st.Reason]++
		}
		w.d.cfg.Observer.Stored(reasons)
	}
	w.d.cfg.Observer.Written(collected, failed, len(fencedIDs), time.Since(t0))
	if len(fencedIDs) > 0 {
		w.d.log.Warn("write-back fenced out: the lease passed to another worker, nothing written",
			zap.Strings("item_ids", fencedIDs))
	}
}

// store writes buf back so that no item strands its batch-mates: a transient failure is
// retried (writeRetrying), and a group PostgreSQL refuses on its data is split in halves until
// the refused item is alone; that item is then rescheduled as failed with the error (buf is
// updated in place). It returns the fenced items, and the items it could not write at all
// with the error why (their leases then expire), and what history stored.
func (w *writer) store(ctx context.Context, buf []result) (fenced, unwritten []string, stored []history.Stored, err error) {
	ws, err := w.writeRetrying(ctx, buf)
	switch {
	case err == nil:
		return ws.fenced, nil, ws.stored, nil
	case store.Transient(err), store.RefusedCause(err) != "", store.PoolerMismatch(err): // not the data: splitting cannot help
		return nil, itemIDs(buf), nil, err
	case len(buf) > 1:
		h := len(buf) / 2
		f1, u1, s1, err1 := w.store(ctx, buf[:h])
		f2, u2, s2, err2 := w.store(ctx, buf[h:])
		return append(f1, f2...), append(u1, u2...), append(s1, s2...), errors.Join(err1, err2)
	case buf[0].err != nil:
		return nil, itemIDs(buf), nil, err // not even its failure could be recorded
	}
	r := &buf[0]
	w.d.log.Error("write-back refused this item's data; rescheduled as failed",
		zap.String("item_id", r.claim.ItemID), zap.Error(err))
	*r = result{claim: r.claim, at: r.at, outcome: "write_refused", err: fmt.Errorf("write-back refused: %w", err)}
	return w.store(ctx, buf)
}

// writeAttempts bounds the retries of one transiently failing write-back, and of one the
// database refuses once the pass is shutting down.
const writeAttempts = 8

// writeBackoff spaces write-back retries after transient database errors.
var writeBackoff = backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

// writeRetrying runs writeBack, retrying a transient failure (connection lost, serialization
// failure, deadlock) with back-off. Before each retry it renews the group's leases, so the
// results still apply; once none of them is ours any more it stops, as nothing could apply.
//
// A database that refuses writes (read-only after a failover, a standby, a full disk, a
// restart: store.RefusedCause) is retried for as long as the group's leases hold, not just
// writeAttempts times: the results were paid for with provider calls, and the database
// usually comes back within a lease. Past the leases it stops, and the items are collected
// again by whoever claims them next; a later write would be refused by the token fence anyway
// once that happened.
func (w *writer) writeRetrying(ctx context.Context, buf []result) (writeStats, error) {
	held := w.leaseEnd(buf)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ws, err := writeBack(actx, w.d.pool, w.d.cfg.History, buf)
		cancel()
		w.d.cfg.WriteHealth.Observe(err)
		if partition.IsMissing(err) && attempt < writeAttempts {
			// Partition upkeep stopped across a boundary: create what the rows need and write again.
			perr := w.d.partitions.EnsureCovering(ctx, collectedTimes(buf))
			w.d.cfg.WriteHealth.Observe(perr)
			if perr == nil {
				w.d.log.Warn("write-back found no history partition for its rows; created it (is partition upkeep running?)",
					zap.Int("items", len(buf)))
				continue
			}
			if !store.Transient(perr) {
				return ws, errors.Join(err, perr)
			}
			err = perr // another DDL held the parent past the lock timeout: back off and try again
		}
		if err == nil {
			return ws, nil
		}
		refused := store.RefusedCause(err)
		if !store.Transient(err) && refused == "" {
			return ws, err
		}
		wait := writeBackoff.Delay(attempt)
		untilLeases := refused != "" && w.pass.Err() == nil
		if attempt >= writeAttempts && (!untilLeases || w.d.clock.now().Add(wait).After(held)) {
			return ws, err
		}
		w.d.log.Warn("write-back failed; retrying", zap.Int("items", len(buf)), zap.Int("attempt", attempt),
			zap.String("cause", string(refused)), zap.Duration("backoff_seconds", wait),
			zap.Duration("leases_left_seconds", held.Sub(w.d.clock.now()).Round(time.Second)), zap.Error(err))
		if !backoff.Sleep(ctx, wait) {
			return ws, err
		}
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		n, rerr := renewLeases(rctx, w.d.pool, claimsOf(buf), w.d.cfg.Lease)
		rcancel()
		w.d.cfg.WriteHealth.Observe(rerr)
		switch {
		case rerr == nil && n == 0:
			return ws, fmt.Errorf("%w (and every lease of the group has passed to another worker)", err)
		case rerr == nil:
			held = w.d.clock.now().Add(w.d.cfg.Lease)
		}
	}
}

// leaseEnd is when the first lease of buf expires, on the database's clock: each claim's
// database time plus the lease.
func (w *writer) leaseEnd(buf []result) time.Time {
	var end time.Time
	for _, r := range buf {
		if e := r.claim.DBNow.Add(w.d.cfg.Lease); end.IsZero() || e.Before(end) {
			end = e
		}
	}
	return end
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
	n, err := releaseLeases(rctx, w.d.pool, cs)
	w.d.cfg.WriteHealth.Observe(err)
	return n, err
}

func itemIDs(rs []result) []string {
	ids := make([]string, len(rs))
	for i, r := range rs {
		ids[i] = r.claim.ItemID
	}
	return ids
}

// collectedTimes are the times the rows of buf's collections are partitioned by: when each was
// collected, and when each of its sales was sold.
func collectedTimes(buf []result) []time.Time {
	var ts []time.Time
	for _, r := range buf {
		ts = append(ts, r.at)
		for _, s := range r.sales {
			ts = append(ts, s.SoldAt)
		}
	}
	return ts
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
	stored []history.Stored
}

// writeBack stores a group of results in one short transaction. History's decision for each
// collection (a snapshot when the market changed, first or on the heartbeat; nothing new
// otherwise) is known before it starts, so one statement writes every item whose lease is still
// ours and fences the rest out: its next slot, outcome, change and sales counts and the market
// of its last snapshot. Its row locks hold off any other worker until history has stored what
// the items' collections bring (new sales, snapshots with their candles and events). Success or
// failure, every item that is still ours is rescheduled by its tier, so nothing can stay due
// forever.
func writeBack(ctx context.Context, pool *pgxpool.Pool, hist history.Policy, results []result) (writeStats, error) {
	var ws writeStats
	cs := make([]history.Collection, 0, len(results))
	outcomes := make(map[string]history.Stored, len(results))
	for _, r := range results {
		if r.err != nil {
			continue
		}
		c := history.Collection{ItemID: r.claim.ItemID, ItemName: r.claim.ItemName, Tier: string(r.claim.Tier),
			Token: r.claim.Token, At: r.at, State: r.listings.state(), Sales: r.sales, Packed: r.packed,
			SalesGap: r.salesGap, Last: r.claim.LastSnapshot, SeenAt: r.claim.LastCollectedAt}
		cs = append(cs, c)
		outcomes[c.ItemID] = hist.Outcome(c)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		live, err := writeItems(ctx, tx, results, outcomes)
		if err != nil {
			return err
		}
		ws.fenced = ws.fenced[:0]
		for _, r := range results {
			if !live[r.claim.ItemID] {
				ws.fenced = append(ws.fenced, r.claim.ItemID)
			}
		}
		ours := cs[:0:0]
		for _, c := range cs {
			if live[c.ItemID] {
				ours = append(ours, c)
			}
		}
		if len(ours) == 0 {
			return nil
		}
		ws.stored, err = hist.Write(ctx, tx, ours)
		return err
	})
	if err != nil {
		return writeStats{}, fmt.Errorf("write back %d items: %w", len(results), err)
	}
	return ws, nil
}

// writeItemsSQL writes each item of a batch once, fenced by its lease token, and returns the
// items it wrote (those still ours, now locked until commit): its next slot and outcome with
// the lease cleared; if the tier changed while the item was leased, whoever changed
// it also set the new schedule, which is kept. For a collection it also adds one interval to the
// decayed counts (the same arithmetic as tierplan.Observations.Decay then Observe): the interval
// since the previous successful collection ($10, from the claim), whether the market changed in
// it (history's decision), and the new sales; and it records the market of the item's last
// snapshot and, when one was written, its time, and where its stored sales end. last_collected_at
// is also when that snapshot was last seen unchanged. The first collection only records the
// market. Each count repeats the test "observed" (a successful collection with an earlier one
// to measure from) so the batch meets the table once, in the UPDATE, not in a join before it.
//
// It finds each row by the ctid its claim returned ($24), a TID lookup instead of a
// primary-key probe (a fifth of the statement's time at 1M items); a row that something else
// updated since the claim (a re-plan, a pin) has moved, is not matched, and is written by
// writeItemsByKeySQL.
const writeItemsSQL = writeItemsSet + `
WHERE t.ctid = o.tid AND t.item_id = o.item_id AND t.lease_token = o.token
RETURNING t.item_id`

// writeItemsByKeySQL is writeItemsSQL finding the rows by key: for the items whose row moved.
const writeItemsByKeySQL = writeItemsSet + `
WHERE t.item_id = o.item_id AND t.lease_token = o.token
RETURNING t.item_id`

const writeItemsSet = `
WITH o AS (
	SELECT u.*, extract(epoch FROM u.attempt_at - u.prev_at)::float8 AS secs
	FROM unnest($1::text[], $2::uuid[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::bool[], $7::text[], $8::text[],
	            $9::timestamptz[], $10::timestamptz[], $11::bigint[], $12::bigint[], $13::float8[], $14::bigint[], $15::int[],
	            $16::bigint[], $17::bool[], $18::bool[], $19::int[], $20::bool[], $21::float8[], $22::timestamptz[], $23::int[],
	            $24::tid[])
	     AS u(item_id, token, tier, next_at, attempt_at, ok, outcome, err, last_sale,
	          prev_at, lowest, median, weighted, api_avg, cnt, qty, truncated, changed, new_sales, gap, win, written_at,
	          last_second, tid)
)
UPDATE tracked_items t
SET next_collect_at = CASE WHEN t.collection_tier = o.tier THEN o.next_at ELSE t.next_collect_at END,
    lease_expires_at = NULL, lease_token = NULL, leased_by = NULL,
    last_attempt_at = o.attempt_at,
    last_collected_at = CASE WHEN o.ok THEN o.attempt_at ELSE t.last_collected_at END,
    last_outcome = o.outcome,
    failure_streak = CASE WHEN o.ok THEN 0 ELSE t.failure_streak + 1 END,
    last_error = o.err,
    last_sale_at = greatest(t.last_sale_at, o.last_sale),
    last_second_sales = CASE WHEN o.last_sale IS NULL OR o.last_sale < t.last_sale_at THEN t.last_second_sales
                             WHEN o.last_sale = t.last_sale_at THEN greatest(t.last_second_sales, o.last_second)
                             ELSE o.last_second END,
    updated_at = now(),
    est_collections = CASE WHEN o.ok AND t.seen_listing_count IS NOT NULL AND o.secs > 0
                           THEN t.est_collections * exp(-o.secs / o.win) + 1 ELSE t.est_collections END,
    est_changes = CASE WHEN o.ok AND t.seen_listing_count IS NOT NULL AND o.secs > 0
                       THEN t.est_changes * exp(-o.secs / o.win) + o.changed::int ELSE t.est_changes END,
    est_changed_seconds = CASE WHEN o.ok AND t.seen_listing_count IS NOT NULL AND o.secs > 0
                               THEN t.est_changed_seconds * exp(-o.secs / o.win) + CASE WHEN o.changed THEN o.secs ELSE 0 END
                               ELSE t.est_changed_seconds END,
    est_unchanged_seconds = CASE WHEN o.ok AND t.seen_listing_count IS NOT NULL AND o.secs > 0
                                 THEN t.est_unchanged_seconds * exp(-o.secs / o.win) + CASE WHEN o.changed THEN 0 ELSE o.secs END
                                 ELSE t.est_unchanged_seconds END,
    est_sales = CASE WHEN o.ok AND t.seen_listing_count IS NOT NULL AND o.secs > 0
                     THEN t.est_sales * exp(-o.secs / o.win) + o.new_sales ELSE t.est_sales END,
    seen_lowest_price = CASE WHEN o.ok THEN o.lowest ELSE t.seen_lowest_price END,
    seen_median_price = CASE WHEN o.ok THEN o.median ELSE t.seen_median_price END,
    seen_weighted_price = CASE WHEN o.ok THEN o.weighted ELSE t.seen_weighted_price END,
    seen_api_average_price = CASE WHEN o.ok THEN o.api_avg ELSE t.seen_api_average_price END,
    seen_listing_count = CASE WHEN o.ok THEN o.cnt ELSE t.seen_listing_count END,
    seen_listing_quantity = CASE WHEN o.ok THEN o.qty ELSE t.seen_listing_quantity END,
    seen_truncated = CASE WHEN o.ok THEN o.truncated ELSE t.seen_truncated END,
    last_snapshot_at = coalesce(o.written_at, t.last_snapshot_at),
    sales_gaps = t.sales_gaps + (o.ok AND o.gap)::int
FROM o`

// writeItems writes every result's item whose lease is still ours, and returns those; outcomes
// is history's decision for each successful collection.
func writeItems(ctx context.Context, tx pgx.Tx, results []result, outcomes map[string]history.Stored) (map[string]bool, error) {
	n := len(results)
	ids, tokens, tierNames := make([]string, n), make([]pgtype.UUID, n), make([]string, n)
	nextAt, attemptAt := make([]pgtype.Timestamptz, n), make([]time.Time, n)
	oks, outcomesText, errTexts := make([]bool, n), make([]string, n), make([]*string, n)
	lastSale, prevAt, writtenAt := make([]*time.Time, n), make([]*time.Time, n), make([]*time.Time, n)
	lowest, median, apiAvg := make([]*int64, n), make([]*int64, n), make([]*int64, n)
	weighted := make([]*float64, n)
	counts, newSales, lastSecond := make([]int32, n), make([]int32, n), make([]int32, n)
	qty := make([]int64, n)
	truncated, changed, gaps := make([]bool, n), make([]bool, n), make([]bool, n)
	windows, tids := make([]float64, n), make([]pgtype.TID, n)
	for i, r := range results {
		ids[i], tokens[i], tierNames[i], attemptAt[i], tids[i] = r.claim.ItemID, r.claim.Token, string(r.claim.Tier), r.at, r.claim.tid
		if next, ok := tiers.NextDue(r.claim.ItemID, r.claim.Tier, r.at); ok {
			nextAt[i] = pgtype.Timestamptz{Time: next, Valid: true}
		}
		oks[i], outcomesText[i], windows[i] = r.err == nil, r.outcome, r.window.Seconds()
		if r.err != nil {
			s := provider.Clean(r.err.Error(), provider.MaxErrorRunes)
			errTexts[i] = &s
			continue
		}
		lastSale[i], lastSecond[i] = lastSecondOf(r.sales)
		l, st := r.listings, outcomes[r.claim.ItemID]
		prevAt[i] = r.claim.LastCollectedAt
		lowest[i], median[i], weighted[i], apiAvg[i] = l.Lowest, l.Median, l.Weighted, l.APIAverage
		counts[i], qty[i], truncated[i] = int32(l.Count), l.Quantity, l.Truncated
		changed[i], newSales[i], gaps[i] = st.Reason == history.Change, int32(st.NewSales), r.salesGap
		if st.Reason != history.Skip {
			writtenAt[i] = &results[i].at
		}
	}
	args := []any{ids, tokens, tierNames, nextAt, attemptAt, oks, outcomesText, errTexts, lastSale,
		prevAt, lowest, median, weighted, apiAvg, counts, qty, truncated, changed, newSales, gaps, windows, writtenAt, lastSecond, tids}
	live := make(map[string]bool, n)
	if err := collectWritten(ctx, tx, writeItemsSQL, args, live); err != nil {
		return nil, err
	}
	if len(live) < n {
		// Rows that moved since their claim (or whose lease was lost, which the key finds no
		// better). The rows just written no longer hold their token, so passing the whole batch
		// again writes none twice; this path is rare enough not to be worth trimming the arrays.
		if err := collectWritten(ctx, tx, writeItemsByKeySQL, args, live); err != nil {
			return nil, err
		}
	}
	return live, nil
}

// collectWritten runs one of the write-items statements and adds the items it wrote to live.
func collectWritten(ctx context.Context, tx pgx.Tx, sql string, args []any, live map[string]bool) error {
	rows, err := tx.Query(ctx, sql, args...)
	if err != nil {
		return fmt.Errorf("write items: %w", err)
	}
	var id string
	if _, err := pgx.ForEachRow(rows, []any{&id}, func() error { live[id] = true; return nil }); err != nil {
		return fmt.Errorf("write items: %w", err)
	}
	return nil
}
