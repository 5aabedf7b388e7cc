package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"
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

	LanesHeld   int      // lanes this relay held at the start of the pass
	LanesBusy   int      // lanes other relays held, left to them
	PendingBusy int64    // pending rows in those lanes
	BusyOwners  []string // who holds them
}

// NewRelay validates cfg and prepares the Kafka writer; it connects to
// nothing until RunOnce or Run.
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
		lanes:     newLaneSet(pool, cfg.Owner, cfg.Lease),
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
		return res, errors.New("outbox relay: RunOnce called while the relay is running")
	}
	defer r.running.Store(false)
	defer r.releaseLanes(ctx)
	defer r.catchPanic(&err)

	acquired := false
	for failures := 0; ; {
		n, err := r.drainStep(ctx, &res, &acquired)
		if err == nil {
			failures = 0
			if n == 0 {
				break
			}
			continue
		}
		failures++
		if err := r.failed(ctx, err); err != nil {
			return res, err
		}
		if failures >= r.cfg.Retry.Attempts {
			return res, fmt.Errorf("relay-outbox gave up after %d attempts (kafka.retry.attempts); unpublished rows stay in the outbox: %w", failures, err)
		}
		if err := r.backOff(ctx, failures, err); err != nil {
			return res, err
		}
	}
	if err := r.lanes.busy(ctx, &res); err != nil {
		return res, err
	}
	r.log.Info("outbox relay pass done",
		zap.Int64("published", res.Published), zap.Int64("failed", res.Failed), zap.Int("batches", res.Batches),
		zap.Int("lanes_held", res.LanesHeld), zap.Int("lanes_busy", res.LanesBusy), zap.Int64("pending_busy", res.PendingBusy))
	return res, nil
}

// drainStep is one step of RunOnce: the topic check and the lane acquisition until they
// succeed, then one batch.
func (r *Relay) drainStep(ctx context.Context, res *Result, acquired *bool) (int, error) {
	if err := r.checkTopic(ctx); err != nil {
		return 0, err
	}
	if !*acquired {
		if _, err := r.lanes.acquire(ctx); err != nil {
			return 0, err
		}
		*acquired, res.LanesHeld = true, len(r.lanes.held)
	}
	return r.step(ctx, res)
}

// Run follows the outbox until ctx ends (then it returns nil): it publishes as rows commit
// (woken by a notification, or every PollInterval), takes over lanes that other relays free
// or abandon, prunes published rows every PruneInterval, and backs off and retries forever
// while the broker or the database is unavailable. It returns an error only for what
// retrying cannot fix, such as a missing topic it may not create; Health then says why.
//
// Run holds one pooled connection for LISTEN while it runs, and one more while it reads or
// marks a batch, never while it waits for Kafka.
func (r *Relay) Run(ctx context.Context) (err error) {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("outbox relay: Run called while the relay is running")
	}
	defer r.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	var listener sync.WaitGroup
	defer listener.Wait()
	defer cancel()
	defer r.releaseLanes(ctx)
	defer r.catchPanic(&err)

	wake := make(chan struct{}, 1)
	listener.Go(func() { r.listen(ctx, wake) })
	f := follower{acquireEvery: min(r.cfg.PollInterval, r.cfg.Lease/4)}
	for failures := 0; ctx.Err() == nil; {
		idle, err := r.followStep(ctx, &f)
		switch {
		case err == nil:
			failures = 0
			if idle {
				r.cfg.Test.idle()
				_ = r.wait(ctx, r.cfg.PollInterval, wake)
			}
		case ctx.Err() != nil:
		default:
			failures++
			if err := r.failed(ctx, err); err != nil {
				return err
			}
			_ = r.backOff(ctx, failures, err)
		}
	}
	return nil
}

// follower is when Run next acquires free lanes and prunes.
type follower struct {
	acquireEvery           time.Duration
	nextAcquire, nextPrune time.Time
}

// followStep does one thing Run has to do, the first due of: checking the topic, acquiring
// free lanes, pruning, publishing a batch. It reports idle when there was nothing to publish.
func (r *Relay) followStep(ctx context.Context, f *follower) (idle bool, err error) {
	now := time.Now()
	switch {
	case !r.topicOK:
		return false, r.checkTopic(ctx)
	case now.After(f.nextAcquire):
		f.nextAcquire = now.Add(f.acquireEvery)
		got, err := r.lanes.acquire(ctx)
		if len(got) > 0 {
			r.log.Info("acquired outbox lanes", zap.Int16s("lanes", got), zap.Int("held", len(r.lanes.held)))
		}
		return false, err
	case now.After(f.nextPrune):
		// A bounded number of statements per turn, so a large backlog of old rows does not
		// hold up publishing or lease renewal.
		n, more, err := prune(ctx, r.pool, r.cfg.OutboxRetention, r.cfg.PruneBatch, 10)
		r.add(Result{Pruned: n})
		f.nextPrune = now.Add(r.cfg.PruneInterval)
		if more {
			f.nextPrune = now
		}
		if n > 0 {
			r.log.Info("pruned published outbox rows", zap.Int64("deleted", n), zap.Duration("older_than_seconds", r.cfg.OutboxRetention))
		}
		return false, err
	}
	var res Result // totals go to r.total per batch
	n, err := r.step(ctx, &res)
	return n == 0 && err == nil, err
}

// checkTopic runs ensureTopic until it succeeds once; a relay that gets this far works, so
// it clears the notes of relays that stopped for good.
func (r *Relay) checkTopic(ctx context.Context) error {
	if r.topicOK {
		return nil
	}
	if err := r.ensureTopic(ctx); err != nil {
		return err
	}
	r.topicOK = true
	if err := clearStops(ctx, r.pool); err != nil {
		r.log.Warn("could not clear the outbox relay stop notes", zap.Error(err))
	}
	return nil
}

// failed reports a failed attempt and returns err when it is permanent: the relay is then
// down (Health), and the reason is noted in the database for `collector status`.
func (r *Relay) failed(ctx context.Context, err error) error {
	r.cfg.Test.publishError(err)
	if r.cfg.OnError != nil {
		r.cfg.OnError(reasonOf(err))
	}
	if !permanent(err) {
		return nil
	}
	r.stop(ctx, err)
	return err
}

// stop marks the relay down for good.
func (r *Relay) stop(ctx context.Context, err error) {
	r.mu.Lock()
	r.stopped = err
	r.mu.Unlock()
	r.log.Error("outbox relay stopped; the outbox grows until a relay runs again", zap.Error(err))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := recordStop(ctx, r.pool, r.cfg.Owner, err.Error()); err != nil {
		r.log.Warn("could not note the relay's stop for collector status", zap.Error(err))
	}
}

// catchPanic turns a panic (a bug) into a stop the daemon reports, instead of a crash.
func (r *Relay) catchPanic(err *error) {
	if p := recover(); p != nil {
		*err = &relayError{reason: "panic", permanent: true, err: fmt.Errorf("outbox relay panicked: %v", p)}
		r.stop(context.Background(), *err)
	}
}

func (r *Relay) backOff(ctx context.Context, failures int, err error) error {
	d := r.backoff(failures)
	r.log.Warn("relay attempt failed, backing off", zap.Error(err), zap.Int("failures", failures), zap.Duration("backoff_seconds", d))
	return r.wait(ctx, d, nil)
}

// step publishes one batch from the held lanes and returns how many rows it read (0 = nothing
// pending in them), or an error when the batch could not be fully published or marked; rows
// not acknowledged stay pending either way. Read, produce and mark are three steps in turn:
// the connection goes back to the pool after the read, and the mark is fenced by the lane
// tokens, so a relay that lost a lane meanwhile marks nothing there.
func (r *Relay) step(ctx context.Context, res *Result) (int, error) {
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
	if err == nil && r.recorded(res, out, marked, now) {
		_, err = r.lanes.renew(ctx) // forgets the lanes another relay took over
	}
	if out.err != nil && len(out.pending) > 0 {
		if aerr := recordAttempt(mctx, r.pool, out.pending, out.err.Error()); aerr != nil {
			r.log.Warn("could not record failed attempt", zap.Error(aerr))
		}
	}
	return len(rows), errors.Join(out.err, err)
}

// recorded accounts for a marked batch and reports whether some of its rows were not marked
// because their lane went to another relay (which publishes them again).
func (r *Relay) recorded(res *Result, out outcome, marked map[int64]bool, now time.Time) (lost bool) {
	var published, failed []int64
	var ages []float64
	for i, id := range out.published {
		if marked[id] {
			published = append(published, id)
			ages = append(ages, now.Sub(out.created[i]).Seconds())
		}
	}
	for i, id := range out.failed {
		if marked[id] {
			failed = append(failed, id)
			r.log.Error("kafka rejected outbox event; marked failed (collector outbox retry to resend)",
				zap.Int64("outbox_id", id), zap.String("error", out.failedErrs[i]))
			if r.cfg.OnError != nil {
				r.cfg.OnError("rejected")
			}
		}
	}
	if r.cfg.OnPublished != nil && len(ages) > 0 {
		r.cfg.OnPublished(ages)
	}
	batch := Result{Published: int64(len(published)), Failed: int64(len(failed)), Batches: 1}
	res.Published += batch.Published
	res.Failed += batch.Failed
	res.Batches++
	r.add(batch)
	r.cfg.Test.published(published)
	if n := len(out.published) + len(out.failed) - len(published) - len(failed); n > 0 {
		r.log.Warn("outbox rows not marked: their lanes went to another relay", zap.Int("rows", n))
		return true
	}
	return false
}

// callsPerBatch is how many produce calls' worth of rows one read and one mark cover: the
// database's cost per statement is spread over more rows, while each produce request keeps
// the configured size, which is what the broker sees.
const callsPerBatch = 4

// publishWindow is how much lease a lane needs left to start a produce call on it: the write
// timeout, plus as much again for a produce request kafka-go may still be finishing after it.
func (r *Relay) publishWindow() time.Duration { return 2 * r.cfg.WriteTimeout }

func (r *Relay) add(b Result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.total.Published += b.Published
	r.total.Failed += b.Failed
	r.total.Batches += b.Batches
	r.total.Pruned += b.Pruned
}

// outcome is what publishing a batch decided: rows acknowledged (with their creation times,
// for the publish latency), rows rejected for good (with the broker's reason), and rows still
// pending because of err, or because the lease ran short (cut).
type outcome struct {
	published  []int64
	created    []time.Time
	failed     []int64
	failedErrs []string
	pending    []int64
	err        error
	cut        bool
}

func (o *outcome) stopped() bool { return o.err != nil || o.cut }

func (o *outcome) decide(row pendingRow, rejectedBy error) {
	if rejectedBy == nil {
		o.published = append(o.published, row.ID)
		o.created = append(o.created, row.CreatedAt)
		return
	}
	o.failed = append(o.failed, row.ID)
	o.failedErrs = append(o.failedErrs, rejectedBy.Error())
}

// publish sends rows in id order, in produce calls of at most BatchSize messages and
// BatchBytes so that each call is one produce request per partition. It stops at the first
// call that fails for a reason other than a rejected message: the rest stays pending, so no
// later event of an item can overtake an earlier one that was not acknowledged.
func (r *Relay) publish(ctx context.Context, rows []pendingRow) outcome {
	var out outcome
	var chunk []pendingRow
	var msgs []kafka.Message
	var size int64
	calls := 0
	flush := func() {
		// The lease was checked for one call when the batch started; every further call
		// checks again, and the rest waits for the next step (after a renewal).
		if len(chunk) > 0 && !out.stopped() && calls > 0 && time.Until(r.lanes.minValid()) < r.publishWindow() {
			out.cut = true
		}
		if len(chunk) > 0 && !out.stopped() {
			r.writeChunk(ctx, chunk, msgs, &out)
			calls++
		} else {
			for _, row := range chunk {
				out.pending = append(out.pending, row.ID)
			}
		}
		chunk, msgs, size = chunk[:0], msgs[:0], 0
	}
	for _, row := range rows {
		msg := message(row, r.cfg.Source)
		n := messageSize(msg)
		if n > r.cfg.BatchBytes && out.stopped() {
			out.pending = append(out.pending, row.ID)
			continue
		}
		if n > r.cfg.BatchBytes {
			out.decide(row, fmt.Errorf("event of about %d bytes is larger than kafka.batch_bytes (%d)", n, r.cfg.BatchBytes))
			continue
		}
		if size+n > r.cfg.BatchBytes || len(chunk) == r.cfg.BatchSize {
			flush()
		}
		chunk, msgs, size = append(chunk, row), append(msgs, msg), size+n
	}
	flush()
	return out
}

// writeChunk publishes one produce call's messages. Messages of a partition whose request
// was rejected are retried one by one in id order to find which of them the broker refuses.
func (r *Relay) writeChunk(ctx context.Context, rows []pendingRow, msgs []kafka.Message, out *outcome) {
	err := r.write(ctx, msgs)
	var werrs kafka.WriteErrors
	switch {
	case err == nil:
		for _, row := range rows {
			out.decide(row, nil)
		}
		return
	case !errors.As(err, &werrs) || len(werrs) != len(msgs):
		out.err = r.wrapWriteErr(len(msgs), err)
		for _, row := range rows {
			out.pending = append(out.pending, row.ID)
		}
		return
	}
	for i, row := range rows {
		e := werrs[i]
		if e != nil && rejected(e) && out.err == nil {
			e = r.writeOne(ctx, msgs[i])
		}
		switch {
		case e == nil:
			out.decide(row, nil)
		case rejected(e) && out.err == nil:
			out.decide(row, e)
		default:
			if out.err == nil {
				out.err = r.wrapWriteErr(len(msgs), e)
			}
			out.pending = append(out.pending, row.ID)
		}
	}
}

// write sends messages and waits for the outcome. It is bounded by the write timeout but not
// cancelled with ctx: kafka-go may still deliver a batch after an abandoned call returns, and
// a stopping relay should know what it delivered, mark it, and not leave it to be re-sent.
func (r *Relay) write(ctx context.Context, msgs []kafka.Message) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	return r.writer.WriteMessages(ctx, msgs...)
}

// writeOne sends one message alone and returns the broker's own error for it, which reads
// better in last_error than kafka-go's list of one.
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

// renewIfDue renews the leases a quarter of a lease after the last renewal, which leaves
// well over two write timeouts of lease for the next batch.
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

// wait sleeps for d, until wake fires or ctx ends, renewing leases when they are due so that
// a relay backing off from a broker outage keeps its lanes.
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

// backoff doubles from BackoffMin up to BackoffMax, with jitter so that relays restarted
// together do not retry in lockstep.
func (r *Relay) backoff(failures int) time.Duration {
	d := r.cfg.Retry.BackoffMax
	if failures < 32 {
		if b := r.cfg.Retry.BackoffMin << (failures - 1); b > 0 && b < d {
			d = b
		}
	}
	return d/2 + rand.N(d/2+1)
}

// releaseLanes hands the lanes back even when ctx is already cancelled (the usual way out).
func (r *Relay) releaseLanes(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.lanes.release(ctx); err != nil {
		r.log.Warn("could not release outbox lanes; they free up when the lease expires", zap.Error(err))
	}
}

// listen turns outbox notifications into wake-ups, reconnecting after errors; meanwhile the
// relay falls back to polling every PollInterval.
func (r *Relay) listen(ctx context.Context, wake chan<- struct{}) {
	for failures := 1; ctx.Err() == nil; failures++ {
		err := r.listenOnce(ctx, wake)
		if ctx.Err() != nil {
			return
		}
		r.log.Warn("outbox notifications interrupted; polling until reconnected", zap.Error(err))
		t := time.NewTimer(r.backoff(failures))
		select {
		case <-ctx.Done():
			t.Stop()
		case <-t.C:
		}
	}
}

func (r *Relay) listenOnce(ctx context.Context, wake chan<- struct{}) error {
	conn, err := r.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("acquire connection for LISTEN: %w", err)
	}
	// A LISTENing connection must not go back to the pool (it would keep collecting
	// notifications), so it is taken out and closed.
	pc := conn.Hijack()
	defer pc.Close(context.WithoutCancel(ctx))
	if _, err := pc.Exec(ctx, "LISTEN outbox_pending"); err != nil {
		return fmt.Errorf("LISTEN outbox_pending: %w", err)
	}
	for {
		select {
		case wake <- struct{}{}:
		default:
		}
		if _, err := pc.WaitForNotification(ctx); err != nil {
			return fmt.Errorf("wait for outbox notification: %w", err)
		}
	}
}
