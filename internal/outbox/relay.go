package outbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/store"
)

// Relay publishes outbox rows to Kafka. RunOnce drains what is pending and returns; Run
// follows the table until its context ends. A Relay runs one of them at a time; several
// Relays (in one process or many) may run at once and split the lanes between them.
type Relay struct {
	pool      *pgxpool.Pool
	cfg       RelayConfig
	log       *zap.Logger
	transport *kafka.Transport
	writer    *kafka.Writer
	client    *kafka.Client
	lanes     *laneSet
	topicOK   bool
	running   atomic.Bool

	mu      sync.Mutex
	total   Result
	stopped error // why the relay stopped for good (nil while it works)
}

// Result is what a pass did.
type Result struct {
	Published int64 // rows acknowledged by Kafka and marked published
	Failed    int64 // rows the broker rejected permanently, marked failed
	Batches   int
	Pruned    int64 // published rows deleted (follow mode)

	LanesHeld   int      // lanes this relay held at the end of the pass
	LanesBusy   int      // lanes other relays held, left to them
	PendingBusy int64    // pending rows in those lanes
	BusyOwners  []string // who holds them
}

func (a *Result) add(b Result) {
	a.Published += b.Published
	a.Failed += b.Failed
	a.Batches += b.Batches
	a.Pruned += b.Pruned
}

// NewRelay validates cfg and prepares the Kafka writer; it connects to nothing yet.
func NewRelay(pool *pgxpool.Pool, cfg RelayConfig, log *zap.Logger) (*Relay, error) {
	if pool == nil {
		return nil, errors.New("outbox relay: nil database pool")
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	t, err := newTransport(cfg)
	if err != nil {
		return nil, err
	}
	return &Relay{
		pool:      pool,
		cfg:       cfg,
		log:       log.With(zap.String("topic", cfg.Topic), zap.String("relay", cfg.Owner)),
		transport: t,
		writer:    newWriter(cfg, t),
		client:    &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: cfg.WriteTimeout, Transport: t},
		lanes:     &laneSet{pool: pool, owner: cfg.Owner, lease: cfg.Lease, held: map[int16]laneLease{}},
	}, nil
}

// Totals adds up every pass and batch so far.
func (r *Relay) Totals() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// Health reports whether the relay can still publish, and if not, why: it is down once Run
// or RunOnce stopped on an error retrying cannot fix (a missing topic, refused authorization,
// a panic). Broker outages and database errors are retried and leave it up.
func (r *Relay) Health() (up bool, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped != nil {
		return false, r.stopped.Error()
	}
	return true, ""
}

// Close releases the Kafka connections. Call it after RunOnce/Run returned.
func (r *Relay) Close() error {
	err := r.writer.Close()
	r.transport.CloseIdleConnections()
	return err
}

// RunOnce publishes everything pending in the lanes it can lease, then releases them. Lanes
// leased by another relay are left to it and reported in Result (not an error). A failing
// broker is retried kafka.retry.attempts times with backoff, then RunOnce returns an error;
// rows that were not acknowledged stay pending.
func (r *Relay) RunOnce(ctx context.Context) (res Result, err error) {
	if !r.running.CompareAndSwap(false, true) {
		return res, errRunning
	}
	defer r.running.Store(false)
	start := r.Totals()
	err = r.loop(ctx, &schedule{}, nil)
	res = r.Totals()
	res.Published, res.Failed, res.Batches = res.Published-start.Published, res.Failed-start.Failed, res.Batches-start.Batches
	res.Pruned, res.LanesHeld = 0, len(r.lanes.held)
	if err == nil {
		err = r.lanes.busy(ctx, &res)
	}
	r.releaseLanes(ctx)
	if err == nil {
		r.log.Info("outbox relay pass done",
			zap.Int64("published", res.Published), zap.Int64("failed", res.Failed), zap.Int("batches", res.Batches),
			zap.Int("lanes_held", res.LanesHeld), zap.Int("lanes_busy", res.LanesBusy), zap.Int64("pending_busy", res.PendingBusy))
	}
	return res, err
}

// Run follows the outbox until ctx ends (then it returns nil): it publishes as rows commit
// (woken by a notification, or every kafka.poll_interval), takes over free lanes, prunes, and
// retries forever while the broker or the database is down. It returns an error only for what
// retrying cannot fix; Health then says why. It holds one pooled connection for LISTEN.
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errRunning
	}
	defer r.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	var listener sync.WaitGroup
	defer listener.Wait()
	defer cancel()
	wake := make(chan struct{}, 1)
	listener.Go(func() { r.listen(ctx, wake) })
	err := r.loop(ctx, &schedule{acquireEvery: min(r.cfg.PollInterval, r.cfg.Lease/4), prune: true}, wake)
	r.releaseLanes(ctx)
	if ctx.Err() != nil && !permanent(err) {
		return nil
	}
	return err
}

// loop takes turns until nothing is left to publish (RunOnce: wake == nil, giving up after
// kafka.retry.attempts failures in a row) or ctx ends (Run), or on a permanent error.
func (r *Relay) loop(ctx context.Context, s *schedule, wake <-chan struct{}) (err error) {
	defer r.catchPanic(&err)
	for failures := 0; ctx.Err() == nil; {
		idle, err := r.turn(ctx, s)
		switch {
		case err == nil && idle && wake == nil:
			return nil
		case err == nil:
			failures = 0
			if idle {
				r.cfg.Test.Idle.Signal(struct{}{})
				_ = r.wait(ctx, r.cfg.PollInterval, wake)
			}
		case ctx.Err() != nil:
		default:
			failures++
			if err := r.failed(ctx, err); err != nil {
				return err
			}
			if wake == nil && failures >= r.cfg.Retry.Attempts {
				return fmt.Errorf("outbox relay gave up after %d attempts (kafka.retry.attempts); unpublished rows stay in the outbox: %w", failures, err)
			}
			d := r.backoff(failures)
			r.log.Warn("relay attempt failed, backing off", zap.Error(err), zap.Int("failures", failures), zap.Duration("backoff_seconds", d))
			_ = r.wait(ctx, d, nil)
		}
	}
	return ctx.Err()
}

var errRunning = errors.New("outbox relay: RunOnce or Run called while the relay is running")

// schedule is when the loop next acquires free lanes (once when acquireEvery is 0) and prunes.
type schedule struct {
	acquireEvery           time.Duration
	prune                  bool
	nextAcquire, nextPrune time.Time
}

// turn does the first due of: checking the topic, acquiring free lanes, pruning, publishing a
// batch. It reports idle when there was nothing to publish.
func (r *Relay) turn(ctx context.Context, s *schedule) (idle bool, err error) {
	now := time.Now()
	switch {
	case !r.topicOK:
		return false, r.checkTopic(ctx)
	case s.nextAcquire.IsZero() || (s.acquireEvery > 0 && now.After(s.nextAcquire)):
		got, err := r.lanes.acquire(ctx)
		if err == nil {
			s.nextAcquire = now.Add(s.acquireEvery)
		}
		if len(got) > 0 {
			r.log.Info("acquired outbox lanes", zap.Int16s("lanes", got), zap.Int("held", len(r.lanes.held)))
		}
		return false, err
	case s.prune && now.After(s.nextPrune):
		// A bounded number of statements per turn, so that old rows do not hold up publishing.
		n, more, err := prune(ctx, r.pool, r.cfg.OutboxRetention, r.cfg.PruneBatch, 10)
		r.record(Result{Pruned: n})
		s.nextPrune = now.Add(r.cfg.PruneInterval)
		if more {
			s.nextPrune = now
		}
		if n > 0 {
			r.log.Info("pruned published outbox rows", zap.Int64("deleted", n), zap.Duration("older_than_seconds", r.cfg.OutboxRetention))
		}
		return false, err
	}
	n, err := r.step(ctx)
	return n == 0 && err == nil, err
}

// checkTopic runs ensureTopic; a relay that gets past it works, so it clears the stop notes.
func (r *Relay) checkTopic(ctx context.Context) error {
	if err := r.ensureTopic(ctx); err != nil {
		return err
	}
	r.topicOK = true
	if err := clearStops(ctx, r.pool); err != nil {
		r.log.Warn("could not clear the outbox relay stop notes", zap.Error(err))
	}
	return nil
}

// failed reports a failed attempt; a permanent one puts the relay down (Health), is noted in
// outbox_relay_stops and returned.
func (r *Relay) failed(ctx context.Context, err error) error {
	r.cfg.Test.PublishError.Signal(err)
	r.onError(reasonOf(err))
	if !permanent(err) {
		return nil
	}
	r.mu.Lock()
	r.stopped = err
	r.mu.Unlock()
	r.log.Error("outbox relay stopped; the outbox grows until a relay runs again", zap.Error(err))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := recordStop(ctx, r.pool, r.cfg.Owner, err.Error()); err != nil {
		r.log.Warn("could not note the relay's stop in outbox_relay_stops", zap.Error(err))
	}
	return err
}

// catchPanic turns a panic (a bug) into a stop the daemon reports, instead of a crash.
func (r *Relay) catchPanic(err *error) {
	if p := recover(); p != nil {
		*err = r.failed(context.Background(), &relayError{reason: "panic", permanent: true, err: fmt.Errorf("outbox relay panicked: %v", p)})
	}
}

func (r *Relay) onError(reason string) {
	if r.cfg.OnError != nil {
		r.cfg.OnError(reason)
	}
}

// step reads, produces and marks one batch from the held lanes and returns how many rows it
// read (0 = nothing pending); rows not acknowledged stay pending.
func (r *Relay) step(ctx context.Context) (int, error) {
	if err := r.renewIfDue(ctx); err != nil {
		return 0, err
	}
	lanes := r.lanes.usable(r.publishWindow())
	if len(lanes) == 0 {
		return 0, nil
	}
	rows, err := readPending(ctx, r.pool, lanes, callsPerBatch*r.cfg.BatchSize)
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	out := r.publish(ctx, rows)

	// Like the produce call, marking what was delivered is finished even when ctx ends.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	marked, now, err := markSettled(mctx, r.pool, r.lanes.tokens(), out)
	if err == nil && r.recorded(out, marked, now) {
		_, err = r.lanes.renew(ctx) // forgets the lanes another relay took over
	}
	if out.err != nil && len(out.pending) > 0 {
		if aerr := recordAttempt(mctx, r.pool, out.pending, out.err.Error()); aerr != nil {
			r.log.Warn("could not record failed attempt", zap.Error(aerr))
		}
	}
	return len(rows), errors.Join(out.err, err)
}

// recorded accounts for a marked batch and reports whether some rows were not marked because
// their lane went to another relay (which publishes them again).
func (r *Relay) recorded(out outcome, marked map[int64]bool, now time.Time) (lost bool) {
	var published []int64
	var ages []float64
	batch := Result{Batches: 1}
	for i, row := range out.settled {
		switch {
		case !marked[row.ID]:
			lost = true
		case out.reasons[i] == "":
			published = append(published, row.ID)
			ages = append(ages, now.Sub(row.CreatedAt).Seconds())
		default:
			batch.Failed++
			r.log.Error("kafka rejected outbox event; marked failed until retried",
				zap.Int64("outbox_id", row.ID), zap.String("error", out.reasons[i]))
			r.onError("rejected")
		}
	}
	if r.cfg.OnPublished != nil && len(ages) > 0 {
		r.cfg.OnPublished(ages)
	}
	batch.Published = int64(len(published))
	r.record(batch)
	if len(published) > 0 {
		r.cfg.Test.Published.Signal(published)
	}
	if lost {
		r.log.Warn("outbox rows not marked: their lanes went to another relay")
	}
	return lost
}

func (r *Relay) record(b Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total.add(b)
}

// callsPerBatch produce calls' worth of rows per read and mark spread the database's cost per
// statement, while each produce request keeps the configured size.
const callsPerBatch = 4

// publishWindow is how much lease a lane needs left to start a produce call on it: the write
// timeout, plus as much again for a produce request kafka-go may still be finishing after it.
func (r *Relay) publishWindow() time.Duration { return 2 * r.cfg.WriteTimeout }

// outcome is what publishing a batch decided: rows settled (acknowledged, or rejected with a
// reason), and rows left pending because of err or a lease running short (cut).
type outcome struct {
	settled []pendingRow
	reasons []string // per settled row; "" = acknowledged
	pending []int64
	err     error
	cut     bool
}

func (o *outcome) settle(row pendingRow, rejectedBy error) {
	o.settled = append(o.settled, row)
	o.reasons = append(o.reasons, "")
	if rejectedBy != nil {
		o.reasons[len(o.reasons)-1] = rejectedBy.Error()
	}
}

func (o *outcome) keep(rows ...pendingRow) {
	for _, row := range rows {
		o.pending = append(o.pending, row.ID)
	}
}

// publish sends rows in id order, in produce calls that are one request per partition. It
// stops at the first call failing other than by rejection, so no later event of an item can
// overtake an earlier one that was not acknowledged.
func (r *Relay) publish(ctx context.Context, rows []pendingRow) outcome {
	var out outcome
	for calls := 0; len(rows) > 0 && out.err == nil && !out.cut; {
		msgs := r.nextCall(rows)
		switch {
		case len(msgs) == 0:
			n := messageSize(message(rows[0], r.cfg.Source))
			out.settle(rows[0], fmt.Errorf("event of about %d bytes is larger than kafka.batch_bytes (%d)", n, r.cfg.BatchBytes))
			rows = rows[1:]
		case calls > 0 && time.Until(r.lanes.minValid()) < r.publishWindow():
			// The step checked the lease for the first call; the rest waits for a renewal.
			out.cut = true
		default:
			r.writeCall(ctx, rows[:len(msgs)], msgs, &out)
			rows, calls = rows[len(msgs):], calls+1
		}
	}
	out.keep(rows...)
	return out
}

// nextCall builds the next produce call (kafka.batch_size and batch_bytes), empty when the
// first row alone is too large.
func (r *Relay) nextCall(rows []pendingRow) []kafka.Message {
	var msgs []kafka.Message
	var size int64
	for _, row := range rows[:min(len(rows), r.cfg.BatchSize)] {
		m := message(row, r.cfg.Source)
		if size += messageSize(m); size > r.cfg.BatchBytes {
			break
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// writeCall publishes one produce call's messages. Messages of a partition whose request was
// rejected are retried one by one in id order to find which of them the broker refuses.
func (r *Relay) writeCall(ctx context.Context, rows []pendingRow, msgs []kafka.Message, out *outcome) {
	err := r.write(ctx, msgs)
	werrs := make(kafka.WriteErrors, len(msgs))
	if err != nil && (!errors.As(err, &werrs) || len(werrs) != len(msgs)) {
		out.err = r.wrapWriteErr(len(msgs), err)
		out.keep(rows...)
		return
	}
	for i, row := range rows {
		e := werrs[i]
		if e != nil && rejected(e) && out.err == nil {
			e = r.writeOne(ctx, msgs[i])
		}
		switch {
		case e == nil || (rejected(e) && out.err == nil):
			out.settle(row, e)
		default:
			if out.err == nil {
				out.err = r.wrapWriteErr(len(msgs), e)
			}
			out.keep(row)
		}
	}
}

// write is not cancelled with ctx (only bounded by the write timeout): kafka-go may deliver an
// abandoned call anyway, and a stopping relay should know what it delivered and mark it.
func (r *Relay) write(ctx context.Context, msgs []kafka.Message) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	return r.writer.WriteMessages(ctx, msgs...)
}

// writeOne returns the broker's own error for msg, which reads better in last_error.
func (r *Relay) writeOne(ctx context.Context, msg kafka.Message) error {
	err := r.write(ctx, []kafka.Message{msg})
	var werrs kafka.WriteErrors
	if errors.As(err, &werrs) && len(werrs) == 1 {
		return werrs[0]
	}
	return err
}

func (r *Relay) wrapWriteErr(n int, err error) error {
	return brokerError(fmt.Errorf("publish %d events to kafka topic %s at %s: %w", n, r.cfg.Topic, strings.Join(r.cfg.Brokers, ","), err))
}

// renewIfDue renews a quarter of a lease after the last renewal, leaving well over two write
// timeouts for the next batch.
func (r *Relay) renewIfDue(ctx context.Context) error {
	if len(r.lanes.held) == 0 || time.Now().Before(r.renewAt()) {
		return nil
	}
	lost, err := r.lanes.renew(ctx)
	if len(lost) > 0 {
		r.log.Warn("outbox lanes taken over by another relay after our lease expired", zap.Int16s("lanes", lost))
	}
	return err
}

func (r *Relay) renewAt() time.Time { return r.lanes.minValid().Add(-r.cfg.Lease * 3 / 4) }

// wait sleeps for d, until wake fires or ctx ends, renewing leases when due so that a relay
// backing off from a broker outage keeps its lanes.
func (r *Relay) wait(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	end := time.Now().Add(d)
	for {
		renewErr := r.renewIfDue(ctx)
		if renewErr != nil && ctx.Err() == nil {
			r.log.Warn("could not renew outbox lane leases", zap.Error(renewErr))
		}
		left := time.Until(end)
		if left <= 0 {
			return nil
		}
		if renewErr == nil && len(r.lanes.held) > 0 {
			left = max(min(left, time.Until(r.renewAt())), time.Millisecond)
		}
		t := time.NewTimer(left)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-wake:
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// backoff doubles from kafka.retry.backoff_min up to backoff_max, jittered so that relays
// restarted together do not retry in lockstep.
func (r *Relay) backoff(failures int) time.Duration { return r.retry().Delay(failures) }

func (r *Relay) retry() backoff.Policy {
	return backoff.Policy{Min: r.cfg.Retry.BackoffMin, Max: r.cfg.Retry.BackoffMax, Jitter: true}
}

// releaseLanes hands the lanes back even when ctx is already cancelled (the usual way out).
func (r *Relay) releaseLanes(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.lanes.release(ctx); err != nil {
		r.log.Warn("could not release outbox lanes; they free up when the lease expires", zap.Error(err))
	}
}

// listen turns outbox notifications into wake-ups, reconnecting after errors (polling meanwhile).
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	store.Listen(ctx, store.ListenConfig{Pool: r.pool, Channel: "outbox_pending", Retry: r.retry()}, wake, func(err error, _ int) {
		r.log.Warn("outbox notifications interrupted; polling until reconnected", zap.Error(err))
	})
}
