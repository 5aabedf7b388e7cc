// Package dispatcher runs collect-due: it claims due items with a lease, fetches them from the
// provider with no database connection held, and writes each result back fenced by its lease
// token together with the item's next schedule.
//
// A pass is: read the provider status gate (gate.go) → claim a batch in one statement
// (catalog.ClaimByCost, sized in dispatcher.go) → fetch with at most Concurrency calls in flight, each item alone (fetch.go) or
// small items sharing itemIds calls (pack.go) → write results back in short transactions as
// they arrive (writeback.go) → repeat until nothing is due (a one-shot: nothing that was due when it
// began), or MaxBatches, or Span. A maintenance
// answer stops the pass at once and hands the unprocessed items back, so nothing waits for its
// lease to expire.
package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testsignal"
)

// Fetcher is everything the dispatcher asks of the provider's market workload
// (provider.Client, or budget.Fetcher in front of it). An answer is full, and may have been
// cut, when the provider sent as many rows as its limit, whatever the row check dropped.
type Fetcher interface {
	Auction(ctx context.Context, itemID string) (provider.Answer[provider.Listing], error)
	AuctionSold(ctx context.Context, itemID string) (provider.Answer[provider.Sale], error)
	// AuctionMany and AuctionSoldMany ask for several items in one itemIds call. They are
	// called only with at most PackLimit ids, so never when PackLimit is below 2.
	AuctionMany(ctx context.Context, itemIDs []string) (provider.Answer[provider.Listing], error)
	AuctionSoldMany(ctx context.Context, itemIDs []string) (provider.Answer[provider.Sale], error)
	// AuctionLimit and SoldLimit are the row limits the calls ask for (at least 1): they are
	// what cuts an answer, so the completeness rules judge by them.
	AuctionLimit() int
	SoldLimit() int
	// PackLimit is how many ids one packed call may name; below 2 the fetcher cannot pack and
	// every item is fetched alone.
	PackLimit() int
}

// NoPacking completes a Fetcher that cannot pack: its PackLimit is 0, so the packed calls are
// never made (they refuse if they are).
type NoPacking struct{}

func (NoPacking) PackLimit() int { return 0 }

func (NoPacking) AuctionMany(context.Context, []string) (provider.Answer[provider.Listing], error) {
	return provider.Answer[provider.Listing]{}, errors.ErrUnsupported
}

func (NoPacking) AuctionSoldMany(context.Context, []string) (provider.Answer[provider.Sale], error) {
	return provider.Answer[provider.Sale]{}, errors.ErrUnsupported
}

// Config sizes a pass. The caller fills it from the validated configuration (FromConfig), which
// owns every default; New refuses a value outside its key's range (the config.Collect* ranges,
// the same the configuration is validated with) and names the key, rather than repairing it.
type Config struct {
	Provider    string        // provider_status row to gate on (provider.name)
	BatchSize   int           // items per claim (collect.batch_size)
	Lease       time.Duration // lease per claim (collect.lease)
	Concurrency int           // provider calls in flight (collect.concurrency)
	MaxBatches  int           // 0 = until nothing is due, or nothing that was due (DueAtStart) (collect.max_batches)
	FlushSize   int           // results per write-back transaction (FlushSizeDefault)
	Owner       string        // recorded in leased_by; "" = this process (telemetry.Instance)
	// Span, when set, ends a pass that has claimed for this long (StopSpan), what is due or
	// not: a daemon's pass through a backlog would otherwise never end, and what a pass
	// teaches the cost loop (daemon) and says in its log line is learnt at its end.
	Span time.Duration
	// Recover, when set, is called by the gate while the provider's automatic status is not
	// HEALTHY, before the gate decides (health.Once: a probe while paused, RECOVERING ended by
	// time). Processes without a health monitor set it (the one-shots), so cron alone brings a
	// paused provider back; the daemon's monitor does this itself.
	Recover func(ctx context.Context) error
	// Grace is how long in-flight provider calls may finish after ctx is cancelled (shutdown)
	// before they are abandoned and their leases released. 0: abandon at once.
	Grace time.Duration
	// ClaimLimit, when set, caps each claim at what it returns (at least 1). The daemon passes
	// about half a second of its budget: a claimed batch then never holds HOT items that fall due
	// behind a queue of COLD ones waiting for the budget.
	ClaimLimit func() int
	// ClaimRequests, when set, bounds each claim by cost as well:
	// the plan's requests_per_collection of the items it takes add up to at most what it
	// returns (at least one item). And the pass claims its next batch as soon as the items it
	// still collects count that many requests or fewer, not when the whole batch is done: the
	// provider always has the next short stretch of work queued, and an item that falls due
	// meanwhile (a HOT one is claimed first) waits about that stretch, not a batch. The daemon
	// passes its claim horizon (daemon.ClaimHorizonDefault) of its budget.
	ClaimRequests func() float64
	// TopAhead, with ClaimRequests, claims items of the most urgent tier this long before their
	// due time when it is longer than Ahead, and while the pending work holds the next claim
	// back, claims that tier alone TopAhead after the last claim, as long as the pending work
	// stays under topPending times ClaimRequests: a HOT item is then claimed about at its due time,
	// without waiting for the other tiers' work, and a tier over the budget still cannot pile
	// claims up (the daemon sets it to its claim horizon). Under catalog.MaxAhead, as Ahead.
	TopAhead time.Duration
	// Gather ends a pass after a batch smaller than it asked for, instead of claiming again
	// what fell due while that batch was collected: those items wait for the next pass, where
	// they can share packed calls (the daemon spaces its passes by daemon.pack_wait). Off, a
	// pass claims until nothing is due.
	Gather bool
	// DueAtStart makes RunOnce claim only what was due when it began, until none of that is
	// left (the one-shots): claiming whatever is due never ended while items fall due every
	// second, so a cron run lasted until its deadline killed it. A claim cut short by rows
	// another transaction holds for a moment does not end it either.
	DueAtStart bool
	// Ahead claims items that fall due within this long, so a gathering pass collects them
	// on time rather than up to a pack_wait late (the daemon sets it to daemon.pack_wait).
	// It must stay under half the shortest tier interval: the reschedule's next slot is at
	// least half an interval after the collection, which is what moves an item claimed early
	// to its next slot rather than back to the one it was claimed for.
	Ahead time.Duration
	// CallTimeout is provider.timeout: no call runs longer, so the renewal cap is at least
	// renewCap of them, and a healthy batch on a lease shorter than one call keeps its items.
	CallTimeout time.Duration
	// EstimateWindow is how fast the per-item change and sales counts decay: observations this
	// old count 1/e (catalog.estimate_window).
	EstimateWindow time.Duration
	// PackSize: items whose recent answers were small (PackMaxListings listings, PackMaxSales
	// new sales per collection) share itemIds calls of up to PackSize ids, as far as the
	// fetcher's PackLimit allows (collect.pack_size; packing.*Default). 0, like 1: every item alone.
	PackSize        int
	PackMaxListings int
	PackMaxSales    float64
	// ShadowFraction of packed items are fetched alone as well and compared; a mismatch
	// switches packing off cluster-wide (packing.ShadowFractionDefault).
	ShadowFraction float64
	// History decides which collections write a snapshot and an event (history.mode,
	// history.heartbeat).
	History history.Policy
	// Partitions is the process's one partition keeper (required): the write path has it create
	// a history partition its rows found missing. The caller builds it once and shares it with
	// upkeep.
	Partitions *partition.Partitions
	// WriteHealth, when set, hears the outcome of every claim, lease renewal and release and
	// write-back, whichever statement made it: whether the
	// database takes writes (store.RefusedCause), for /readyz and the metrics.
	WriteHealth *store.WriteHealth
	// Observer, when set, hears about claims, provider calls, shadow checks and write-backs
	// (metrics, health).
	Observer Observer
}

// Observer hears what a pass does. Calls come from several goroutines.
type Observer interface {
	// Claimed reports a claimed batch; DueAt and DBNow of each claim give the due→claim lag.
	Claimed(claims []catalog.Claim)
	// Fetched reports one item's provider calls (err nil on success).
	Fetched(c catalog.Claim, took time.Duration, err error)
	// Written reports one write-back transaction.
	Written(collected, failed, fenced int, took time.Duration)
	// Stored reports what history made of one write-back's collections: snapshots written by
	// reason, history.Skip counting those seen unchanged.
	Stored(reasons map[history.Reason]int)
	// SalesGap reports a written collection that found sales lost since the previous one.
	SalesGap(c catalog.Claim)
	// Shadowed reports one packed item fetched again alone; mismatch when they differed.
	Shadowed(endpoint string, mismatch bool)
}

type nopObserver struct{}

func (nopObserver) Claimed([]catalog.Claim)                     {}
func (nopObserver) Fetched(catalog.Claim, time.Duration, error) {}
func (nopObserver) Written(int, int, int, time.Duration)        {}
func (nopObserver) SalesGap(catalog.Claim)                      {}
func (nopObserver) Stored(map[history.Reason]int)               {}
func (nopObserver) Shadowed(string, bool)                       {}

// FlushSizeDefault is the results written per transaction: large enough to amortise a commit,
// small enough that a write-back never holds its locks for long.
const FlushSizeDefault = 50

// The bounds of the fields no configuration key sets; tests set them directly.
const (
	flushSizeMax       = 5000
	packMaxListingsMax = 399
	packMaxSalesMax    = 99.0
)

// FromConfig is the dispatcher's configuration from provider.name, collect.* and
// catalog.estimate_window, shared by the daemon and the one-shots. MaxBatches, Grace, Owner,
// the partition keeper and the daemon's own fields (ClaimLimit, Gather, Ahead, Observer) are the
// caller's.
func FromConfig(c *config.Config) Config {
	cc := c.Collect
	return Config{
		Provider: c.Provider.Name, BatchSize: cc.BatchSize, Lease: cc.Lease, Concurrency: cc.Concurrency,
		CallTimeout: c.Provider.Timeout, FlushSize: FlushSizeDefault, EstimateWindow: c.Catalog.EstimateWindow,
		PackSize: cc.PackSize, PackMaxListings: packing.MaxListingsDefault, PackMaxSales: packing.MaxSalesDefault,
		ShadowFraction: packing.ShadowFractionDefault,
		History:        history.FromConfig(c),
	}
}

func (c Config) validate() error {
	errs := []error{
		config.CollectBatchSize.Check(c.BatchSize),
		config.CollectLease.Check(c.Lease),
		config.CollectConcurrency.Check(c.Concurrency),
		config.CollectMaxBatches.Check(c.MaxBatches),
		config.CatalogEstimateWindow.Check(c.EstimateWindow),
		c.History.Validate(),
	}
	if c.Partitions == nil {
		errs = append(errs, errors.New("partition keeper: required"))
	}
	if c.Provider == "" {
		errs = append(errs, errors.New(`provider.name "": required`))
	}
	if c.FlushSize < 1 || c.FlushSize > flushSizeMax {
		errs = append(errs, fmt.Errorf("flush size %d: must be between 1 and %d", c.FlushSize, flushSizeMax))
	}
	if c.PackMaxListings < 0 || c.PackMaxListings > packMaxListingsMax || c.PackMaxSales < 0 || c.PackMaxSales > packMaxSalesMax {
		errs = append(errs, fmt.Errorf("pack thresholds %d listings, %v sales: must be between 0 and %d, 0 and %v",
			c.PackMaxListings, c.PackMaxSales, packMaxListingsMax, packMaxSalesMax))
	}
	if c.ShadowFraction < 0 || c.ShadowFraction > 1 {
		errs = append(errs, fmt.Errorf("shadow fraction %v: must be between 0 and 1", c.ShadowFraction))
	}
	if c.PackSize != 0 { // 0 is packing off, as 1 is
		errs = append(errs, config.CollectPackSize.Check(c.PackSize))
	}
	if c.TopAhead < 0 || c.TopAhead >= catalog.MaxAhead {
		errs = append(errs, fmt.Errorf("top tier claim ahead %v: must be >= 0 and < %v", c.TopAhead, catalog.MaxAhead))
	}
	if c.Ahead < 0 || c.Ahead >= catalog.MaxAhead {
		errs = append(errs, fmt.Errorf("claim ahead %v: must be >= 0 and < %v", c.Ahead, catalog.MaxAhead))
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
	bugs  bugSites
	fails failLog
	gaps  failLog // collections that found sales lost since the previous one
	skew  skewLog
	// The fetcher's limits, read once; packSize is Config.PackSize within the fetcher's
	// PackLimit (below 2: every item alone).
	auctionLimit, soldLimit, packSize int
	partitions                        *partition.Partitions

	// LeasesLeft hears a batch whose leases stopped being renewed at renewCap (its items).
	LeasesLeft testsignal.Signal[int]
	// LeasesLost hears a renewal that found items of its batch no longer held (taken by another
	// collector, or written back): how many, newly.
	LeasesLost testsignal.Signal[int]
	// stuck counts the batches past the renewal cap with no call finished since.
	stuck atomic.Int32
	// inWrite, when set (tests), runs first in every write-back transaction with its results.
	inWrite func([]result)
}

// Stuck tells whether a batch of this dispatcher has had no provider call finish for the
// renewal cap (3 leases, or 3 provider timeouts): the process is wedged somewhere, which the
// daemon's liveness reports so that its supervisor restarts it.
func (d *Dispatcher) Stuck() bool { return d.stuck.Load() > 0 }

// New validates the config and the fetcher's limits and builds a dispatcher.
func New(pool *pgxpool.Pool, fetch Fetcher, cfg Config, log *zap.Logger) (*Dispatcher, error) {
	err := cfg.validate()
	if a, s := fetch.AuctionLimit(), fetch.SoldLimit(); a < 1 || s < 1 {
		err = errors.Join(err, fmt.Errorf("fetcher row limits %d (auction), %d (sold): must be >= 1", a, s))
	}
	if err != nil {
		return nil, fmt.Errorf("dispatcher config: %w", err)
	}
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	if cfg.Owner == "" {
		cfg.Owner = telemetry.Instance()
	}
	return &Dispatcher{pool: pool, fetch: fetch, cfg: cfg, log: log, partitions: cfg.Partitions,
		auctionLimit: fetch.AuctionLimit(), soldLimit: fetch.SoldLimit(), packSize: min(cfg.PackSize, fetch.PackLimit()),
		fails: failLog{msg: "items failed; each rescheduled by its tier"},
		gaps:  failLog{msg: "sales lost since the previous collection: a full page of only newer sales"}}, nil
}

// RunOnce is one collect-due pass: claim and collect batches until nothing is due (with
// DueAtStart: nothing that was due when it began; with Gather: until a claim comes back
// short), MaxBatches is reached, the provider stops being dispatchable, or ctx ends.
func (d *Dispatcher) RunOnce(ctx context.Context) (Summary, error) {
	began := time.Now()
	return d.pass(ctx, d.cfg.MaxBatches, func(ctx context.Context, topOnly bool, limit float64) ([]catalog.Claim, bool, error) {
		n := d.cfg.BatchSize
		if d.cfg.ClaimLimit != nil {
			n = min(n, max(1, d.cfg.ClaimLimit()))
		}
		if d.cfg.ClaimRequests != nil {
			c, cut, err := catalog.ClaimByCost(ctx, d.pool, n, d.cfg.Lease, d.cfg.Owner, d.cfg.Ahead, d.cfg.TopAhead, limit, topOnly)
			return c, !cut && len(c) < n, err
		}
		ahead := d.cfg.Ahead
		if d.cfg.DueAtStart {
			ahead = -time.Since(began) // due by the database's clock when the pass began
		}
		c, err := catalog.ClaimDue(ctx, d.pool, n, d.cfg.Lease, d.cfg.Owner, ahead)
		return c, len(c) < n, err
	})
}

// ErrNotClaimable: the item does not exist, is a synthetic fixture, or another worker holds
// its lease.
var ErrNotClaimable = errors.New("item not found, a synthetic fixture (never collected), or leased by another worker")

// CollectOne collects one item now, whatever its schedule, through the same gate, lease,
// budget and write path as collect-due.
func (d *Dispatcher) CollectOne(ctx context.Context, itemID string) (Summary, error) {
	claimed := false
	s, err := d.pass(ctx, 1, func(ctx context.Context, _ bool, _ float64) ([]catalog.Claim, bool, error) {
		c, err := catalog.ClaimOne(ctx, d.pool, itemID, d.cfg.Lease, d.cfg.Owner)
		claimed = len(c) > 0
		return c, true, err
	})
	if err == nil && !claimed && !s.Paused {
		return s, fmt.Errorf("collect %s: %w", itemID, ErrNotClaimable)
	}
	return s, err
}

// stopError is a provider answer that ends the whole pass rather than one item: maintenance,
// a rate limit that outlasted the retries, a refused key, or an address that is not the API.
type stopError struct {
	class provider.Class
	err   error
}

func (s *stopError) reason() StopReason {
	switch s.class {
	case provider.ClassMaintenance:
		return StopMaintenance
	case provider.ClassRateLimited:
		return StopRateLimited
	case provider.ClassEndpoint:
		return StopEndpoint
	}
	return StopKeyRefused
}

// pass reads the gate, then claims and collects batches until one of the stops RunOnce lists.
// claim returns a batch and whether it drained what was due (it held fewer than asked for).
// With ClaimRequests set, batches overlap: the next is claimed once the work still pending is
// small (flow.wait), claim being told the requests it may take (limit) and whether it may take
// the most urgent tier only (topOnly: the pending work holds the others back); a pass-ending
// answer in one batch halts the others.
func (d *Dispatcher) pass(ctx context.Context, maxBatches int, claim func(ctx context.Context, topOnly bool, limit float64) ([]catalog.Claim, bool, error)) (Summary, error) {
	start := time.Now()
	var sum Summary
	paused, err := d.gate(ctx, &sum)
	if err != nil || paused {
		return sum, err
	}

	var tm timings
	w := d.startWriter(ctx, &tm)
	f := newFlow(d.cfg.Concurrency)
	var batches sync.WaitGroup
	fail := func(err error) (Summary, error) {
		batches.Wait()
		// What was fetched before is still written (the writer retries a database that
		// refuses writes while the leases hold): count it.
		ws := w.finish()
		sum.Collected, sum.Failed, sum.Fenced, sum.ItemErrors = ws.collected, ws.failed, ws.fenced, ws.itemErrors()
		return sum, errors.Join(err, ws.err)
	}
	for maxBatches == 0 || sum.Batches < maxBatches {
		if d.cfg.Span > 0 && sum.Batches > 0 && time.Since(start) >= d.cfg.Span {
			sum.Stop = StopSpan
			break
		}
		topOnly, limit := false, math.MaxFloat64
		if d.cfg.ClaimRequests != nil {
			limit = d.cfg.ClaimRequests()
			full, top := f.wait(ctx, limit, d.cfg.TopAhead)
			if topOnly = !full && top; topOnly {
				limit = f.topRoom(limit)
			}
		}
		if ctx.Err() != nil {
			sum.Stop = StopInterrupted
			break
		}
		if f.stopped() != nil {
			break
		}
		if w.failed() {
			// A write-back failed for good and handed its items back: claiming on would fetch
			// them again and again (they are due) while nothing can be stored. The error ends
			// the pass; the next one tries again.
			break
		}
		// Another instance may have paused the provider (DEGRADED, an override) while this
		// pass was busy: look again before every batch, not only at the start.
		if sum.Batches > 0 {
			paused, err := d.gate(ctx, &sum)
			if err != nil {
				return fail(err)
			}
			if paused {
				break
			}
		}
		t0 := time.Now()
		cctx, cancel := store.LetFinish(ctx) // a claim under way at a stop finishes and is handed back
		claims, drained, err := claim(cctx, topOnly, limit)
		cancel()
		tm.add(&tm.claim, time.Since(t0))
		// Here, not in each claim function, so that no claim statement can skip it.
		d.cfg.WriteHealth.Observe(err)
		if err != nil {
			return fail(err)
		}
		if ctx.Err() != nil {
			// The stop came while the claim ran: its items go back at once, not after their lease.
			f.ended(d.handBack(ctx, claims), nil)
			sum.Claimed += len(claims)
			sum.Stop = StopInterrupted
			break
		}
		if topOnly {
			// Between the claims the pending work lets in, one every TopAhead takes the most
			// urgent tier's items falling due: their claim waits for no other tier's work.
			if len(claims) == 0 {
				sum.EmptyClaims++
				continue
			}
			drained = false
		} else if len(claims) == 0 {
			sum.Stop = StopNothingDue
			break
		}
		d.clock.set(claims[0].DBNow)
		d.cfg.Observer.Claimed(claims)
		sum.Batches++
		sum.Claimed += len(claims)
		for _, c := range claims {
			sum.PlannedRequests += c.Requests
		}
		f.claimed(claims)
		batches.Add(1)
		collect := func() {
			defer batches.Done()
			released, st := d.collectBatch(ctx, claims, w, &tm, f)
			f.ended(released, st)
		}
		if d.cfg.ClaimRequests != nil {
			go collect()
		} else {
			collect()
			if f.stopped() != nil {
				break
			}
		}
		if drained && d.cfg.Gather {
			sum.Stop = StopNothingDue
			break
		}
	}
	batches.Wait()
	stop := f.stopped()
	sum.Released = f.released
	ws := w.finish()
	if sum.Stop == StopNone && stop == nil && ws.err == nil {
		// The last batch ended: by its count, unless the stop came while it ran (collect
		// ITEM_ID's one batch handed back at a signal said "max batches").
		sum.Stop = StopMaxBatches
		if ctx.Err() != nil {
			sum.Stop = StopInterrupted
		}
	}
	sum.Collected, sum.Failed, sum.Fenced, sum.ItemErrors = ws.collected, ws.failed, ws.fenced, ws.itemErrors()
	sum.Duration = time.Since(start)
	sum.Claim, sum.Fetch, sum.Persist = summarize(tm.claim), summarize(tm.fetch), summarize(tm.persist)

	var retErr error
	if stop != nil {
		sum.Stop, sum.StopAnswer = stop.reason(), stop.err.Error()
		retErr = d.handleStop(ctx, stop, &sum)
	}
	if ws.err != nil {
		retErr = errors.Join(retErr, ws.err)
	}
	return sum, retErr
}

// handBack releases claims the pass will not collect; a release that fails leaves them to
// their lease.
func (d *Dispatcher) handBack(ctx context.Context, claims []catalog.Claim) int {
	if len(claims) == 0 {
		return 0
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	n, err := catalog.ReleaseLeases(rctx, d.pool, claims)
	d.cfg.WriteHealth.ObserveAnswer(err)
	if err != nil {
		d.log.Error("could not release leases; they will expire by themselves", zap.Int("items", len(claims)), zap.Error(err))
	}
	return int(n)
}

// flow is what a pass's batches share: the provider calls in flight (at most Concurrency over
// every batch), the requests their unfinished items were planned at, and the first
// pass-ending answer, which halts every batch.
type flow struct {
	slots    chan struct{}
	progress chan struct{} // a group finished
	halted   chan struct{} // closed on the first stop
	mu       sync.Mutex
	pending  float64 // requests_per_collection of the claimed items not yet through
	stop     *stopError
	released int
	// The probes that tell an item's own answer from everyone's (ownAnswer), one at a time.
	probing    sync.Mutex
	probesLeft int
}

func newFlow(concurrency int) *flow {
	return &flow{slots: make(chan struct{}, concurrency), progress: make(chan struct{}, 1), halted: make(chan struct{}),
		probesLeft: probeCap}
}

func (f *flow) claimed(claims []catalog.Claim) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range claims {
		f.pending += c.Requests
	}
}

// finished takes a group that went through (collected, failed or handed back) off the pending
// work.
func (f *flow) finished(group []catalog.Claim) {
	f.mu.Lock()
	for _, c := range group {
		f.pending -= c.Requests
	}
	f.mu.Unlock()
	select {
	case f.progress <- struct{}{}:
	default:
	}
}

// topPending is how many times ClaimRequests the pending work may reach with claims of the most
// urgent tier alone: room for a few HOT items falling due together beside the other tiers'
// work (at the daemon's default horizon, a second of budget), and a bound on what a tier over
// the budget can pile up.
const topPending = 4

// wait blocks while the pending work exceeds requests, until a stop or ctx ends, and says
// what may be claimed: full when the pending work is at most requests. After within (0:
// never), top when a claim of requests more keeps it within topPending times that: the most
// urgent tier alone, up to the rest of that (topRoom). The pending work, HOT included, thus
// stays bounded however much is due, and a top claim always has room for a full claim's items:
// a sliver of room would take the HOT items one at a time, each too alone to share a call.
func (f *flow) wait(ctx context.Context, requests float64, within time.Duration) (full, top bool) {
	var timeout <-chan time.Time
	if within > 0 {
		t := time.NewTimer(within)
		defer t.Stop()
		timeout = t.C
	}
	expired := false
	for {
		f.mu.Lock()
		full, top = mayClaim(f.pending, requests, expired)
		f.mu.Unlock()
		if full || top {
			return full, top
		}
		select {
		case <-f.progress:
		case <-timeout:
			expired, timeout = true, nil
		case <-f.halted:
			return false, false
		case <-ctx.Done():
			return false, false
		}
	}
}

// mayClaim is wait's rule (a small slack absorbs the float sums' rounding).
func mayClaim(pending, requests float64, expired bool) (full, top bool) {
	full = pending <= requests+1e-6
	top = expired && pending+requests <= topPending*requests+1e-6
	return full, top
}

// topRoom is what a claim of the most urgent tier alone may add to the pending work: up to
// topPending times requests in all (at least one item, as every claim).
func (f *flow) topRoom(requests float64) float64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return max(topPending*requests-f.pending, 0)
}

// ended records a batch's outcome.
func (f *flow) ended(released int, st *stopError) {
	f.halt(st)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.released += released
}

// halt records a pass-ending answer (nil: none) the moment a batch gets it; the first halts
// every batch, so that no other call goes out.
func (f *flow) halt(st *stopError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if st != nil && f.stop == nil {
		f.stop = st
		close(f.halted)
	}
}

// waitProbe holds a new call while a probe asks whether an answer is everyone's (ownAnswer):
// when it is, the pass stops before the call goes out.
func (f *flow) waitProbe() {
	f.probing.Lock()
	defer f.probing.Unlock()
}

func (f *flow) stopped() *stopError {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stop
}

// handleStop records what a pass-ending provider answer means for everyone.
func (d *Dispatcher) handleStop(ctx context.Context, st *stopError, sum *Summary) error {
	switch st.class {
	case provider.ClassMaintenance:
		// Recorded even when the pass was cancelled, but never waited on for good: a hung
		// statement here would hold the pass's end and the daemon's shutdown.
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		changed, err := provider.SetStatus(sctx, d.pool, d.cfg.Provider, provider.Maintenance, st.err.Error())
		since := time.Now()
		if err == nil {
			// For the summary's "paused since" (year 1 without it); the status is recorded
			// whether or not this read works.
			if row, rerr := provider.ReadStatus(sctx, d.pool, d.cfg.Provider); rerr == nil {
				since = row.Since
			}
		}
		cancel()
		if err != nil {
			return err
		}
		if changed {
			d.log.Warn("maintenance answer: provider set to MAINTENANCE, pass stopped", zap.String("provider", d.cfg.Provider), zap.Error(st.err))
		}
		sum.Paused, sum.Status, sum.StatusReason, sum.StatusSince = true, provider.Maintenance, st.err.Error(), since
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
