package outbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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

	// The pipeline (see step): the read-ahead batch and its memory, and the published batch
	// not yet marked.
	next     []pendingRow
	nextMem  *batchMem
	unmarked outcome
	// Memory of marked batches, for later reads (recycle), and the produce call's messages.
	spare []*batchMem
	msgs  []kafka.Message
	// The last read sizes the next one: its walk of the queue (entriesFor) and its batch.
	rowsPerEntry, lastRead int

	mu    sync.Mutex
	total Result
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

// NewRelay validates cfg (filling defaults) and prepares the Kafka writer; it connects to
// nothing until RunOnce or Run.
func NewRelay(pool *pgxpool.Pool, cfg RelayConfig, log *zap.Logger) (*Relay, error) {
	if pool == nil {
		return nil, errors.New("outbox relay: nil database pool")
	}
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = zap.NewNop()
	}
	t := newTransport(cfg)
	return &Relay{
		pool:      pool,
		cfg:       cfg,
		log:       log.With(zap.String("topic", cfg.Topic), zap.String("relay", cfg.Owner)),
		transport: t,
		writer:    NewWriter(cfg, t),
		client:    &kafka.Client{Addr: kafka.TCP(cfg.Brokers...), Timeout: cfg.WriteTimeout, Transport: t},
		lanes:     newLaneSet(pool, cfg.Owner, cfg.Lease),
	}, nil
}

// Config is the validated configuration with defaults filled in.
func (r *Relay) Config() RelayConfig { return r.cfg }

// Totals adds up every pass and batch so far (for metrics).
func (r *Relay) Totals() Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.total
}

// Close releases the Kafka connections. Call it after RunOnce/Run returned.
func (r *Relay) Close() error {
	err := r.writer.Close()
	r.transport.CloseIdleConnections()
	return err
}

// RunOnce publishes everything pending in the lanes it can lease, then releases them. Lanes
// leased by another relay are left to it and reported in Result (not an error). A failing
// broker is retried RelayConfig.Attempts times with backoff, then RunOnce returns an error;
// rows that were not acknowledged stay pending.
func (r *Relay) RunOnce(ctx context.Context) (Result, error) {
	var res Result
	if !r.running.CompareAndSwap(false, true) {
		return res, errors.New("outbox relay: RunOnce called while the relay is running")
	}
	defer r.running.Store(false)
	defer r.releaseLanes(ctx)
	defer r.finish(ctx, &res)

	failures := 0
	giveUp := func(err error) error {
		failures++
		r.cfg.Test.publishError(err)
		var perm *permanentError
		if errors.As(err, &perm) {
			return err
		}
		if failures >= r.cfg.Attempts {
			return fmt.Errorf("relay-outbox gave up after %d attempts (kafka.retry.attempts); unpublished rows stay in the outbox: %w", failures, err)
		}
		d := r.backoff(failures)
		r.log.Warn("relay attempt failed, retrying", zap.Error(err), zap.Int("attempt", failures), zap.Duration("backoff", d))
		return r.wait(ctx, d, nil)
	}
	for !r.topicOK {
		if err := r.checkTopic(ctx); err != nil {
			if err := giveUp(err); err != nil {
				return res, err
			}
		}
	}
	if _, err := r.lanes.acquire(ctx); err != nil {
		return res, err
	}
	res.LanesHeld = len(r.lanes.held)
	for {
		n, err := r.step(ctx, &res)
		if err != nil {
			if err := giveUp(err); err != nil {
				return res, err
			}
			continue
		}
		failures = 0
		if n == 0 {
			break
		}
	}
	busy, err := r.lanes.busy(ctx)
	if err != nil {
		return res, err
	}
	res.LanesBusy, res.PendingBusy, res.BusyOwners = busy.Lanes, busy.Pending, busy.Owners
	r.log.Info("outbox relay pass done",
		zap.Int64("published", res.Published), zap.Int64("failed", res.Failed), zap.Int("batches", res.Batches),
		zap.Int("lanes_held", res.LanesHeld), zap.Int("lanes_busy", res.LanesBusy), zap.Int64("pending_busy", res.PendingBusy))
	return res, nil
}

// Run follows the outbox until ctx ends (then it returns nil): it publishes as rows commit
// (woken by a notification, or every PollInterval), takes over lanes that other relays free
// or abandon, prunes published rows every PruneInterval, and backs off and retries forever
// while the broker or the database is unavailable. It returns an error only for what
// retrying cannot fix, such as a missing topic it may not create.
//
// Run holds one pooled connection for LISTEN while it runs, and uses up to two more at once
// while publishing (see step).
func (r *Relay) Run(ctx context.Context) error {
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("outbox relay: Run called while the relay is running")
	}
	defer r.running.Store(false)
	ctx, cancel := context.WithCancel(ctx)
	var listener sync.WaitGroup
	defer listener.Wait()
	defer cancel()
	defer r.releaseLanes(ctx)
	var res Result // a scratch tally; totals go to r.total per batch
	defer r.finish(ctx, &res)

	wake := make(chan struct{}, 1)
	listener.Go(func() { r.listen(ctx, wake) })

	failures := 0
	acquireEvery := min(r.cfg.PollInterval, r.cfg.Lease/4)
	var nextAcquire, nextPrune time.Time
	for ctx.Err() == nil {
		now := time.Now()
		var err error
		switch {
		case !r.topicOK:
			err = r.checkTopic(ctx)
		case now.After(nextAcquire):
			nextAcquire = now.Add(acquireEvery)
			var got []int16
			if got, err = r.lanes.acquire(ctx); len(got) > 0 {
				r.log.Info("acquired outbox lanes", zap.Int16s("lanes", got), zap.Int("held", len(r.lanes.held)))
			}
		case now.After(nextPrune):
			var n int64
			var more bool
			// A bounded number of statements per turn, so a large backlog of old rows does
			// not hold up publishing or lease renewal.
			n, more, err = prune(ctx, r.pool, r.cfg.Retention, r.cfg.PruneBatch, 10)
			r.add(Result{Pruned: n})
			nextPrune = now.Add(r.cfg.PruneInterval)
			if more {
				nextPrune = now
			}
			if n > 0 {
				r.log.Info("pruned published outbox rows", zap.Int64("deleted", n), zap.Duration("older_than", r.cfg.Retention))
			}
		default:
			var n int
			if n, err = r.step(ctx, &res); err == nil {
				failures = 0
				if n == 0 {
					r.cfg.Test.idle()
					_ = r.wait(ctx, r.cfg.PollInterval, wake)
				}
			}
		}
		if err == nil {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		var perm *permanentError
		if errors.As(err, &perm) {
			return err
		}
		failures++
		r.cfg.Test.publishError(err)
		d := r.backoff(failures)
		r.log.Warn("relay attempt failed, backing off", zap.Error(err), zap.Int("failures", failures), zap.Duration("backoff", d))
		_ = r.wait(ctx, d, nil)
	}
	return nil
}

func (r *Relay) checkTopic(ctx context.Context) error {
	if err := r.ensureTopic(ctx); err != nil {
		return err
	}
	r.topicOK = true
	return nil
}

// step publishes one batch from the held lanes and returns how many rows it sent (0 = nothing
// pending in them), or an error when a batch could not be fully published or recorded; rows
// not acknowledged stay pending either way.
//
// It is a pipeline: while batch k goes to Kafka, batch k-1 is marked and batch k+1 read
// (leaving out the rows of k and k-1). Batches still go to Kafka one at a time, in order, each
// only after the previous one was acknowledged; on any failure the read-ahead is dropped,
// since it may hold later events of an item whose earlier event is not out, and what was
// acknowledged is marked before backing off.
//
// Marking and reading overlap (two connections) while the relay follows the outbox, so that
// a new row is read without waiting for the last mark. While it works through a backlog (the
// last read was full) they take turns instead: both fit in the time a full batch takes to
// publish, and two busy database sessions at once took the cores the publishing needs on a
// small machine (BenchmarkRelayVsRaw on 2 cores: 59.3 % of the raw writer's rate in parallel,
// 60.8 % in turns, over 11 runs each).
func (r *Relay) step(ctx context.Context, res *Result) (int, error) {
	if err := r.renewIfDue(ctx); err != nil {
		return 0, r.settle(ctx, res, err)
	}
	rows, mem := r.keepUsable(r.next), r.nextMem
	r.next, r.nextMem = nil, nil
	if len(rows) == 0 {
		r.recycle(mem) // never sent
		if err := r.settle(ctx, res, nil); err != nil {
			return 0, err
		}
		lanes := r.lanes.usable(r.publishWindow())
		if len(lanes) == 0 {
			return 0, nil
		}
		mem = r.takeMem()
		var err error
		if rows, err = r.fetch(ctx, lanes, nil, mem); err != nil || len(rows) == 0 {
			r.recycle(mem)
			return 0, err
		}
	}

	prev := r.unmarked
	r.unmarked = outcome{}
	lanes, tokens := r.lanes.usable(r.publishWindow()), r.lanes.tokens()
	type sideResult struct {
		published, failed []int64
		next              []pendingRow
		err               error
	}
	var s sideResult
	nextMem := r.takeMem()
	var side sync.WaitGroup
	var markErr, fetchErr error
	mark := func() {
		// Like the publish, marking what was delivered is finished even when ctx ends.
		mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
		defer cancel()
		s.published, s.failed, markErr = recordOutcome(mctx, r.pool, prev, tokens, r.cfg.Owner, r.cfg.OnPublished)
	}
	// What is in flight is worked out on the side too: the publishing waits for nothing.
	read := func() { s.next, fetchErr = r.fetch(ctx, lanes, inFlight(prev.rows, rows), nextMem) }
	if r.lastRead >= r.readSize() {
		side.Go(func() { mark(); read() })
	} else {
		side.Go(mark)
		side.Go(read)
	}
	r.unmarked = r.publish(ctx, rows)
	r.unmarked.mem = mem
	side.Wait()
	s.err = errors.Join(markErr, fetchErr)

	lost := r.recorded(res, prev, s.published, s.failed)
	r.recycleSent(prev)
	if s.err != nil || r.unmarked.err != nil || r.unmarked.cut || lost {
		if lost {
			if _, err := r.lanes.renew(ctx); err != nil {
				s.err = errors.Join(s.err, err)
			}
		}
		return len(rows), r.settle(ctx, res, errors.Join(r.unmarked.err, s.err))
	}
	r.next, r.nextMem = s.next, nextMem
	return len(rows), nil
}

// takeMem returns memory for a read: a marked batch's, or new.
func (r *Relay) takeMem() *batchMem {
	if n := len(r.spare); n > 0 {
		m := r.spare[n-1]
		r.spare = r.spare[:n-1]
		return m
	}
	return &batchMem{}
}

// recycle keeps the memory of a batch that nothing refers to any more for a later read. Two
// are enough for the pipeline (a batch's memory is free again two steps after its read).
func (r *Relay) recycle(m *batchMem) {
	if m == nil || len(r.spare) == 2 {
		return
	}
	m.reset()
	r.spare = append(r.spare, m)
}

// recycleSent recycles the memory of a marked batch, unless a produce call of it ended
// without its outcome (a timeout): kafka-go may still be sending those messages, from that
// memory, so it is left to the garbage collector.
func (r *Relay) recycleSent(out outcome) {
	if out.err == nil {
		r.recycle(out.mem)
	}
}

// settle ends the pipeline: it marks what the broker acknowledged (even when ctx is done, so
// a stopping relay does not leave acknowledged rows to be sent again), notes cause on the rows
// that stay pending, drops the read-ahead, and returns cause or the marking error.
func (r *Relay) settle(ctx context.Context, res *Result, cause error) error {
	r.recycle(r.nextMem)
	r.next, r.nextMem = nil, nil
	out := r.unmarked
	r.unmarked = outcome{}
	if out.empty() {
		return cause
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	published, failed, err := recordOutcome(ctx, r.pool, out, r.lanes.tokens(), r.cfg.Owner, r.cfg.OnPublished)
	if err == nil {
		r.recorded(res, out, published, failed)
	}
	r.recycleSent(out)
	if cause != nil && len(out.pending) > 0 {
		if aerr := recordAttempt(ctx, r.pool, out.pending, cause.Error()); aerr != nil {
			r.log.Warn("could not record failed attempt", zap.Error(aerr))
		}
	}
	if cause != nil {
		return cause
	}
	return err
}

// finish marks the last published batch when a pass ends, before the lanes are released;
// otherwise the next holder of the lanes would send it again.
func (r *Relay) finish(ctx context.Context, res *Result) {
	if err := r.settle(ctx, res, nil); err != nil {
		r.log.Warn("could not mark the last published batch; it will be sent again", zap.Error(err))
	}
}

// recorded accounts for a marked batch and reports whether some of its rows were not marked
// because their lane went to another relay (which publishes them again).
func (r *Relay) recorded(res *Result, out outcome, published, failed []int64) (lost bool) {
	if len(out.published)+len(out.failed) == 0 {
		return false
	}
	batch := Result{Published: int64(len(published)), Failed: int64(len(failed)), Batches: 1}
	res.Published += batch.Published
	res.Failed += batch.Failed
	res.Batches++
	r.add(batch)
	r.cfg.Test.published(published)
	r.cfg.Test.failed(failed)
	for i, id := range out.failed {
		r.log.Error("kafka rejected outbox event; marked failed (collector outbox retry to resend)",
			zap.Int64("outbox_id", id), zap.String("error", out.failedErrs[i]))
	}
	if n := len(out.published) + len(out.failed) - len(published) - len(failed); n > 0 {
		r.log.Warn("outbox rows not marked: their lanes went to another relay", zap.Int("rows", n))
		return true
	}
	return false
}

// readsPerBatch is how many produce calls' worth of rows one read (and one mark) covers. The
// database's cost per statement (planning, executor start, commit) is spread over more rows,
// while each produce request keeps the configured size, which is what the broker sees.
const readsPerBatch = 4

func (r *Relay) readSize() int { return readsPerBatch * r.cfg.BatchSize }

// fetch reads the next batch into mem and builds its messages. One fetch runs at a time.
func (r *Relay) fetch(ctx context.Context, lanes []int16, flying []rowPos, mem *batchMem) ([]pendingRow, error) {
	rows, err := fetchPending(ctx, r.pool, read{
		lanes: lanes, limit: r.readSize(), entries: r.entriesFor(), expect: r.lastRead, inFlight: flying, mem: mem})
	r.lastRead = len(rows)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	entries := 1
	for i := 1; i < len(rows); i++ {
		if rows[i].Entry != rows[i-1].Entry {
			entries++
		}
	}
	r.rowsPerEntry = len(rows) / entries
	prepare(rows, r.cfg.Source, mem)
	return rows, nil
}

// inFlight says, for every queue entry with rows in batches (the one being published and the
// one being marked), the highest id among them. An entry is read in id order, so a read must
// leave out exactly its ids up to that one, and no more: the rest of an entry read in part
// must come before any later entry's rows, even when the batch in flight ended elsewhere (a
// statement that committed late sits at the head of the queue, ahead of older entries).
func inFlight(batches ...[]pendingRow) []rowPos {
	upTo := map[int64]int64{}
	for _, rows := range batches {
		// A batch holds each entry's rows together, in id order: the last of a run is its
		// highest, so the map sees an entry, not every row.
		for i := range rows {
			if i+1 < len(rows) && rows[i+1].Entry == rows[i].Entry {
				continue
			}
			if rows[i].ID > upTo[rows[i].Entry] {
				upTo[rows[i].Entry] = rows[i].ID
			}
		}
	}
	out := make([]rowPos, 0, len(upTo))
	for entry, id := range upTo {
		out = append(out, rowPos{entry, id})
	}
	return out
}

// entriesFor is how many queue entries a read may walk: enough for a full read at half the
// rows per entry of the last read. Entries hold from one row (a snapshot written alone) to
// 500, and a walk as deep as a read is long would go through thousands of large entries to
// use a few dozen; a read that comes up short only makes the next one walk further.
func (r *Relay) entriesFor() int {
	return r.readSize() / max(r.rowsPerEntry/2, 1)
}

// publishWindow is how much lease a lane needs left to start a batch on it: the write
// timeout, plus as much again for a produce request kafka-go may still be finishing after it.
func (r *Relay) publishWindow() time.Duration { return 2 * r.cfg.WriteTimeout }

// keepUsable drops the read-ahead rows of lanes that are no longer safe to publish. Rows of a
// lane are a prefix of its pending rows, so dropping whole lanes keeps the order; an entry
// that lost rows here is no longer read whole, so marking takes out only the rows sent.
func (r *Relay) keepUsable(rows []pendingRow) []pendingRow {
	if len(rows) == 0 {
		return nil
	}
	usable := r.lanes.usable(r.publishWindow())
	if len(usable) == Lanes {
		return rows
	}
	var cut map[int64]bool
	rows = slices.DeleteFunc(rows, func(row pendingRow) bool {
		if slices.Contains(usable, row.Lane) {
			return false
		}
		if cut == nil {
			cut = map[int64]bool{}
		}
		cut[row.Entry] = true
		return true
	})
	for i := range rows {
		if cut[rows[i].Entry] {
			rows[i].Whole = false
		}
	}
	return rows
}

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
// pending because of err.
type outcome struct {
	published  []int64
	created    []time.Time
	failed     []int64
	failedErrs []string
	pending    []int64
	err        error
	cut        bool // the lease ran short mid-batch: pending rows were not sent, no error

	// What it means for the queue (settle): the entries the batch read whole and settled every
	// row of (deleted), and for the other entries the rows it settled (taken out of them).
	settled []int64
	partial map[int64][]int64

	// The batch's rows, and their entries and lanes by id, built when marking needs them
	// (ref): off the publishing path, and only for batches that were not all settled.
	rows  []pendingRow
	rowOf map[int64]rowRef
	mem   *batchMem // the rows' memory
}

type rowRef struct {
	entry int64
	lane  int16
}

// confirmed keeps the ids whose entry was deleted (gone), or that were taken out of their
// entry, which the mark does for rows of the lanes it found held.
func (o *outcome) confirmed(ids, gone []int64, held []int16) []int64 {
	deleted := make(map[int64]bool, len(gone))
	for _, e := range gone {
		deleted[e] = true
	}
	var out []int64
	for _, id := range ids {
		ref := o.ref(id)
		if _, partial := o.partial[ref.entry]; deleted[ref.entry] || partial && slices.Contains(held, ref.lane) {
			out = append(out, id)
		}
	}
	return out
}

func (o *outcome) ref(id int64) rowRef {
	if o.rowOf == nil {
		o.rowOf = make(map[int64]rowRef, len(o.rows))
		for i := range o.rows {
			o.rowOf[o.rows[i].ID] = rowRef{o.rows[i].Entry, o.rows[i].Lane}
		}
	}
	return o.rowOf[id]
}

// settle sorts the entries of rows (in publishing order) by what happened to their rows. It
// runs on the publishing path, so the usual batch (every row settled, every entry read
// whole) costs a pass over rows and nothing else.
func (o *outcome) settle(rows []pendingRow) {
	o.rows = rows
	var pending map[int64]bool
	if len(o.pending) > 0 {
		pending = make(map[int64]bool, len(o.pending))
		for _, id := range o.pending {
			pending[id] = true
		}
	}
	for lo := 0; lo < len(rows); {
		entry := rows[lo].Entry
		whole, left := true, false
		hi := lo
		for ; hi < len(rows) && rows[hi].Entry == entry; hi++ {
			whole = whole && rows[hi].Whole
			left = left || pending[rows[hi].ID]
		}
		if whole && !left {
			o.settled = append(o.settled, entry)
			lo = hi
			continue
		}
		var settled []int64
		for _, r := range rows[lo:hi] {
			if !pending[r.ID] {
				settled = append(settled, r.ID)
			}
		}
		if len(settled) > 0 {
			if o.partial == nil {
				o.partial = map[int64][]int64{}
			}
			o.partial[entry] = settled
		}
		lo = hi
	}
}

func (o *outcome) stopped() bool { return o.err != nil || o.cut }

func (o *outcome) decide(row *pendingRow, rejectedBy error) {
	if rejectedBy == nil {
		o.published = append(o.published, row.ID)
		o.created = append(o.created, row.CreatedAt)
		return
	}
	o.failed = append(o.failed, row.ID)
	o.failedErrs = append(o.failedErrs, rejectedBy.Error())
}

// ages returns, for the published rows among ids, their age in seconds at now.
func (o *outcome) ages(ids []int64, now time.Time) []float64 {
	marked := make(map[int64]bool, len(ids))
	for _, id := range ids {
		marked[id] = true
	}
	ages := make([]float64, 0, len(ids))
	for i, id := range o.published {
		if marked[id] {
			ages = append(ages, now.Sub(o.created[i]).Seconds())
		}
	}
	return ages
}

func (o *outcome) empty() bool { return len(o.published)+len(o.failed)+len(o.pending) == 0 }

// publish sends rows in the order fetched (entry by entry, each in id order), in chunks of at
// most BatchSize messages and BatchBytes so that each chunk is one produce request per
// partition. It stops at the first chunk that fails for a reason other than a rejected
// message: the rest stays pending, so no later event of an item can overtake an earlier one
// that was not acknowledged.
func (r *Relay) publish(ctx context.Context, rows []pendingRow) outcome {
	out := outcome{published: make([]int64, 0, len(rows)), created: make([]time.Time, 0, len(rows))}
	var chunk []*pendingRow
	msgs := r.msgs[:0]
	defer func() { r.msgs = msgs[:0] }()
	var size int64
	written := 0
	flush := func() {
		// A batch is several produce calls; the lanes' leases were checked for one
		// (publishWindow) when the batch started, so every further call checks again and the
		// rest of the batch waits for the next step (after a renewal) when the lease runs short.
		if len(chunk) > 0 && !out.stopped() && written > 0 && time.Until(r.lanes.minValid()) < r.publishWindow() {
			out.cut = true
		}
		if len(chunk) > 0 && !out.stopped() {
			r.writeChunk(ctx, chunk, msgs, &out)
			written++
		} else {
			for _, row := range chunk {
				out.pending = append(out.pending, row.ID)
			}
		}
		chunk, msgs, size = chunk[:0], msgs[:0], 0
	}
	for i := range rows {
		row := &rows[i]
		n := row.size
		if n > r.cfg.BatchBytes {
			if out.stopped() {
				out.pending = append(out.pending, row.ID)
			} else {
				out.decide(row, fmt.Errorf("event of about %d bytes is larger than kafka.batch_bytes (%d)", n, r.cfg.BatchBytes))
			}
			continue
		}
		if size+n > r.cfg.BatchBytes || len(chunk) == r.cfg.BatchSize {
			flush()
		}
		chunk, msgs, size = append(chunk, row), append(msgs, row.msg()), size+n
	}
	flush()
	out.settle(rows)
	return out
}

// writeChunk publishes one chunk. Messages of a partition whose request was rejected are
// retried one by one in id order to find which of them the broker refuses.
func (r *Relay) writeChunk(ctx context.Context, rows []*pendingRow, msgs []kafka.Message, out *outcome) {
	err := r.write(ctx, msgs)
	if err == nil {
		for _, row := range rows {
			out.decide(row, nil)
		}
		return
	}
	var werrs kafka.WriteErrors
	if !errors.As(err, &werrs) || len(werrs) != len(msgs) {
		for _, row := range rows {
			out.pending = append(out.pending, row.ID)
		}
		out.err = r.wrapWriteErr(len(msgs), err)
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
	return fmt.Errorf("publish %d events to kafka topic %s at %s: %w", n, r.cfg.Topic, strings.Join(r.cfg.Brokers, ","), err)
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
	d := r.cfg.BackoffMax
	if failures < 32 {
		if b := r.cfg.BackoffMin << (failures - 1); b > 0 && b < d {
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
