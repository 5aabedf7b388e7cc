package dispatcher

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/history"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/provider"
)

// result is one claimed item after its provider calls.
type result struct {
	claim    catalog.Claim
	at       time.Time // database time when the fetch finished
	listings history.State
	sales    []history.Sale
	packed   bool  // fetched in an itemIds call shared with other items
	err      error // nil = collected
	outcome  string
	salesGap bool          // sales were lost since the previous fetch (history.SalesGap)
	unasked  bool          // err is a pack-mate's pass-ending answer: this item was not called
	keepDue  bool          // written back failed at its due time, not rescheduled (recordedFor)
	window   time.Duration // Config.EstimateWindow: how fast the change counts decay
}

// collectBatch fetches every claim with bounded concurrency and hands results to the writer.
// Claims not fetched (pass stopped, shutdown) are released at once. On shutdown (ctx done) no
// new call starts, and calls in flight get Grace to finish; their results are still written.
// f is the pass's flow: its slots bound the calls in flight over every batch, and a stop in
// any batch cancels this batch's calls as this batch's own stop does.
func (d *Dispatcher) collectBatch(ctx context.Context, claims []catalog.Claim, w *writer, tm *timings, f *flow) (released int, stop *stopError) {
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var renewing sync.WaitGroup
	done := make(chan struct{})
	defer func() {
		close(done)
		cancel()        // a renewal in flight ends with the batch, not a TCP timeout later
		renewing.Wait() // the batch is over, Stuck included, when this returns
	}()
	go func() {
		// The calls in flight end when another batch meets a pass-ending answer (429,
		// maintenance), during a shutdown's grace too, or when the grace is over.
		stopping := ctx.Done()
		var grace <-chan time.Time
		for {
			select {
			case <-done:
				return
			case <-f.halted:
				cancel()
				return
			case <-stopping:
				if d.cfg.Grace <= 0 {
					cancel()
					return
				}
				t := time.NewTimer(d.cfg.Grace)
				defer t.Stop()
				stopping, grace = nil, t.C
			case <-grace:
				cancel()
				return
			}
		}
	}()
	// When a call of the batch last finished, as time since began: on the monotonic clock, so a
	// step of the wall clock (NTP correcting a host minutes off) neither makes a working batch
	// look stuck, dropping its leases, nor keeps a stuck one renewing.
	began := time.Now()
	var progress atomic.Int64
	lost := &lostLeases{}
	renewing.Go(func() { d.renewWhileRunning(fctx, done, claims, began, &progress, lost) })

	var st packingState
	if d.packSize > 1 {
		var err error
		if st, err = readPacking(ctx, d.pool); err != nil {
			d.log.Warn("packing state unreadable; fetching every item alone", zap.Error(err))
			st = packingState{}
		}
	}
	jobs := make(chan []catalog.Claim)
	var mu sync.Mutex
	var unprocessed []catalog.Claim
	var wg sync.WaitGroup
	for i := 0; i < min(d.cfg.Concurrency, len(claims)); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for group := range jobs {
				// The slot first: a stop (in any batch of the pass) may come while waiting for it.
				// (While the database refuses writes the provider client holds every call, the
				// one layer that does: see provider.Hold.)
				f.slots <- struct{}{}
				f.waitProbe()
				if ctx.Err() != nil || fctx.Err() != nil || f.stopped() != nil {
					<-f.slots
					mu.Lock()
					unprocessed = append(unprocessed, group...)
					mu.Unlock()
					f.finished(group)
					continue
				}
				live, gone := lost.split(group)
				var rs []result
				t0 := time.Now()
				if len(live) > 0 {
					rs = d.fetchGroup(fctx, live, st, f)
				}
				took := time.Since(t0)
				if len(live) > 0 {
					progress.Store(int64(time.Since(began))) // a call finished: not stuck
				}
				<-f.slots
				for _, c := range gone {
					// Not fetched: the answer could only be fenced. Its write-back is, and
					// counts it fenced out.
					w.results <- result{claim: c, at: d.clock.now(), err: errLeaseLost, outcome: provider.ClassTransient.String(), window: d.cfg.EstimateWindow}
				}
				for _, r := range rs {
					tm.add(&tm.fetch, took)
					d.cfg.Observer.Fetched(r.claim, took, r.err)
					if r.err != nil {
						class := provider.ClassOf(r.err)
						// A rate limit reaches here only when a long Retry-After or repeated
						// refusals outlast untilAnswered: then the key cools down and the pass
						// stops. An answer judged the item's own (ownAnswer) fails it alone.
						ends := endsPass(class) && r.outcome != ownOutcome(class)
						if ends || fctx.Err() != nil {
							mu.Lock()
							if ends && stop == nil {
								stop = &stopError{class: class, err: r.err}
								cancel()
								f.halt(stop) // the pass's other batches stop calling too
							}
							back := !ends || !recordedFor(r)
							if back {
								unprocessed = append(unprocessed, r.claim)
							}
							r.keepDue = true
							mu.Unlock()
							if back {
								continue
							}
						}
					}
					w.results <- r
				}
				f.finished(group)
			}
		}()
	}
	for _, group := range d.jobsFor(claims, st) {
		jobs <- group
	}
	close(jobs)
	wg.Wait()
	return d.handBack(ctx, unprocessed), stop
}

// renewWhileRunning extends the batch's leases every third of a lease while its calls run, so a
// slow provider never lets a lease lapse under a live worker. Items already written back no
// longer carry the token and are left alone.
//
// It stops once no call of the batch has finished for renewCap leases (or provider timeouts,
// when longer: a slow call is not a stuck one): a batch that works, however slowly (a large
// one on a small budget), keeps its items, while one stuck (a wedged process, calls held for a
// database that does not take writes again) must not keep them from every other collector for
// good. Its leases lapse; another collector's claim takes the items, and this batch's late
// write-back, if any, is fenced by the token. While no call finishes the dispatcher reports
// itself Stuck.
func (d *Dispatcher) renewWhileRunning(ctx context.Context, done <-chan struct{}, claims []catalog.Claim, began time.Time, progress *atomic.Int64, lost *lostLeases) {
	t := time.NewTicker(d.cfg.Lease / 3)
	defer t.Stop()
	left, stuck := false, false // leases left to lapse; no call finished since (Stuck)
	defer func() {
		if stuck {
			d.stuck.Add(-1)
		}
	}()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			still := time.Since(began) - time.Duration(progress.Load())
			over := still >= renewCap*max(d.cfg.Lease, d.cfg.CallTimeout)
			switch {
			case over && !stuck:
				d.stuck.Add(1)
			case !over && stuck:
				d.stuck.Add(-1) // a call finished after all: wedged no longer
			}
			stuck = over
			if stuck && !left {
				d.log.Warn("no call of a batch finished for the leases' renewal cap; its items are left to lapse to other collectors",
					zap.Int("items", len(claims)), zap.Duration("stuck_seconds", still), zap.Duration("lease_seconds", d.cfg.Lease))
				d.LeasesLeft.Signal(len(claims))
				left = true
			}
			var renewed []string
			var err error
			if left {
				// Lapsed for good (a late write is fenced anyway), but which items others took
				// is still read: a batch that comes unstuck (its process resumed after a long
				// stop) makes no call for them. A read says nothing of writes: no WriteHealth
				// report (a read-only database answers it).
				renewed, err = catalog.HeldLeases(ctx, d.pool, claims)
			} else {
				renewed, err = catalog.RenewLeases(ctx, d.pool, claims, d.cfg.Lease)
				if ctx.Err() == nil {
					d.cfg.WriteHealth.ObserveAnswer(err)
				}
			}
			if ctx.Err() != nil {
				return
			}
			if err != nil {
				d.log.Warn("lease renewal failed", zap.Error(err))
				continue
			}
			if n := lost.mark(claims, renewed); n > 0 {
				d.LeasesLost.Signal(n)
			}
		}
	}
}

// errLeaseLost is the failure of an item whose lease passed to another collector before its
// batch fetched it.
var errLeaseLost = errors.New("its lease passed to another collector before it was fetched")

// lostLeases are a batch's items that a renewal found held by another collector: this process
// was stopped past their lease (a paused VM, SIGSTOP) or could not renew it, and another claim
// took them. Their calls are not made: the answers could only be fenced, and the budget they
// would spend is the other collector's too. (Items already written back are marked as well;
// they are not fetched again anyway.)
type lostLeases struct {
	mu  sync.Mutex
	ids map[string]bool
}

// mark adds the claims not among renewed and returns how many are newly lost.
func (l *lostLeases) mark(claims []catalog.Claim, renewed []string) int {
	if len(renewed) == len(claims) {
		return 0
	}
	still := make(map[string]bool, len(renewed))
	for _, id := range renewed {
		still[id] = true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ids == nil {
		l.ids = map[string]bool{}
	}
	n := 0
	for _, c := range claims {
		if !still[c.ItemID] && !l.ids[c.ItemID] {
			l.ids[c.ItemID] = true
			n++
		}
	}
	return n
}

// split returns the claims of group still held, and those lost.
func (l *lostLeases) split(group []catalog.Claim) (live, gone []catalog.Claim) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ids) == 0 {
		return group, nil
	}
	for _, c := range group {
		if l.ids[c.ItemID] {
			gone = append(gone, c)
		} else {
			live = append(live, c)
		}
	}
	return live, gone
}

// endsPass says whether an item's failure of class ends the pass: what fails one call would
// fail every other alike (maintenance, a refused key, a rate limit that outlasted the retries,
// an address that is not the API).
func endsPass(class provider.Class) bool {
	return class == provider.ClassMaintenance || class == provider.ClassRateLimited || class == provider.ClassConfig || class == provider.ClassEndpoint
}

// recordedFor reports a pass-ending answer to r's own call (the item was asked, not only a
// pack-mate of it) that has a check of its own: a maintenance answer (the provider probe) or a
// refused key (the daemon's key re-check). The item's failure is written back, at its due time
// (keepDue), rather than the item handed back unchanged, so that those checks ask another item
// (catalog.ProbeItem): an item that something in front of the API answers alone (a gateway
// refusing its URL with a 503 or a 401) answered them with what stopped everyone, and the pause
// never ended. Kept due, an item a real maintenance or refusal answered is collected first with
// the rest once it ends, not a tier interval late.
//
// The other pass-ending answers hand every item back unchanged: a rate limit is about the key,
// and an address that is not the API answers every item alike.
func recordedFor(r result) bool {
	class := provider.ClassOf(r.err)
	return !r.unasked && (class == provider.ClassMaintenance || class == provider.ClassConfig) && provider.Answered(r.err)
}

// probeCap bounds the probes a pass makes (ownAnswer): past it, the next such answer stops the
// pass as before, and the items judged so far are judged for good.
const probeCap = 3

// probeTimeout bounds a probe's wait for the budget share and its call: a key cooling down
// (another instance met the refusal) would hold the pass's calls for the whole cool-down.
const probeTimeout = 10 * time.Second

// ownAnswer reports an answer that would end the pass (maintenance, a refused key, an address
// that is not the API's) which is item c's alone: something in front of the API refuses that
// one URL (a gateway's bare 503, a firewall's 403, a proxy's 404), and every other item is
// answered. Taken for everyone's, it stopped every pass at that item, which is the most
// overdue one, for good. Such an answer is its own when the provider, asked at once for
// another item with the same call, answers it (a real maintenance, refusal or wrong address
// answers every item alike); the item is then failed alone, with outcome ownOutcome, and from
// then on that answer is taken for its own by every instance without asking again.
//
// The probe goes through the fetcher (the budget share), within probeTimeout, its rate limits
// retried as an item's calls are. A probe that is not answered by the API (timed out, cut, rate
// limited throughout), or one past probeCap in the pass, leaves the answer ending the pass, as
// it did before probes. One answered alike stops the pass too, and is recorded for the
// probed item (catalog.RecordProbeFailure): a second such item, asked first by every probe,
// would otherwise stop every pass for good. Answers to a packed call are never judged: the call
// is several items'.
func (d *Dispatcher) ownAnswer(ctx context.Context, f *flow, c catalog.Claim, err error) bool {
	class := provider.ClassOf(err)
	if class != provider.ClassMaintenance && class != provider.ClassConfig && class != provider.ClassEndpoint {
		return false
	}
	if c.LastOutcome == ownOutcome(class) {
		return true
	}
	var pe *provider.Error
	if !provider.Answered(err) || !errors.As(err, &pe) {
		return false // nothing answered: no way to tell whose the failure is
	}
	f.probing.Lock() // in turn: when one probe finds the answer everyone's, the others stop
	defer f.probing.Unlock()
	if f.stopped() != nil || f.probesLeft == 0 || ctx.Err() != nil {
		return false
	}
	f.probesLeft--
	pctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	other, perr := catalog.ProbeItem(pctx, d.pool, c.ItemID)
	if perr == nil {
		if pe.Endpoint == provider.EndpointAuctionSold {
			_, perr = untilAnswered(pctx, func() (provider.Answer[provider.Sale], error) { return d.fetch.AuctionSold(pctx, other) })
		} else {
			_, perr = untilAnswered(pctx, func() (provider.Answer[provider.Listing], error) { return d.fetch.Auction(pctx, other) })
		}
	}
	// The API answered for the other item, if only that it does not know it or that its rows
	// are wrong: it is up, takes the key, and is at this address.
	if pclass := provider.ClassOf(perr); perr == nil || pclass == provider.ClassItem || pclass == provider.ClassRejected {
		return true
	}
	// The answer stands for every item: the pass stops here, before the calls held for the
	// probe (flow.waitProbe) go out, and so do the probes.
	f.probesLeft = 0
	f.halt(&stopError{class: class, err: err})
	d.log.Debug("a probe of another item failed too; the answer stands for every item",
		zap.String("item_id", c.ItemID), zap.String("probed_item_id", other), zap.Error(perr))
	if provider.ClassOf(perr) == class && provider.Answered(perr) {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), probeTimeout)
		defer rcancel()
		if rerr := catalog.RecordProbeFailure(rctx, d.pool, other, class.String(), provider.Clean(perr.Error(), provider.MaxErrorRunes)); rerr != nil {
			d.log.Warn("could not record a failed probe", zap.Error(rerr))
		}
	}
	return false
}

// ownOutcome is the last_outcome of an item whose answer of class was judged its own
// (ownAnswer): item_maintenance, item_config, item_endpoint. Its next such answer is its own
// too, whoever meets it.
func ownOutcome(class provider.Class) string { return "item_" + class.String() }

// renewCap is how many leases (collect.lease) a batch keeps its items without a call finishing,
// and a refused write-back keeps retrying: 6m with the default lease, past any call's timeout.
const renewCap = 3

func (d *Dispatcher) fetchOne(ctx context.Context, c catalog.Claim) result {
	r := result{claim: c, outcome: "ok", window: d.cfg.EstimateWindow}
	listings, err := d.listingsAlone(ctx, c)
	var sales []history.Sale
	var salesAt time.Time
	if err == nil {
		// A sales call that fails fails the collection: a snapshot without its sales would
		// tell consumers nothing sold. Rows with impossible amounts are only dropped
		// (provider.RowCheck), so they cannot fail it.
		sales, r.salesGap, salesAt, err = d.salesAlone(ctx, c)
	}
	r.at = d.clock.now()
	if err != nil {
		r.err = err
		r.outcome = provider.ClassOf(err).String()
		return r
	}
	r.listings = listings
	r.sales = history.NewSales(sales, c.LastSaleAt, c.LastSecondSales, history.Settled(salesAt))
	return r
}

// listingsAlone asks for one item's listings in a call of its own.
func (d *Dispatcher) listingsAlone(ctx context.Context, c catalog.Claim) (history.State, error) {
	a, err := untilAnswered(ctx, func() (provider.Answer[provider.Listing], error) {
		return d.fetch.Auction(ctx, c.ItemID)
	})
	return history.Summarize(a.Rows, full(a.Sent, d.auctionLimit)), err
}

// salesAlone asks for one item's sales in a call of its own and reports whether sales were lost
// since the previous collection, and when the provider answered by the clock it dates sales
// with (provider.Answer.AnsweredAt; the database's time before the call when the answer does
// not say): the seconds history.Settled holds back are counted from it.
// Every collection that reads a sales page alone comes here, so none can miss a gap.
func (d *Dispatcher) salesAlone(ctx context.Context, c catalog.Claim) (sales []history.Sale, gap bool, answered time.Time, err error) {
	at := d.clock.now()
	a, err := untilAnswered(ctx, func() (provider.Answer[provider.Sale], error) {
		return d.fetch.AuctionSold(ctx, c.ItemID)
	})
	if err != nil {
		return nil, false, at, err
	}
	f := full(a.Sent, d.soldLimit)
	answered = a.AnsweredAt(at)
	d.skew.seen(d.log, answered.Sub(at), time.Now())
	return history.SequenceSales(a.Rows, f, c.LastSaleAt), history.SalesGap(a.Rows, f, c.LastSaleAt, c.LastCollectedAt, answered.Sub(at)), answered, nil
}

// full reports an answer that reached its limit: rows past it, if any, were cut off.
func full(sent, limit int) bool { return limit > 0 && sent >= limit }

// Rate-limit retries: a refused call waits (a back-off growing from rateLimitBackoff to
// rateLimitBackoffMax, or a Retry-After no longer than that) and is sent again,
// rateLimitAttempts times in all. A longer Retry-After is a cool-down: it ends the pass.
// Meanwhile the budget has been cut (daemon) and other calls wait for it, so the retry is
// paced; the item fails (and is rescheduled by its tier) only if the refusals go on.
const (
	rateLimitAttempts   = 6
	rateLimitBackoff    = 100 * time.Millisecond
	rateLimitBackoffMax = 2 * time.Second
)

// untilAnswered sends one call again while the provider refuses it for the rate limit, so a
// refusal costs that call a wait rather than the item its other call or the pass its items.
func untilAnswered[T any](ctx context.Context, call func() (T, error)) (T, error) {
	retry := backoff.Policy{Min: rateLimitBackoff, Max: rateLimitBackoffMax}
	for attempt := 1; ; attempt++ {
		v, err := call()
		pe, refused := provider.RateLimitAnswer(err)
		if !refused || attempt == rateLimitAttempts || pe.RetryAfter > rateLimitBackoffMax {
			return v, err
		}
		wait := retry.Delay(attempt)
		if pe.RetryAfter > 0 {
			wait = pe.RetryAfter
		}
		if !backoff.Sleep(ctx, wait) {
			return v, err
		}
	}
}
