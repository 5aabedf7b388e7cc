package outbox

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/kafkaconn"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// Relay publishes outbox rows to Kafka, one pass at a time; Relays anywhere split the lanes.
type Relay struct {
	pool      *pgxpool.Pool
	cfg       RelayConfig
	log       *zap.Logger
	transport *kafka.Transport
	writer    *kafka.Writer
	lanes     *laneSet
	topicOK   bool
	running   atomic.Bool
	stopped   atomic.Pointer[string] // why the relay stopped for good; nil while it works
	pass      Result                 // of the running RunOnce or Run; only its loop touches it
	// lastFailedWrite is when the loop's last produce call failed: kafka-go may still deliver
	// it until publishWindow after, so the lanes are not free to others before then.
	lastFailedWrite time.Time
	afterCall       func() // tests: runs after each produce call
	// The loop's failure lines, each logged once a streak and then once a minute: an outage
	// of an hour made hundreds of them.
	attemptLogged time.Time        // the last "relay attempt failed" line
	renewing      telemetry.Streak // lane renewals failing while the relay backs off
	parked        parking          // items a partition out of service refuses
	parkLogged    time.Time        // the last "kafka refuses some items' events" line
}

// Result is what a pass did.
type Result struct {
	Published int64 // acknowledged by Kafka and marked published
	Failed    int64 // rejected by the broker, marked failed
	Batches   int
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
	t, err := kafkaconn.Transport(cfg.KafkaConfig, cfg.Dial)
	if err != nil {
		return nil, err
	}
	log = log.With(zap.String("topic", cfg.Topic), zap.String("relay", cfg.Owner))
	return &Relay{
		pool:      pool,
		cfg:       cfg,
		log:       log,
		transport: t,
		writer:    newWriter(cfg, t),
		lanes:     &laneSet{pool: pool, owner: cfg.Owner, lease: cfg.Lease, held: map[int16]string{}},
		renewing:  telemetry.Streak{Log: log, What: "could not renew outbox lane leases"},
	}, nil
}

// Health is down, with the reason, once the relay stopped on what retrying cannot fix.
func (r *Relay) Health() (up bool, reason string) {
	if why := r.stopped.Load(); why != nil {
		return false, *why
	}
	return true, ""
}

// Close releases the Kafka connections. Call it after RunOnce/Run returned.
func (r *Relay) Close() error {
	err := r.writer.Close()
	r.transport.CloseIdleConnections()
	return err
}

var errRunning = errors.New("outbox relay: RunOnce or Run called while the relay is running")

// RunOnce drains the lanes it can lease and releases them, giving up after RelayConfig.RetryAttempts.
func (r *Relay) RunOnce(ctx context.Context) (Result, error) {
	if !r.running.CompareAndSwap(false, true) {
		return Result{}, errRunning
	}
	defer r.running.Store(false)
	err := r.loop(ctx, nil)
	if err == nil {
		r.log.Info("outbox relay pass done", zap.Int64("published", r.pass.Published), zap.Int64("failed", r.pass.Failed), zap.Int("batches", r.pass.Batches))
	}
	return r.pass, err
}

// Followed is what Run published until it returned; read it after.
func (r *Relay) Followed() Result { return r.pass }

// Run follows the outbox until ctx ends, holding a pooled connection for LISTEN; it returns only permanent errors.
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
	if r.cfg.DirectURL == "" && r.pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol {
		// LISTEN through a transaction pooler would hold a pool connection for good and hear
		// nothing: the server session it ran on goes back to the pooler's other clients.
		r.log.Warn("outbox relay: no session for LISTEN; polling for new events",
			zap.String("reason", "the pool uses the simple protocol (a transaction-pooling PgBouncer) and database.direct_url is not set"),
			zap.Duration("poll_interval_seconds", r.cfg.PollInterval))
	} else {
		listener.Go(func() { // turns notifications into wake-ups; polls meanwhile after errors
			cfg := store.ListenConfig{Pool: r.pool, DirectURL: r.cfg.DirectURL, Channel: "outbox_pending", Retry: r.retry(),
				Restored: func(failures int) {
					r.log.Info("outbox notifications restored", zap.Int("failed_attempts", failures))
				}}
			store.Listen(ctx, cfg, wake, func(err error, failures int) {
				if failures == 1 { // each reconnect attempt fails again while the database is away
					r.log.Warn("outbox notifications interrupted; polling until reconnected", zap.Error(err))
				}
			})
		})
	}
	err := r.loop(ctx, wake)
	if _, permanent := classify(err); ctx.Err() != nil && !permanent {
		return nil
	}
	return err
}

// schedule is when a loop next acquires free lanes; a pass acquires once.
type schedule struct {
	follow      bool
	nextAcquire time.Time
	foundNone   bool // the last look for free lanes left the relay holding none
}

// loop takes turns until ctx ends, a permanent error or, in a pass (no wake), idleness.
func (r *Relay) loop(ctx context.Context, wake <-chan struct{}) (err error) {
	defer func() { r.releaseLanes(ctx, r.unsettled()) }()
	defer r.catchPanic(&err)
	r.pass = Result{}
	r.parked = parking{}
	s := &schedule{follow: wake != nil}
	var failingSince time.Time // this run of failed attempts: its back-off and hand-back
	// outage is since when attempts have failed, across hand-backs (whose idle turns end a run
	// of failures): what the log lines tell. Zero while publishing works.
	var outage time.Time
	for failures := 0; ctx.Err() == nil; {
		idle, err := r.turn(ctx, s)
		switch {
		case err == nil && idle && !s.follow:
			return nil
		case err == nil:
			failures = 0
			// The outage is over only once the relay publishes, or holds lanes with nothing to
			// publish: after a hand-back it has nothing to do, which says nothing of Kafka.
			switch {
			case outage.IsZero():
			case !idle || len(r.lanes.held) > 0:
				if !idle {
					r.log.Info("outbox relay publishing again", zap.Duration("failed_for_seconds", time.Since(outage)))
				}
				outage = time.Time{}
			case s.foundNone:
				// It looked for lanes again and found none free: other relays publish them. Its
				// own outage is no longer told; a new failure starts a new one.
				outage = time.Time{}
			}
			if idle {
				r.cfg.Test.Idle.Signal(struct{}{})
				r.wait(ctx, r.cfg.PollInterval, wake)
			}
		case ctx.Err() != nil:
		default:
			if failures++; failures == 1 {
				failingSince = time.Now()
			}
			if outage.IsZero() {
				outage = failingSince
			}
			if err := r.failed(ctx, err); err != nil {
				return err
			}
			// A pass's retries of parked items count however much else it publishes between them.
			if attempts := max(failures, r.parked.rounds); !s.follow && attempts >= r.cfg.RetryAttempts {
				return fmt.Errorf("outbox relay gave up after %d attempts; unpublished rows stay in the outbox: %w", attempts, err)
			}
			d := r.retry().Delay(failures)
			// Said when the outage begins and then once a minute: a following relay hands its
			// lanes back and takes them again, each time starting a new run of attempts.
			if first := failures == 1 && outage.Equal(failingSince); first || time.Since(r.attemptLogged) >= time.Minute {
				r.attemptLogged = time.Now()
				r.log.Warn("relay attempt failed, backing off", zap.Error(err), zap.Int("failures", failures),
					zap.Duration("failing_seconds", time.Since(outage)), zap.Duration("backoff_seconds", d))
			}
			// A lease of failures hands the lanes back, counted to this back-off's end so that
			// they are not kept through a back-off that ends past it. A database failure counts
			// only if renewing the lanes works now: this relay reaches the database, yet cannot
			// read or mark its rows (a role without rights, a statement that fails on them),
			// which another relay may well do. Without the database its lanes lapse anyway.
			if s.follow && len(r.lanes.held) > 0 && time.Since(failingSince)+d >= r.cfg.Lease {
				reason, _ := classify(err)
				if reason != "database" || r.renewNow(ctx) {
					r.handBack(ctx, s, time.Since(outage), err)
				}
			}
			r.wait(ctx, d, nil)
		}
	}
	return ctx.Err()
}

// turn checks the topic, or does what is due and publishes a batch; idle: nothing left to do.
func (r *Relay) turn(ctx context.Context, s *schedule) (idle bool, err error) {
	if !r.topicOK {
		return false, r.checkTopic(ctx)
	}
	if err := r.leaseIfDue(ctx, s); err != nil {
		return false, err
	}
	if r.parked.retryNext || s.follow && r.parked.due(time.Now()) {
		r.parked.unpark()
	}
	n, err := r.step(ctx)
	if n == 0 && err == nil && len(r.parked.items) > 0 && !s.follow {
		// A pass published all else: this is a failed attempt, and the next, after the
		// back-off, retries the parked items.
		r.parked.retryNext = true
		return false, r.parked.err
	}
	return n == 0 && err == nil, err
}

// leaseIfDue renews a quarter of a lease after the last renewal and, with s, acquires free lanes when due.
func (r *Relay) leaseIfDue(ctx context.Context, s *schedule) error {
	now := time.Now()
	acquire := s != nil && len(r.lanes.held) < Lanes && (s.nextAcquire.IsZero() || s.follow && now.After(s.nextAcquire))
	if !acquire && (len(r.lanes.held) == 0 || now.Before(r.renewAt())) {
		return nil
	}
	got, lost, err := r.lanes.renew(ctx, acquire)
	if len(got) > 0 {
		r.log.Info("acquired outbox lanes", zap.Int16s("lanes", got), zap.Int("held", len(r.lanes.held)))
	}
	if len(lost) > 0 {
		r.log.Warn("outbox lanes taken over by another relay after our lease expired", zap.Int16s("lanes", lost))
	}
	if err == nil && acquire {
		s.nextAcquire = now.Add(min(r.cfg.PollInterval, r.cfg.Lease/4))
		s.foundNone = len(r.lanes.held) == 0
	}
	return err
}

// renewNow renews the held lanes at once and says whether that worked.
func (r *Relay) renewNow(ctx context.Context) bool {
	_, _, err := r.lanes.renew(ctx, false)
	return err == nil
}

// handBack releases the lanes of a following relay that has failed for a lease (Kafka out of
// its reach: DNS, TLS, a partition; or its rows, while the database renews its lanes), for a
// relay that can publish to take at its next look:
// retrying for ever while renewing them would stall their events, however many relays idle.
// The lanes are free to others only once a produce call that timed out can no longer land
// (publishWindow), so nobody publishes a lane's later events before it. It takes none for a
// lease, which leaves them to the others first; alone, it takes them back and resumes once
// Kafka answers. The release is fenced: only lanes still under its tokens. A relay that cannot
// reach the database at all cannot renew its lanes either: they lapse by themselves.
func (r *Relay) handBack(ctx context.Context, s *schedule, failingFor time.Duration, err error) {
	lanes := slices.Sorted(maps.Keys(r.lanes.held))
	r.log.Warn("outbox relay failing for a lease; handing its lanes back to the other relays",
		zap.Int16s("lanes", lanes), zap.Duration("failing_seconds", failingFor),
		zap.Duration("reacquire_after_seconds", r.cfg.Lease), zap.Error(err))
	r.releaseLanes(ctx, r.publishWindow())
	r.parked = parking{}
	s.nextAcquire = time.Now().Add(r.cfg.Lease)
	r.cfg.Test.HandedBack.Signal(lanes)
}

// checkTopic: a relay that gets past it works, so it clears its stop and the stop notes.
func (r *Relay) checkTopic(ctx context.Context) error {
	created, err := kafkaconn.EnsureTopic(ctx, r.cfg.KafkaConfig, r.transport)
	switch {
	case errors.As(err, new(kafkaconn.TopicError)):
		return &relayError{reason: "topic", permanent: true, err: err}
	case err != nil:
		return brokerError(err)
	case created:
		r.log.Info("created kafka topic")
	}
	r.topicOK = true
	if r.stopped.Swap(nil) != nil {
		r.log.Info("outbox relay past its topic check after a stop: publishing again")
		r.cfg.OnHealth(true)
	}
	if err := clearStops(ctx, r.pool); err != nil {
		r.log.Warn("could not clear the outbox relay stop notes", zap.Error(err))
	}
	return nil
}

// failed reports an attempt; a permanent failure puts the relay down, noted for collector status.
func (r *Relay) failed(ctx context.Context, err error) error {
	r.cfg.Test.PublishError.Signal(err)
	reason, permanent := classify(err)
	r.cfg.OnError(reason)
	if store.RefusedByServer(err) {
		r.cfg.WriteHealth.Observe(err)
	}
	if !permanent {
		return nil
	}
	r.stopped.Store(new(err.Error()))
	r.topicOK = false // a Run after this one checks again, and clears the stop once past it
	r.log.Error("outbox relay stopped; the outbox grows until a relay runs again", zap.Error(err))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := recordStop(ctx, r.pool, r.cfg.Owner, err.Error()); err != nil {
		r.log.Warn("could not note the relay's stop in outbox_relay_stops", zap.Error(err))
	}
	r.cfg.OnHealth(false) // once noted: what reads the metric finds the note
	return err
}

// catchPanic turns a panic (a bug) into a stop the daemon reports, instead of a crash.
func (r *Relay) catchPanic(err *error) {
	if p := recover(); p != nil {
		*err = r.failed(context.Background(), &relayError{reason: "panic", permanent: true, err: fmt.Errorf("outbox relay panicked: %v", p)})
	}
}

// callsPerBatch produce calls per read and mark spread the database's cost over more rows.
const callsPerBatch = 4

// step reads, produces and marks one batch and says how many rows it read.
func (r *Relay) step(ctx context.Context) (int, error) {
	if len(r.lanes.usable(r.publishWindow())) == 0 {
		return 0, nil
	}
	rows, err := readPending(ctx, r.pool, r.lanes.tokens(), r.publishWindow(), callsPerBatch*r.cfg.BatchSize, r.parked.skip())
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	stalled, failure := r.publish(ctx, rows)
	// Like the produce call, recording what was delivered is finished even when ctx ends.
	mctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	now, lost, err := markSettled(mctx, r.pool, r.lanes.tokens(), rows, failure)
	if err == nil {
		r.recorded(rows, now)
	}
	var perr error
	switch {
	case stalled:
		perr = failure
	case failure != nil:
		r.holdingBack(failure)
	case r.parked.recovered():
		r.log.Info("kafka takes every item's events again")
	}
	if lost {
		// Or retention.outbox_unpublished dropped them meanwhile (DeleteExpired): published once, gone.
		r.log.Warn("outbox rows not marked: their lanes went to another relay, or they expired (retention.outbox_unpublished)")
		_, _, err = r.lanes.renew(ctx, false) // forgets those lanes
	}
	return len(rows), errors.Join(perr, err)
}

// recorded accounts for a marked batch.
func (r *Relay) recorded(rows []pendingRow, now time.Time) {
	var published []int64
	var ages []float64
	r.pass.Batches++
	for _, row := range rows {
		switch {
		case !row.sent:
		case row.reason == "":
			published = append(published, row.ID)
			ages = append(ages, now.Sub(row.CreatedAt).Seconds())
		default:
			r.pass.Failed++
			r.log.Error("kafka rejected outbox event; marked failed until retried", zap.Int64("outbox_id", row.ID), zap.String("error", row.reason))
			r.cfg.OnError("rejected")
		}
	}
	if len(published) > 0 {
		r.pass.Published += int64(len(published))
		r.cfg.OnPublished(ages)
		r.cfg.Test.Published.Signal(published)
	}
}

// unsettled is how much longer a failed produce call may still land: the lanes are released
// free after it, so that no relay publishes their later events before it (exit, give-up and
// stop alike).
func (r *Relay) unsettled() time.Duration {
	if r.lastFailedWrite.IsZero() {
		return 0
	}
	return max(0, r.publishWindow()-time.Since(r.lastFailedWrite))
}

// publishWindow is the lease a produce call needs: kafka-go may finish a request after its timeout.
func (r *Relay) publishWindow() time.Duration { return 2 * r.cfg.WriteTimeout }

// publish settles rows in id order and returns the failure of a call, if one failed. A call
// refused for some of its messages while Kafka showed itself reachable (parking) parks their
// items and goes on with the other items' rows; any other failed call stalls the step (the
// loop backs off), so that no event overtakes an earlier unacknowledged one of its item. It
// stops at a lease too short for the next call.
func (r *Relay) publish(ctx context.Context, rows []pendingRow) (stalled bool, failure error) {
	todo := make([]*pendingRow, len(rows))
	for i := range rows {
		todo[i] = &rows[i]
	}
	for len(todo) > 0 {
		msgs := r.nextCall(todo)
		switch {
		case len(msgs) == 0:
			n := messageSize(message(*todo[0], r.cfg.Source))
			todo[0].settle(fmt.Errorf("event of about %d bytes is larger than kafka.batch_bytes (%d)", n, r.cfg.BatchBytes))
			todo = todo[1:]
			continue
		case !r.mayCall(ctx):
			return false, failure
		}
		call := todo[:len(msgs)]
		answered, err := r.writeCall(ctx, call, msgs)
		_, permanent := classify(err)
		switch {
		case errors.Is(err, errNoCallWindow):
			return false, failure
		case err == nil:
		case permanent || !answered && !slices.ContainsFunc(call, func(row *pendingRow) bool { return row.sent }):
			return true, err
		default:
			failure = err
			r.parked.park(call, err, r.retry().Delay)
		}
		todo = slices.DeleteFunc(todo[len(msgs):], func(row *pendingRow) bool { return r.parked.has(row.ItemID) })
	}
	return false, failure
}

// holdingBack reports a step that published while a partition refused some items' events.
func (r *Relay) holdingBack(err error) {
	r.cfg.Test.PublishError.Signal(err)
	reason, _ := classify(err)
	r.cfg.OnError(reason)
	if time.Since(r.parkLogged) >= time.Minute {
		r.parkLogged = time.Now()
		r.log.Warn("kafka refuses some items' events (a partition out of service?); publishing the other items' and retrying theirs",
			zap.Int("items_held_back", len(r.parked.items)), zap.Duration("retry_in_seconds", max(0, time.Until(r.parked.until))), zap.Error(err))
	}
}

// mayCall says whether a produce call may start. Checked before every call, the first too: a
// slow read may have used the margin step saw, and a call past the lease could land after
// another relay's. A call outlives ctx (see write), so none starts once ctx has ended: a stop
// (SIGTERM, the end of the daemon's final flush) is not drawn out by calls begun after it. The
// rest stays pending for the next relay.
func (r *Relay) mayCall(ctx context.Context) bool {
	return time.Until(r.lanes.validUntil) >= r.publishWindow() && ctx.Err() == nil
}

// errNoCallWindow: writeCall stopped before a call mayCall refused; its rows not yet settled
// stay pending, and publish stops as it would have before the call.
var errNoCallWindow = errors.New("no window left for a produce call")

// nextCall is the next produce call; empty when the first row alone exceeds kafka.batch_bytes.
func (r *Relay) nextCall(rows []*pendingRow) []kafka.Message {
	var msgs []kafka.Message
	var size int64
	for _, row := range rows[:min(len(rows), r.cfg.BatchSize)] {
		m := message(*row, r.cfg.Source)
		if size += messageSize(m); size > r.cfg.BatchBytes {
			break
		}
		msgs = append(msgs, m)
	}
	return msgs
}

// writeCall sends a rejected partition's messages again one by one to find which are refused
// (the broker judges a partition's batch whole: one message over the topic's limit refuses
// them all). Each of those calls is a call like any other: it starts only while mayCall says
// so, or a long batch sent singly would outlive the lease and race the relay that took it.
// answered: every message that failed carries the broker's error code (Kafka answered for it),
// none a connection's or a timeout's.
func (r *Relay) writeCall(ctx context.Context, rows []*pendingRow, msgs []kafka.Message) (answered bool, failed error) {
	err := r.write(ctx, msgs)
	werrs := make(kafka.WriteErrors, len(msgs))
	if err != nil && (!errors.As(err, &werrs) || len(werrs) != len(msgs)) {
		return false, r.wrapWriteErr(len(msgs), err)
	}
	answered = true
	stopped := false
	for i := range rows {
		e := werrs[i]
		if e != nil && rejected(e) && failed == nil && !stopped {
			if stopped = !r.mayCall(ctx); !stopped {
				e = r.writeOne(ctx, msgs[i])
			}
		}
		if e != nil && !rejected(e) && !errors.As(e, new(kafka.Error)) {
			answered = false
		}
		switch {
		case e == nil:
			rows[i].settle(nil) // acknowledged
		case failed != nil:
			// After a failure, nothing later is judged: it stays pending behind it.
		case !rejected(e):
			failed = r.wrapWriteErr(len(msgs), e)
		case stopped:
			// Its batch was refused, maybe for another message: judged by the next call.
		default:
			rows[i].settle(e)
		}
	}
	if failed == nil && stopped {
		return false, errNoCallWindow
	}
	return answered, failed
}

// write ignores ctx's end: kafka-go may deliver an abandoned call, which should then be marked.
func (r *Relay) write(ctx context.Context, msgs []kafka.Message) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), r.cfg.WriteTimeout)
	defer cancel()
	if r.afterCall != nil {
		defer r.afterCall()
	}
	err := r.writer.WriteMessages(ctx, msgs...)
	if err != nil && !allRejected(err) {
		r.lastFailedWrite = time.Now()
	}
	return err
}

// allRejected: the broker answered every message of a failed call, so none of it can land late.
func allRejected(err error) bool {
	var werrs kafka.WriteErrors
	if !errors.As(err, &werrs) {
		return false
	}
	for _, e := range werrs {
		if e != nil && !rejected(e) {
			return false
		}
	}
	return true
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

func (r *Relay) renewAt() time.Time { return r.lanes.validUntil.Add(-r.cfg.Lease * 3 / 4) }

// wait sleeps for d or until woken, renewing leases so that a relay backing off keeps its lanes.
func (r *Relay) wait(ctx context.Context, d time.Duration, wake <-chan struct{}) {
	for end := time.Now().Add(d); ; {
		renewed := r.lanes.renewedAt
		renewErr := r.leaseIfDue(ctx, nil)
		switch {
		case renewErr != nil && ctx.Err() == nil:
			r.renewing.Failed(time.Now(), renewErr)
		case renewErr == nil && r.lanes.renewedAt != renewed: // one ran, and worked
			r.renewing.Ok(time.Now())
		}
		left := time.Until(end)
		if left <= 0 {
			return
		}
		if renewErr == nil && len(r.lanes.held) > 0 {
			left = max(min(left, time.Until(r.renewAt())), time.Millisecond)
		}
		select {
		case <-ctx.Done():
			return
		case <-wake:
			return
		case <-time.After(left):
		}
	}
}

// retry is jittered so that relays restarted together do not retry in lockstep.
func (r *Relay) retry() backoff.Policy {
	return backoff.Policy{Min: r.cfg.RetryBackoffMin, Max: r.cfg.Retry.BackoffMax, Jitter: true}
}

// releaseLanes hands the lanes back even when ctx is already cancelled (the usual way out).
func (r *Relay) releaseLanes(ctx context.Context, freeAfter time.Duration) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := r.lanes.release(ctx, freeAfter); err != nil {
		r.log.Warn("could not release outbox lanes; they free up when the lease expires", zap.Error(err))
	}
}

// The Kafka side: the writer, the messages and what its errors mean.

// newWriter makes a call of at most BatchSize messages and BatchBytes one request per partition.
func newWriter(cfg RelayConfig, transport kafka.RoundTripper) *kafka.Writer {
	return &kafka.Writer{
		Addr:         kafka.TCP(cfg.Brokers...),
		Topic:        cfg.Topic,
		Balancer:     &kafka.Murmur2Balancer{},
		MaxAttempts:  1, // the relay retries, so it knows what was acknowledged
		BatchSize:    cfg.BatchSize,
		BatchBytes:   cfg.BatchBytes,
		BatchTimeout: time.Microsecond,
		ReadTimeout:  cfg.WriteTimeout,
		WriteTimeout: cfg.WriteTimeout,
		RequiredAcks: kafka.RequireAll,
		Compression:  kafkaconn.Compression(cfg.Compression),
		Transport:    transport,
	}
}

// ceTimeLayout is ce_time's RFC 3339 form: UTC, always six fraction digits (docs/events.md).
const ceTimeLayout = "2006-01-02T15:04:05.000000Z"

// message is key = item_id with CloudEvents headers in binary mode (docs/events.md). Its
// timestamp is left to kafka-go, which stamps the send time: the topic's retention counts from
// the message timestamps, and a backlog published days late under its creation times could be
// deleted by the broker before a consumer read it. ce_time keeps when the event was created.
func message(r pendingRow, source string) kafka.Message {
	h := func(k, v string) kafka.Header { return kafka.Header{Key: k, Value: []byte(v)} }
	return kafka.Message{Key: []byte(r.ItemID), Value: r.Payload, Headers: []kafka.Header{
		h("ce_specversion", "1.0"), h("ce_id", r.EventID), h("ce_type", r.EventType), h("ce_source", source),
		h("ce_time", r.CreatedAt.UTC().Format(ceTimeLayout)), h("ce_subject", r.ItemID),
		h("content-type", "application/json"),
	}}
}

// messageSize bounds what kafka-go counts against BatchBytes (lengths are varints of up to 5 bytes).
func messageSize(m kafka.Message) int64 {
	n := int64(4+1+1+8) + 4 + int64(len(m.Key)) + 4 + int64(len(m.Value)) + 5
	for _, h := range m.Headers {
		n += 5 + int64(len(h.Key)) + 5 + int64(len(h.Value))
	}
	return n
}

// rejected: the broker refused the message for what it is, so sending it again cannot succeed.
// Not InvalidTimestamp: kafka-go stamps records with this host's clock when it sends them, so a
// broker bounding timestamps refuses a skewed relay's every event, not one event's content;
// that is retried (and logged) until the clock is right, not marked failed out of order.
func rejected(err error) bool {
	var tooLarge kafka.MessageTooLargeError
	var kerr kafka.Error
	return errors.As(err, &tooLarge) || errors.As(err, &kerr) && slices.Contains([]kafka.Error{
		kafka.MessageSizeTooLarge, kafka.RecordListTooLarge, kafka.InvalidRecord}, kerr)
}

// relayError is a failure about Kafka or a panic; a permanent one stops even a following relay.
type relayError struct {
	reason    string // topic, authorization or broker
	permanent bool
	err       error
}

func (e *relayError) Error() string { return e.err.Error() }
func (e *relayError) Unwrap() error { return e.err }

// brokerError classifies a failure talking to Kafka; refused authorization is permanent.
func brokerError(err error) error {
	var kerr kafka.Error
	if errors.As(err, &kerr) && slices.Contains([]kafka.Error{
		kafka.TopicAuthorizationFailed, kafka.ClusterAuthorizationFailed, kafka.SASLAuthenticationFailed,
		kafka.UnsupportedSASLMechanism, kafka.IllegalSASLState}, kerr) {
		return &relayError{reason: "authorization", permanent: true, err: err}
	}
	return &relayError{reason: "broker", err: err}
}

// classify gives the error's metric label and whether it is permanent; the rest is the database's.
func classify(err error) (reason string, permanent bool) {
	var re *relayError
	if errors.As(err, &re) {
		return re.reason, re.permanent
	}
	return "database", false
}
