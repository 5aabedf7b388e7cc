// Package dispatcher runs collect-due: it claims due items with a lease, fetches them from the
// provider with no database connection held, and writes each result back fenced by its lease
// token together with the item's next schedule.
//
// A pass is: read the provider status gate → claim a batch in one statement → fetch with at most
// Concurrency calls in flight → write results back in short transactions as they arrive →
// repeat until nothing is due (or MaxBatches). A maintenance answer stops the pass at once and
// hands the unprocessed items back, so nothing waits for its lease to expire.
package dispatcher

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// Fetcher is the market workload of the provider client. Each method returns the rows kept and
// how many rows the provider sent: an answer is full, and may have been cut, when it sent as
// many as its limit, whatever the row check dropped.
type Fetcher interface {
	Auction(ctx context.Context, itemID string) ([]provider.Listing, int, error)
	AuctionSold(ctx context.Context, itemID string) ([]provider.Sale, int, error)
}

// Config sizes a pass. Zero values take the defaults.
type Config struct {
	Provider     string        // provider_status row to gate on; default "neople"
	BatchSize    int           // items per claim; default 100
	Lease        time.Duration // lease per claim; default 2m
	Concurrency  int           // provider calls in flight; default 16
	MaxBatches   int           // 0 = until nothing is due
	FlushSize    int           // results per write-back transaction; default 50
	SoldLimit    int           // the limit the client asks /df/auction-sold for; default 100
	AuctionLimit int           // the limit the client asks /df/auction for; default 400
	Owner        string        // recorded in leased_by; default host:pid
	// Grace is how long in-flight provider calls may finish after ctx is cancelled (shutdown)
	// before they are abandoned and their leases released. Default 0: abandon at once.
	Grace time.Duration
	// PrioritizeTiers claims more urgent tiers first (HOT before COLD) when more is due than a
	// batch holds, at the cost of sorting the due backlog on every claim.
	PrioritizeTiers bool
	// ClaimLimit, when set, caps each claim at what it returns (at least 1). The daemon passes
	// about half a second of its budget: a claimed batch then never holds HOT items that fall due
	// behind a queue of COLD ones waiting for the budget.
	ClaimLimit func() int
	// Gather ends a pass after a batch smaller than it asked for, instead of claiming again
	// what fell due while that batch was collected: those items wait for the next pass, where
	// they can share packed calls (the daemon spaces its passes by daemon.pack_wait). Off, a
	// pass claims until nothing is due, which one-shots want.
	Gather bool
	// Ahead claims items that fall due within this long, so a gathering pass collects them
	// on time rather than up to a pack_wait late (the daemon sets it to daemon.pack_wait).
	// It must stay under half the shortest tier interval: the reschedule's next slot is at
	// least half an interval after the collection, which is what moves an item claimed early
	// to its next slot rather than back to the one it was claimed for.
	Ahead time.Duration
	// EstimateWindow is how fast the per-item change and sales counts decay: observations this
	// old count 1/e (catalog.estimate_window). Default 24h.
	EstimateWindow time.Duration
	// PackSize: items whose recent answers were small (PackMaxListings listings, PackMaxSales
	// new sales per collection) share itemIds calls of up to PackSize ids, when the fetcher
	// is a PackedFetcher (collect.pack_*). 0 or 1: every item alone.
	PackSize        int
	PackMaxListings int
	PackMaxSales    float64
	// ShadowFraction of packed items are fetched alone as well and compared; a mismatch
	// switches packing off cluster-wide (collect.shadow_fraction).
	ShadowFraction float64
	// Observer, when set, hears about claims, provider calls and write-backs (metrics, health).
	Observer Observer
}

// Observer hears what a pass does. Calls come from several goroutines.
type Observer interface {
	// Claimed reports a claimed batch; DueAt and DBNow of each claim give the due→claim lag.
	Claimed(claims []Claim)
	// Fetched reports one item's provider calls (err nil on success).
	Fetched(c Claim, took time.Duration, err error)
	// Written reports one write-back transaction.
	Written(collected, failed, fenced int, took time.Duration)
	// SalesGap reports a written collection that found sales lost since the previous one.
	SalesGap(c Claim)
}

type nopObserver struct{}

func (nopObserver) Claimed([]Claim)                      {}
func (nopObserver) Fetched(Claim, time.Duration, error)  {}
func (nopObserver) Written(int, int, int, time.Duration) {}
func (nopObserver) SalesGap(Claim)                       {}

func (c *Config) withDefaults() Config {
	out := *c
	// Zero fields take the collect.*, provider.* and catalog.* defaults, which config owns.
	def := config.Default()
	out.Provider = cmp.Or(out.Provider, def.Provider.Name)
	out.BatchSize = cmp.Or(out.BatchSize, def.Collect.BatchSize)
	out.Lease = cmp.Or(out.Lease, def.Collect.Lease)
	out.Concurrency = cmp.Or(out.Concurrency, def.Collect.Concurrency)
	out.FlushSize = cmp.Or(out.FlushSize, def.Collect.FlushSize)
	out.SoldLimit = cmp.Or(out.SoldLimit, def.Provider.SoldLimit)
	out.AuctionLimit = cmp.Or(out.AuctionLimit, def.Provider.AuctionLimit)
	out.EstimateWindow = cmp.Or(out.EstimateWindow, def.Catalog.EstimateWindow)
	if out.Observer == nil {
		out.Observer = nopObserver{}
	}
	if out.Owner == "" {
		out.Owner = telemetry.Instance()
	}
	return out
}

func (c Config) validate() error {
	var errs []error
	if c.BatchSize < 1 {
		errs = append(errs, fmt.Errorf("batch size %d: must be >= 1", c.BatchSize))
	}
	if c.Lease < time.Second {
		errs = append(errs, fmt.Errorf("lease %v: must be >= 1s", c.Lease))
	}
	if c.Concurrency < 1 {
		errs = append(errs, fmt.Errorf("concurrency %d: must be >= 1", c.Concurrency))
	}
	if c.MaxBatches < 0 {
		errs = append(errs, fmt.Errorf("max batches %d: must be >= 0", c.MaxBatches))
	}
	if c.EstimateWindow < time.Minute {
		errs = append(errs, fmt.Errorf("estimate window %v: must be >= 1m", c.EstimateWindow))
	}
	if c.FlushSize < 1 {
		errs = append(errs, fmt.Errorf("flush size %d: must be >= 1", c.FlushSize))
	}
	if c.Ahead < 0 || c.Ahead >= MaxAhead {
		errs = append(errs, fmt.Errorf("claim ahead %v: must be >= 0 and < %v", c.Ahead, MaxAhead))
	}
	return errors.Join(errs...)
}

// Dispatcher runs collect-due passes. It is safe to run many, in one process or many.
type Dispatcher struct {
	pool  *pgxpool.Pool
	fetch Fetcher
	cfg   Config
	log   *zap.Logger
	clock dbClock
	pause pauseLog
}

// Limits is a Fetcher that knows the row limits it asks the provider for (provider.Client).
type Limits interface {
	AuctionLimit() int
	SoldLimit() int
}

// New validates the config and builds a dispatcher. A fetcher's own limits (Limits) win over
// Config's: they are what cut answers, so the completeness rules must judge by them.
func New(pool *pgxpool.Pool, fetch Fetcher, cfg Config, log *zap.Logger) (*Dispatcher, error) {
	if l, ok := fetch.(Limits); ok {
		cfg.AuctionLimit, cfg.SoldLimit = cmp.Or(l.AuctionLimit(), cfg.AuctionLimit), cmp.Or(l.SoldLimit(), cfg.SoldLimit)
	}
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("dispatcher config: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	return &Dispatcher{pool: pool, fetch: fetch, cfg: cfg, log: log}, nil
}

// RunOnce is one collect-due pass: claim and collect batches until nothing is due, MaxBatches
// is reached, the provider stops being dispatchable, or ctx ends.
func (d *Dispatcher) RunOnce(ctx context.Context) (Summary, error) {
	return d.pass(ctx, d.cfg.MaxBatches, func(ctx context.Context) ([]Claim, bool, error) {
		n := d.cfg.BatchSize
		if d.cfg.ClaimLimit != nil {
			n = min(n, max(1, d.cfg.ClaimLimit()))
		}
		c, err := claimDue(ctx, d.pool, n, d.cfg.Lease, d.cfg.Owner, d.cfg.PrioritizeTiers, d.cfg.Ahead)
		return c, len(c) < n, err
	})
}

// ErrNotClaimable: the item does not exist or another worker holds its lease.
var ErrNotClaimable = errors.New("item not found or leased by another worker")

// CollectOne collects one item now, whatever its schedule, through the same gate, lease,
// budget and write path as collect-due.
func (d *Dispatcher) CollectOne(ctx context.Context, itemID string) (Summary, error) {
	claimed := false
	s, err := d.pass(ctx, 1, func(ctx context.Context) ([]Claim, bool, error) {
		c, err := claimOne(ctx, d.pool, itemID, d.cfg.Lease, d.cfg.Owner)
		claimed = len(c) > 0
		return c, true, err
	})
	if err == nil && !claimed && !s.Paused {
		return s, fmt.Errorf("collect %s: %w", itemID, ErrNotClaimable)
	}
	return s, err
}

// Summary is what a pass did.
type Summary struct {
	Paused       bool
	Status       provider.Status
	StatusReason string
	StatusSince  time.Time

	Batches int
	Claimed int
	// PlannedRequests is what the plan counted the claimed collections as costing
	// (requests_per_collection): beside the calls made, how far off the plan's costs are.
	PlannedRequests float64
	Collected       int
	Failed          int
	Fenced          int
	Released        int
	Stop            string // why the pass ended
	// CooldownUntil is when the key may be used again, when a rate limit with a known end
	// stopped the pass.
	CooldownUntil time.Time
	// StopReason is the provider answer that ended the pass, if one did.
	StopReason string
	Duration   time.Duration

	Claim, Fetch, Persist Timing
}

// Timing is a stage's latency distribution over the pass.
type Timing struct {
	N        int
	P50, P95 time.Duration
}

func (s Summary) String() string {
	paused := ""
	if s.Paused {
		paused = fmt.Sprintf("collection paused: provider %s since %s (%s)", s.Status, s.StatusSince.UTC().Format(time.RFC3339), s.StatusReason)
		if s.Claimed == 0 {
			return paused
		}
		paused = " | " + paused
	}
	cooling := ""
	if !s.CooldownUntil.IsZero() {
		cooling = fmt.Sprintf(" | rate limited: the key cools down until %s", s.CooldownUntil.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("claimed=%d collected=%d failed=%d fenced_out=%d released=%d batches=%d duration=%s stop=%q | claim p50=%s p95=%s | fetch p50=%s p95=%s | persist p50=%s p95=%s",
		s.Claimed, s.Collected, s.Failed, s.Fenced, s.Released, s.Batches, s.Duration.Round(time.Millisecond), s.Stop,
		s.Claim.P50, s.Claim.P95, s.Fetch.P50, s.Fetch.P95, s.Persist.P50, s.Persist.P95) + cooling + paused
}

type timings struct {
	mu                    sync.Mutex
	claim, fetch, persist []time.Duration
}

func (t *timings) add(dst *[]time.Duration, d time.Duration) {
	t.mu.Lock()
	*dst = append(*dst, d)
	t.mu.Unlock()
}

func summarize(ds []time.Duration) Timing {
	if len(ds) == 0 {
		return Timing{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) time.Duration { return s[int(q*float64(len(s)-1))].Round(time.Microsecond) }
	return Timing{N: len(s), P50: at(0.50), P95: at(0.95)}
}

// stopError is a provider answer that ends the whole pass rather than one item.
type stopError struct {
	class provider.Class
	err   error
}

// claim returns a batch and whether it drained what was due (it held fewer than asked for).
func (d *Dispatcher) pass(ctx context.Context, maxBatches int, claim func(context.Context) ([]Claim, bool, error)) (Summary, error) {
	start := time.Now()
	var sum Summary
	if paused, err := d.gate(ctx, &sum); err != nil || paused {
		return sum, err
	}

	var tm timings
	w := d.startWriter(ctx, &tm)
	var stop *stopError
	for maxBatches == 0 || sum.Batches < maxBatches {
		if ctx.Err() != nil {
			sum.Stop = "interrupted"
			break
		}
		// Another instance may have paused the provider (DEGRADED, an override) while this
		// pass was busy: look again before every batch, not only at the start.
		if sum.Batches > 0 {
			paused, err := d.gate(ctx, &sum)
			if err != nil {
				w.finish()
				return sum, err
			}
			if paused {
				break
			}
		}
		t0 := time.Now()
		claims, drained, err := claim(ctx)
		tm.add(&tm.claim, time.Since(t0))
		if err != nil {
			w.finish()
			return sum, err
		}
		if len(claims) == 0 {
			sum.Stop = "nothing due"
			break
		}
		d.clock.set(claims[0].DBNow)
		d.cfg.Observer.Claimed(claims)
		sum.Batches++
		sum.Claimed += len(claims)
		for _, c := range claims {
			sum.PlannedRequests += c.Requests
		}
		released, st := d.collectBatch(ctx, claims, w, &tm)
		sum.Released += released
		if st != nil {
			stop = st
			break
		}
		if drained && d.cfg.Gather {
			sum.Stop = "nothing due"
			break
		}
	}
	if sum.Stop == "" && stop == nil {
		sum.Stop = "max batches"
	}
	ws := w.finish()
	sum.Collected, sum.Failed, sum.Fenced = ws.collected, ws.failed, ws.fenced
	sum.Duration = time.Since(start)
	sum.Claim, sum.Fetch, sum.Persist = summarize(tm.claim), summarize(tm.fetch), summarize(tm.persist)

	var retErr error
	if stop != nil {
		sum.Stop, sum.StopReason = stop.class.String(), stop.err.Error()
		retErr = d.handleStop(ctx, stop, &sum)
	}
	if ws.err != nil {
		retErr = errors.Join(retErr, ws.err)
	}
	return sum, retErr
}

// gate reads the provider status; a status that may not dispatch pauses the pass, says why
// and is not an error.
func (d *Dispatcher) gate(ctx context.Context, sum *Summary) (paused bool, err error) {
	row, err := provider.ReadStatus(ctx, d.pool, d.cfg.Provider)
	if err != nil {
		return false, err
	}
	st, reason, since := row.Effective()
	if st.CanDispatch() {
		d.pause.resumed(d.log, d.cfg.Provider, time.Now())
		return false, nil
	}
	sum.Paused, sum.Status, sum.StatusReason, sum.StatusSince = true, st, reason, since
	sum.Stop = "paused"
	d.pause.paused(d.log, d.cfg.Provider, st, reason, since, time.Now())
	return true, nil
}

// pauseSummaryEvery bounds the lines a long pause writes: one when it starts, one when it
// ends, and at most one summary this often in between, however often the loop checks.
const pauseSummaryEvery = time.Minute

// pauseLog turns a paused pass per check into those few lines.
type pauseLog struct {
	mu          sync.Mutex
	on          bool
	started     time.Time
	lastLine    time.Time
	skipped     int // paused passes since the last line
	lastStatus  provider.Status
	lastSinceAt time.Time
}

// paused and resumed take the time from the caller, so that the minute between summaries can
// be tested without waiting for it.
func (p *pauseLog) paused(log *zap.Logger, prov string, st provider.Status, reason string, since, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fields := []zap.Field{zap.String("provider", prov), zap.String("status", string(st)),
		zap.Time("since", since), zap.String("reason", reason)}
	switch {
	case !p.on || st != p.lastStatus || !since.Equal(p.lastSinceAt):
		if !p.on {
			p.started = now
		}
		p.on, p.lastLine, p.skipped, p.lastStatus, p.lastSinceAt = true, now, 0, st, since
		log.Info("collection paused", fields...)
	case now.Sub(p.lastLine) >= pauseSummaryEvery:
		log.Info("collection still paused", append(fields, zap.Int("paused_passes", p.skipped+1),
			zap.Float64("paused_seconds", now.Sub(p.started).Seconds()))...)
		p.lastLine, p.skipped = now, 0
	default:
		p.skipped++
	}
}

func (p *pauseLog) resumed(log *zap.Logger, prov string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on {
		return
	}
	p.on = false
	log.Info("collection resumed", zap.String("provider", prov), zap.Float64("paused_seconds", now.Sub(p.started).Seconds()))
}

// handleStop records what a pass-ending provider answer means for everyone.
func (d *Dispatcher) handleStop(ctx context.Context, st *stopError, sum *Summary) error {
	switch st.class {
	case provider.ClassMaintenance:
		changed, err := provider.SetStatus(context.WithoutCancel(ctx), d.pool, d.cfg.Provider, provider.Maintenance, st.err.Error())
		if err != nil {
			return err
		}
		if changed {
			d.log.Warn("maintenance answer: provider set to MAINTENANCE, pass stopped", zap.String("provider", d.cfg.Provider), zap.Error(st.err))
		}
		sum.Paused, sum.Status, sum.StatusReason = true, provider.Maintenance, st.err.Error()
		return nil
	case provider.ClassRateLimited:
		var pe *provider.Error
		if errors.As(st.err, &pe) && pe.RetryAfter > 0 {
			sum.CooldownUntil = time.Now().Add(pe.RetryAfter)
		}
		d.log.Warn("rate limited: pass stopped, unprocessed items handed back", zap.Error(st.err))
		return nil
	default:
		return fmt.Errorf("collection stopped: %w", st.err)
	}
}

// collectBatch fetches every claim with bounded concurrency and hands results to the writer.
// Claims not fetched (pass stopped, shutdown) are released at once. On shutdown (ctx done) no
// new call starts, and calls in flight get Grace to finish; their results are still written.
func (d *Dispatcher) collectBatch(ctx context.Context, claims []Claim, w *writer, tm *timings) (released int, stop *stopError) {
	fctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		if d.cfg.Grace > 0 {
			t := time.NewTimer(d.cfg.Grace)
			defer t.Stop()
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
		cancel()
	}()
	go d.renewWhileRunning(fctx, done, claims)

	var st packingState
	if _, ok := d.fetch.(PackedFetcher); ok && d.cfg.PackSize > 1 {
		var err error
		if st, err = readPacking(ctx, d.pool); err != nil {
			d.log.Warn("packing state unreadable; fetching every item alone", zap.Error(err))
			st = packingState{}
		}
	}
	jobs := make(chan []Claim)
	var mu sync.Mutex
	var unprocessed []Claim
	var wg sync.WaitGroup
	for i := 0; i < min(d.cfg.Concurrency, len(claims)); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for group := range jobs {
				if ctx.Err() != nil || fctx.Err() != nil {
					mu.Lock()
					unprocessed = append(unprocessed, group...)
					mu.Unlock()
					continue
				}
				t0 := time.Now()
				var rs []result
				if len(group) == 1 {
					rs = []result{d.fetchOne(fctx, group[0])}
				} else {
					rs = d.fetchPacked(fctx, group, st)
				}
				took := time.Since(t0)
				for _, r := range rs {
					tm.add(&tm.fetch, took)
					d.cfg.Observer.Fetched(r.claim, took, r.err)
					if r.err != nil {
						class := provider.ClassOf(r.err)
						// A refusal reaches here only when a long Retry-After or repeated
						// refusals outlast untilAnswered: then the key cools down and the pass stops.
						ends := class == provider.ClassMaintenance || class == provider.ClassRateLimited || class == provider.ClassConfig
						if ends || fctx.Err() != nil {
							mu.Lock()
							if ends && stop == nil {
								stop = &stopError{class: class, err: r.err}
								cancel()
							}
							unprocessed = append(unprocessed, r.claim)
							mu.Unlock()
							continue
						}
					}
					w.results <- r
				}
			}
		}()
	}
	for _, group := range d.jobsFor(claims, st) {
		jobs <- group
	}
	close(jobs)
	wg.Wait()
	if len(unprocessed) > 0 {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer rcancel()
		n, err := releaseLeases(rctx, d.pool, unprocessed)
		if err != nil {
			d.log.Error("could not release leases; they will expire by themselves", zap.Int("items", len(unprocessed)), zap.Error(err))
		}
		released = int(n)
	}
	return released, stop
}

// renewWhileRunning extends the batch's leases every third of a lease while its calls run, so a
// slow provider never lets a lease lapse under a live worker. Items already written back no
// longer carry the token and are left alone.
func (d *Dispatcher) renewWhileRunning(ctx context.Context, done <-chan struct{}, claims []Claim) {
	t := time.NewTicker(d.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := renewLeases(ctx, d.pool, claims, d.cfg.Lease); err != nil && ctx.Err() == nil {
				d.log.Warn("lease renewal failed", zap.Error(err))
			}
		}
	}
}

func (d *Dispatcher) fetchOne(ctx context.Context, c Claim) result {
	r := result{claim: c, outcome: "ok", window: d.cfg.EstimateWindow}
	listings, err := d.listingsAlone(ctx, c)
	var sales []saleRow
	if err == nil {
		// The listings are kept whatever happens to this call.
		sales, r.salesGap, err = d.salesAlone(ctx, c)
	}
	r.at = d.clock.now()
	if err != nil {
		r.err = err
		r.outcome = provider.ClassOf(err).String()
		return r
	}
	r.listings = listings
	r.sales = newSales(sales, c.LastSaleAt)
	return r
}

// listingsAlone asks for one item's listings in a call of its own.
func (d *Dispatcher) listingsAlone(ctx context.Context, c Claim) (listingSummary, error) {
	a, err := untilAnswered(ctx, func() (answer[provider.Listing], error) {
		rows, sent, err := d.fetch.Auction(ctx, c.ItemID)
		return answer[provider.Listing]{rows, sent}, err
	})
	return summarizeListings(a.rows, full(a.sent, d.cfg.AuctionLimit)), err
}

// salesAlone asks for one item's sales in a call of its own and reports whether sales were lost
// since the previous collection. Every collection that reads a sales page alone comes here, so
// none can miss a gap.
func (d *Dispatcher) salesAlone(ctx context.Context, c Claim) (sales []saleRow, gap bool, err error) {
	a, err := untilAnswered(ctx, func() (answer[provider.Sale], error) {
		rows, sent, err := d.fetch.AuctionSold(ctx, c.ItemID)
		return answer[provider.Sale]{rows, sent}, err
	})
	if err != nil {
		return nil, false, err
	}
	f := full(a.sent, d.cfg.SoldLimit)
	return sequenceSales(a.rows, f), salesGap(a.rows, f, c.LastSaleAt, c.LastCollectedAt), nil
}

// answer carries a call's rows and how many the provider sent through untilAnswered.
type answer[T any] struct {
	rows []T
	sent int
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
	backoff := rateLimitBackoff
	for attempt := 1; ; attempt++ {
		v, err := call()
		var pe *provider.Error
		if err == nil || attempt == rateLimitAttempts || !errors.As(err, &pe) || pe.Class != provider.ClassRateLimited ||
			pe.Status == 0 || pe.RetryAfter > rateLimitBackoffMax {
			return v, err
		}
		wait := backoff
		if pe.RetryAfter > 0 {
			wait = pe.RetryAfter
		}
		backoff = min(2*backoff, rateLimitBackoffMax)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, err
		case <-t.C:
		}
	}
}

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

// writeRetrying runs writeBack, retrying a transient failure (connection lost, serialization
// failure, deadlock) with back-off. Before each retry it renews the group's leases, so the
// results still apply; once none of them is ours any more it stops, as nothing could apply.
// writeBackoff spaces write-back retries after transient database errors.
var writeBackoff = backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second}

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

func (w *writer) finish() writerStats {
	close(w.results)
	<-w.done
	return w.stats
}

// OwnerString is the default lease owner label (host:pid).
func OwnerString() string { return (&Config{}).withDefaults().Owner }
