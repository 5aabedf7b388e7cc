package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/catalog"
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
	// failures sums the failed items by outcome for the pass's log lines: a line per item
	// flooded the log with thousands a minute while the provider failed a share of calls.
	failures map[string]*failureSample
	// gaps are the collections that found sales lost since the previous one, summed the same
	// way: after an outage every item that sold more than a page meanwhile has one.
	gaps map[string]*failureSample
}

// failureSample is a pass's failed items of one outcome: how many, the first few ids, the
// first error and the longest failure streak among them.
type failureSample struct {
	n         int
	itemIDs   []string
	err       error
	maxStreak int32
}

// failureExamples is how many item ids a pass's failure line names per outcome.
const failureExamples = 5

// itemErrors counts the failed items of outcome item_error, and those whose maintenance
// answer, refused key or answer not the API's was judged their own (ownOutcome).
func (s *writerStats) itemErrors() int {
	n := 0
	for _, outcome := range []string{provider.ClassItem.String(), ownOutcome(provider.ClassMaintenance), ownOutcome(provider.ClassConfig), ownOutcome(provider.ClassEndpoint)} {
		if f := s.failures[outcome]; f != nil {
			n += f.n
		}
	}
	return n
}

func (s *writerStats) addFailure(r result) {
	f := sample(&s.failures, r.outcome, r)
	f.err = cmp.Or(f.err, r.err)
	f.maxStreak = max(f.maxStreak, r.claim.FailureStreak+1) // this collection failed too
}

// sample counts r's item in (*by)[key], naming the first few.
func sample(by *map[string]*failureSample, key string, r result) *failureSample {
	if *by == nil {
		*by = map[string]*failureSample{}
	}
	f := (*by)[key]
	if f == nil {
		f = &failureSample{}
		(*by)[key] = f
	}
	f.n++
	if len(f.itemIDs) < failureExamples {
		f.itemIDs = append(f.itemIDs, r.claim.ItemID)
	}
	return f
}

// failLogEvery is how often the failed items are logged at most: a daemon passes every second
// or so, and a line per outcome per pass still made 60 a minute.
const failLogEvery = time.Minute

// failLog sums the passes' failed items by outcome: the first pass with failures is logged at
// once (a one-shot's only pass), then at most once a minute. Each item's own error is in its
// last_error (collector items ITEM_ID, the console) and at debug level.
type failLog struct {
	msg    string // the line's message
	mu     sync.Mutex
	last   time.Time // the last line
	since  time.Time // the first failure summed
	passes int
	by     map[string]*failureSample
}

func (l *failLog) add(log *zap.Logger, pass map[string]*failureSample, now time.Time) {
	if len(pass) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by, l.since = map[string]*failureSample{}, now
	}
	l.passes++
	for outcome, f := range pass {
		sum := l.by[outcome]
		if sum == nil {
			sum = &failureSample{err: f.err}
			l.by[outcome] = sum
		}
		sum.n += f.n
		sum.itemIDs = append(sum.itemIDs, f.itemIDs[:min(len(f.itemIDs), failureExamples-len(sum.itemIDs))]...)
		sum.maxStreak = max(sum.maxStreak, f.maxStreak)
	}
	if !l.last.IsZero() && now.Sub(l.last) < failLogEvery {
		return
	}
	for _, outcome := range slices.Sorted(maps.Keys(l.by)) {
		f := l.by[outcome]
		streak := zap.Skip()
		if f.maxStreak > 0 {
			streak = zap.Int32("max_failure_streak", f.maxStreak)
		}
		log.Warn(l.msg, zap.String("outcome", outcome),
			zap.Int("items", f.n), zap.Strings("item_ids", f.itemIDs), streak,
			zap.NamedError("first_error", f.err), zap.Int("passes", l.passes), zap.Duration("over_seconds", now.Sub(l.since)))
	}
	l.last, l.passes, l.by = now, 0, nil
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
	now := time.Now()
	w.d.fails.add(w.d.log, w.stats.failures, now)
	w.d.gaps.add(w.d.log, w.stats.gaps, now)
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
				w.d.cfg.Observer.SalesGap(r.claim)
			}
		default:
			failed++
			w.d.log.Debug("item collection failed; rescheduled by tier (a maintenance answer's at its due time)",
				zap.String("item_id", r.claim.ItemID), zap.String("outcome", r.outcome), zap.Error(r.err))
		}
	}
	w.mu.Lock()
	for _, r := range buf {
		switch {
		case skip[r.claim.ItemID]:
		case r.err != nil:
			w.stats.addFailure(r)
		case r.salesGap:
			sample(&w.stats.gaps, "sales_gap", r)
		}
	}
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
		w.d.logBug("recording an item's failure panicked (a bug); its lease is handed back", itemIDs(buf), err)
		return nil, itemIDs(buf), nil, err // not even its failure could be recorded
	}
	r := &buf[0]
	if isBug(err) {
		w.d.logBug("writing an item back panicked (a bug); it is rescheduled by tier as failed", []string{r.claim.ItemID}, err)
		*r = result{claim: r.claim, at: r.at, outcome: outcomePanic, err: err}
		return w.store(ctx, buf)
	}
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
// Once the pass has ended (shutdown) it retries only while the leases hold.
//
// A database that refuses writes (read-only after a failover, a standby, a full disk, a
// restart: store.RefusedCause) is retried for as long as the group's leases hold, not just
// writeAttempts times: the results were paid for with provider calls, and the database
// usually comes back within a lease. Past the leases it stops, and the items are collected
// again by whoever claims them next; a later write would be refused by the token fence anyway
// once that happened. Nor does it renew them for more than renewCap leases of retrying: a
// database whose refusals outlast that (a full disk where updates that fit in their page still
// succeed, so every renewal does) must not keep the items from other collectors for good.
func (w *writer) writeRetrying(ctx context.Context, buf []result) (writeStats, error) {
	held := w.leaseEnd(buf)
	renewUntil := w.d.clock.now().Add(renewCap * w.d.cfg.Lease)
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ws, err := writeBack(actx, w.d.pool, w.d.cfg.History, buf, w.d.inWrite)
		cancel()
		w.d.cfg.WriteHealth.Observe(err)
		if partition.IsMissing(err) && attempt < writeAttempts {
			// Partition upkeep stopped across a boundary: create what the rows need and write again.
			pctx, pcancel := context.WithTimeout(ctx, 30*time.Second)
			perr := w.d.partitions.EnsureCovering(pctx, collectedTimes(buf))
			pcancel()
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
		pastLeases := w.d.clock.now().Add(wait).After(held)
		// A server at max_connections refuses the session a write needs, not the write: as
		// patient, though it is no refusal for the write health.
		untilLeases := (refused != "" || store.NoSessionToSpare(err)) && w.pass.Err() == nil
		if attempt >= writeAttempts && (!untilLeases || pastLeases) {
			return ws, err
		}
		if w.pass.Err() != nil && pastLeases {
			// Shutting down: a retry past the leases keeps the process from exiting (eight
			// attempts of up to 30 s each, per group, against a database that drops traffic)
			// for results the next claimer collects again anyway. held counts from the claim;
			// the batch's renewals may have extended the leases since, so ask.
			renewed, rerr := w.renew(ctx, buf)
			switch {
			case rerr != nil:
				return ws, err
			case len(renewed) == 0:
				return writeStats{fenced: itemIDs(buf)}, nil
			}
			held = w.d.clock.now().Add(w.d.cfg.Lease)
		}
		w.d.log.Warn("write-back failed; retrying", zap.Int("items", len(buf)), zap.Int("attempt", attempt),
			zap.String("cause", string(refused)), zap.Duration("backoff_seconds", wait),
			zap.Duration("leases_left_seconds", held.Sub(w.d.clock.now()).Round(time.Second)), zap.Error(err))
		if !backoff.Sleep(ctx, wait) {
			return ws, err
		}
		if w.d.clock.now().After(renewUntil) {
			return ws, fmt.Errorf("%w (retried for %d leases (collect.lease): giving the items up)", err, renewCap)
		}
		renewed, rerr := w.renew(ctx, buf)
		switch {
		case rerr == nil && len(renewed) == 0:
			// Every lease of the group passed to another collector (this process was stopped
			// past them, or the retries outlasted them): nothing of it may be written, which
			// is the fence's verdict, not a failure.
			return writeStats{fenced: itemIDs(buf)}, nil
		case rerr == nil:
			held = w.d.clock.now().Add(w.d.cfg.Lease)
		}
	}
}

// renew renews the leases of buf's items still held and returns their ids.
func (w *writer) renew(ctx context.Context, buf []result) ([]string, error) {
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	renewed, err := catalog.RenewLeases(rctx, w.d.pool, claimsOf(buf), w.d.cfg.Lease)
	w.d.cfg.WriteHealth.ObserveAnswer(err)
	return renewed, err
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
	var cs []catalog.Claim
	for _, r := range buf {
		if want[r.claim.ItemID] {
			cs = append(cs, r.claim)
		}
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	n, err := catalog.ReleaseLeases(rctx, w.d.pool, cs)
	w.d.cfg.WriteHealth.ObserveAnswer(err)
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

func claimsOf(rs []result) []catalog.Claim {
	cs := make([]catalog.Claim, len(rs))
	for i, r := range rs {
		cs[i] = r.claim
	}
	return cs
}

type writeStats struct {
	fenced []string // items whose lease had passed to another worker: nothing written
	stored []history.Stored
}

// writeBack stores a group of results in one short transaction: the catalog writes back every
// item whose lease is still ours (the row history decides) and history stores what its
// collection brings; the rest are fenced out.
// Success or failure, every item that is still ours is rescheduled by its tier, so nothing can
// stay due forever; one a maintenance or a refused key answered keeps its due time
// (recordedFor), and is rescheduled at its next answer.
//
// A panic in it (a bug some item's data meets) rolls the transaction back and returns as a
// bugError, a store.DataError: the writer splits the group until the item is alone and
// reschedules it as failed, as it does with data the database refuses. inTx, when set (tests), runs first in the
// transaction.
func writeBack(ctx context.Context, pool *pgxpool.Pool, hist history.Policy, results []result, inTx func([]result)) (writeStats, error) {
	var ws writeStats
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		defer func() {
			if p := recover(); p != nil {
				err = &store.DataError{Err: newBugError(p)}
			}
		}()
		if inTx != nil {
			inTx(results)
		}
		// In item_id order, as every statement that locks several tracked_items rows takes them
		// (catalog.leaseArrays): in arrival order it deadlocked with a recalculation.
		items := make([]history.Item, len(results))
		for i, r := range slices.SortedFunc(slices.Values(results), func(a, b result) int { return strings.Compare(a.claim.ItemID, b.claim.ItemID) }) {
			items[i] = r.item()
		}
		live, err := catalog.WriteBack(ctx, tx, hist.Rows(items))
		if err != nil {
			return err
		}
		stored, err := hist.WriteItems(ctx, tx, items, live)
		if err != nil {
			return err
		}
		ws = writeStats{stored: stored}
		for _, r := range results {
			if !live[r.claim.ItemID] {
				ws.fenced = append(ws.fenced, r.claim.ItemID)
			}
		}
		return nil
	})
	if err != nil {
		return writeStats{}, fmt.Errorf("write back %d items: %w", len(results), err)
	}
	return ws, nil
}

// item is what history writes back for r: the claim's lease and next slot, and what the fetch saw.
func (r result) item() history.Item {
	c := r.claim
	it := history.Item{Collection: history.Collection{ItemID: c.ItemID, Tier: string(c.Tier), Token: c.Token, At: r.at},
		TID: c.TID, Outcome: r.outcome, Window: r.window, Est: c.Est, EstSales: c.EstSales, Observed: c.SeenListings != nil}
	if next, ok := tiers.NextDue(c.ItemID, c.Tier, r.at); ok {
		if r.keepDue {
			next = c.DueAt
		}
		it.NextAt = pgtype.Timestamptz{Time: next, Valid: true}
	}
	if r.err != nil {
		s := provider.Clean(r.err.Error(), provider.MaxErrorRunes)
		it.Err = &s
		return it
	}
	it.ItemName, it.State, it.Sales, it.Packed, it.SalesGap = c.ItemName, r.listings, r.sales, r.packed, r.salesGap
	it.Last, it.SeenAt = c.LastSnapshot, c.LastCollectedAt
	return it
}
