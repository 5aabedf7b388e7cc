package store

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// Reads routes reads to a streaming replica (database.read_url) while it keeps up with the
// primary, and to the primary otherwise. It has no Exec and no Begin: a write cannot reach
// the replica through it. With no replica every read goes to the primary.
//
// The replica serves reads only while its last measured lag is at most Config.MaxLag and that
// measurement is recent; anything else (lagging, unreachable, not a standby, not measured
// yet) sends reads to the primary, and State says why.
type Reads struct {
	primary *pgxpool.Pool
	replica *pgxpool.Pool // nil: reads go to the primary
	where   string        // the replica as host:port/dbname, never with its password
	cfg     ReadsConfig
	log     *zap.Logger

	mu    sync.Mutex
	state ReadState
	kind  readCause
	// last is the primary's WAL position at the previous measurement: a replica that has
	// replayed it trails by at most the time since, whatever its last commit's timestamp says.
	last struct {
		lsn uint64
		at  time.Time
	}
}

// ReadsConfig tunes a Reads; the zero value takes the defaults.
type ReadsConfig struct {
	// MaxLag is how far the replica may trail the primary and still serve reads; 0 = MaxLagDefault.
	MaxLag time.Duration
	// Every is how often Start measures the lag; 0 = MeasureEveryDefault.
	Every time.Duration
	// Timeout bounds one measurement, so an unreachable replica is found out, not waited on,
	// and how long a read waits for the replica's first answer before it runs on the primary;
	// 0 = MeasureTimeoutDefault.
	Timeout time.Duration
	// Now is the local clock (tests); nil = time.Now.
	Now func() time.Time
}

const (
	// MaxLagDefault is the most a replica may trail and still serve reads: the console, the API
	// and `collector history` show collections seconds after they happen, so a few seconds of
	// staleness is invisible, and a replica further behind is not worth reading from.
	MaxLagDefault = 5 * time.Second
	// MeasureEveryDefault is how often the lag is measured: well under MaxLagDefault, so a
	// replica that falls behind stops serving reads within about a second of crossing it.
	MeasureEveryDefault = time.Second
	// MeasureTimeoutDefault bounds one measurement (both servers) and a read's wait for the
	// replica's first answer: a replica slower than that to answer a trivial query, or to start
	// an index walk, is not worth waiting for while the primary can answer.
	MeasureTimeoutDefault = 2 * time.Second
	// ReplicaConnectTimeout bounds connecting to the replica when database.read_url sets no
	// connect_timeout. A read stops waiting for a connection after Timeout, but pgxpool goes on
	// connecting in the background: unbounded, each attempt on a replica that accepts TCP and
	// never answers would hold a slot of the pool for good.
	ReplicaConnectTimeout = 5 * time.Second
)

// ReadSource is where reads go.
type ReadSource string

// The two sources.
const (
	SourcePrimary ReadSource = "primary"
	SourceReplica ReadSource = "replica"
)

// ReadState is where reads go now and why: what the console, `collector status` and the
// metrics show.
type ReadState struct {
	Source ReadSource
	// Replica is whether one is configured (database.read_url); without one, Source is always
	// the primary and nothing else is set.
	Replica bool
	// Where is the replica as host:port/dbname.
	Where string
	// Lag is how far the replica trailed at MeasuredAt, when LagKnown (an upper bound: 0 when it
	// had replayed all the primary had written when the measurement began).
	Lag      time.Duration
	LagKnown bool
	// Paused is true when the replica's WAL replay is paused (pg_wal_replay_pause()).
	Paused bool
	MaxLag time.Duration
	// Reason says why the primary serves reads although a replica is configured ("" otherwise).
	Reason     string
	MeasuredAt time.Time
}

// String is the state in a few words: "replica (lag 0.2s)", "primary (replica lagging 12s,
// max 5s)", "primary".
func (s ReadState) String() string {
	switch {
	case s.Source == SourceReplica:
		return fmt.Sprintf("replica (lag %s)", roundLag(s.Lag))
	case s.Reason != "":
		return "primary (" + s.Reason + ")"
	}
	return string(s.Source)
}

func roundLag(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(100 * time.Millisecond)
}

// readCause tells states apart for logging: a change of cause is logged, a new lag figure is not.
type readCause string

const (
	causeNone        readCause = ""
	causeUnmeasured  readCause = "unmeasured"
	causeLagging     readCause = "lagging"
	causeUnreachable readCause = "unreachable"
	causeNotStandby  readCause = "not a standby"
	causeOther       readCause = "another cluster or database"
	causePrimary     readCause = "primary unreachable"
)

// NewReads builds a router over primary and replica (nil: reads go to the primary). It starts
// on the primary until the first measurement (RunOnce, or Start) finds the replica in step.
func NewReads(primary, replica *pgxpool.Pool, cfg ReadsConfig, log *zap.Logger) *Reads {
	if log == nil {
		log = zap.NewNop()
	}
	if cfg.MaxLag <= 0 {
		cfg.MaxLag = MaxLagDefault
	}
	if cfg.Every <= 0 {
		cfg.Every = MeasureEveryDefault
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = MeasureTimeoutDefault
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &Reads{primary: primary, replica: replica, cfg: cfg, log: log}
	r.state = ReadState{Source: SourcePrimary}
	if replica != nil {
		r.where = whereOf(replica)
		r.state = ReadState{Source: SourcePrimary, Replica: true, Where: r.where, MaxLag: cfg.MaxLag,
			Reason: "replica lag not measured yet"}
		r.kind = causeUnmeasured
	}
	return r
}

// OpenReplica opens the pool on database.read_url without waiting for the server: a replica
// that is down at start only sends reads to the primary until it answers. Connecting is
// bounded by the URL's connect_timeout, or else ReplicaConnectTimeout.
func OpenReplica(ctx context.Context, cfg PoolConfig) (*pgxpool.Pool, error) {
	pc, err := poolConfig(cfg, "database.read_url")
	if err != nil {
		return nil, err
	}
	if pc.ConnConfig.ConnectTimeout == 0 {
		pc.ConnConfig.ConnectTimeout = ReplicaConnectTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open the read replica pool (database.read_url): %w", err)
	}
	return pool, nil
}

// Served records where the reads of one request were answered, for an answer to say so: a
// consumer can then tell a replica's answer, and how far behind the primary it may be.
type Served struct {
	mu       sync.Mutex
	replica  bool
	lag      time.Duration
	lagKnown bool
	// primary: a read of the request ran on the primary. The reads after it do too: a replica
	// the router returned to meanwhile trails it, and one answer read partly from each could
	// claim what neither holds (a series' seen_until past a change the replica lacks).
	primary bool
}

type servedKey struct{}

// WithServed returns ctx carrying a new Served, which Reads fills in.
func WithServed(ctx context.Context) (context.Context, *Served) {
	s := &Served{}
	return context.WithValue(ctx, servedKey{}, s), s
}

// String is "primary", or "replica; lag=0.4" (seconds, as last measured) when any read was
// answered by the replica.
func (s *Served) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case !s.replica:
		return "primary"
	case !s.lagKnown:
		return "replica"
	}
	return fmt.Sprintf("replica; lag=%.1f", s.lag.Seconds())
}

// Reset forgets the replica's reads so far, for an answer read again from the primary alone.
func (s *Served) Reset() {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replica, s.lag, s.lagKnown, s.primary = false, 0, false, false
}

// ServedFrom is ctx's Served (WithServed), or nil.
func ServedFrom(ctx context.Context) *Served {
	s, _ := ctx.Value(servedKey{}).(*Served)
	return s
}

// toReplica says whether a read of ctx goes to the replica: the router says so, and no read of
// the same request (ctx's Served) ran on the primary. A read that does not is noted as the
// primary's.
func (r *Reads) toReplica(ctx context.Context) bool {
	s := ServedFrom(ctx)
	if s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
	}
	if (s == nil || !s.primary) && r.onReplica() {
		return true
	}
	if s != nil {
		s.primary = true
	}
	return false
}

// fromPrimary notes in ctx's Served, if any, that a read fell back to the primary.
func fromPrimary(ctx context.Context) {
	if s := ServedFrom(ctx); s != nil {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.primary = true
	}
}

// fromReplica notes in ctx's Served, if any, that the replica answered a read.
func (r *Reads) fromReplica(ctx context.Context) {
	s := ServedFrom(ctx)
	if s == nil {
		return
	}
	st := r.State()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.replica = true
	if st.LagKnown && (!s.lagKnown || st.Lag > s.lag) {
		s.lag, s.lagKnown = st.Lag, true
	}
}

// Query runs a read where State says; a replica that fails to answer, or does not answer
// within Config.Timeout, is marked down and the read runs on the primary instead.
func (r *Reads) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if !r.toReplica(ctx) {
		return r.primary.Query(ctx, sql, args...)
	}
	w := r.waitReplica(ctx)
	rows, err := r.replica.Query(w.ctx, sql, args...)
	if err != nil {
		if r.replicaFailed(ctx, w.end(), err) {
			fromPrimary(ctx)
			return r.primary.Query(ctx, sql, args...)
		}
		return rows, err
	}
	return &fallbackRows{Rows: rows, r: r, w: w, ctx: ctx, sql: sql, args: args}, nil
}

// errReplicaSilent cancels a read the replica did not answer within Config.Timeout.
var errReplicaSilent = errors.New("the replica did not answer in time")

// replicaWait bounds a read's wait for the replica's first answer. A replica that hangs, or
// whose packets are dropped, raises no error: the read would wait as long as TCP lets it (and
// hold the API's read slots meanwhile) while the primary could answer. After the first answer
// the read runs as long as its caller lets it: rows handed over cannot be taken back, so
// there is nothing left to fall back from. Used by one goroutine, the read's.
type replicaWait struct {
	ctx     context.Context // the caller's, cancelled when the wait runs out or the read ends
	cancel  context.CancelCauseFunc
	timer   *time.Timer
	stopped bool
	ranOut  bool
}

func (r *Reads) waitReplica(ctx context.Context) *replicaWait {
	wctx, cancel := context.WithCancelCause(ctx)
	return &replicaWait{ctx: wctx, cancel: cancel, timer: time.AfterFunc(r.cfg.Timeout, func() { cancel(errReplicaSilent) })}
}

// stop stops the clock at the replica's first answer (once) and tells whether it had run out
// first: then the read is cancelled, whatever the answer was.
func (w *replicaWait) stop() (ranOut bool) {
	if !w.stopped {
		w.stopped = true
		if !w.timer.Stop() {
			w.ranOut = true
			w.cancel(errReplicaSilent) // the timer's own call may not have run yet
		}
	}
	return w.ranOut
}

// end releases the wait once the read on the replica is over, and tells whether it had run
// out first; it may be called again.
func (w *replicaWait) end() (ranOut bool) {
	ranOut = w.stop()
	w.cancel(nil)
	return ranOut
}

// fallbackRows runs the query again on the primary when the replica fails, or does not answer
// in time, before the first row: pgx sends a query lazily, so a replica that died since its
// last use is only found out at the first Next, and until a row has been handed over the
// switch is invisible. A failure after that is the caller's error: rows already read cannot
// be taken back.
type fallbackRows struct {
	pgx.Rows
	r    *Reads // nil once a row was read or the switch made
	w    *replicaWait
	ctx  context.Context
	sql  string
	args []any
	err  error // the switch's own: the primary's failure to start the query again
}

func (f *fallbackRows) Next() bool {
	more := f.Rows.Next()
	if f.r == nil {
		if !more {
			f.w.end()
		}
		return more
	}
	r := f.r
	f.r = nil
	ranOut := f.w.stop()
	if more && !ranOut {
		r.fromReplica(f.ctx)
		return true
	}
	// The first answer is the end of the rows (an error, or an empty result), or a row that
	// came as the wait ran out, too late: that read is being cancelled.
	f.w.end()
	err := f.Rows.Err()
	if !more && err == nil {
		r.fromReplica(f.ctx)
		return false
	}
	if !r.replicaFailed(f.ctx, ranOut, err) {
		if more { // the caller gave up as the row came
			f.Rows.Close()
			f.err = f.ctx.Err()
		}
		return false
	}
	f.Rows.Close()
	fromPrimary(f.ctx)
	rows, err := r.primary.Query(f.ctx, f.sql, f.args...)
	if err != nil {
		f.err = err
		return false
	}
	f.Rows = rows
	return f.Rows.Next()
}

func (f *fallbackRows) Close() {
	f.Rows.Close()
	f.w.end()
}

func (f *fallbackRows) Err() error {
	if f.err != nil {
		return f.err
	}
	return f.Rows.Err()
}

// QueryRow is Query for one row; the fallback happens at Scan, where pgx reports the error.
func (r *Reads) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if !r.toReplica(ctx) {
		return r.primary.QueryRow(ctx, sql, args...)
	}
	w := r.waitReplica(ctx)
	return fallbackRow{r: r, w: w, ctx: ctx, sql: sql, args: args, row: r.replica.QueryRow(w.ctx, sql, args...)}
}

type fallbackRow struct {
	r    *Reads
	w    *replicaWait
	ctx  context.Context
	sql  string
	args []any
	row  pgx.Row
}

func (f fallbackRow) Scan(dest ...any) error {
	err := f.row.Scan(dest...)
	if ranOut := f.w.end(); err != nil && f.r.replicaFailed(f.ctx, ranOut, err) {
		fromPrimary(f.ctx)
		return f.r.primary.QueryRow(f.ctx, f.sql, f.args...).Scan(dest...)
	}
	f.r.fromReplica(f.ctx)
	return err
}

// Primary is the primary's pool, for a read that must not trail it (the API's /latest).
func (r *Reads) Primary() *pgxpool.Pool { return r.primary }

// State is where reads go now and why.
func (r *Reads) State() ReadState {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

func (r *Reads) onReplica() bool {
	if r.replica == nil {
		return false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	// A measurement loop that stopped (or hangs) must not leave reads on a replica that may have
	// fallen behind since.
	if r.state.Source == SourceReplica && r.cfg.Now().Sub(r.state.MeasuredAt) > r.stale() {
		r.setLocked(r.primaryState(causeUnmeasured, fmt.Sprintf("replica lag not measured for %s", r.stale())))
	}
	return r.state.Source == SourceReplica
}

// stale is how old a measurement may be before it no longer vouches for the replica.
func (r *Reads) stale() time.Duration { return 3*r.cfg.Every + r.cfg.Timeout }

// replicaFailed reports whether a read that failed on the replica, or whose wait for it ran
// out, should run on the primary: the replica did not answer (in time), or cancelled the read
// for a recovery conflict. The replica is then marked down until the next measurement finds it
// again, so the reads that follow go to the primary without waiting for it.
func (r *Reads) replicaFailed(ctx context.Context, ranOut bool, err error) bool {
	var reason string
	pgErr := (*pgconn.PgError)(nil)
	switch {
	case ctx.Err() != nil:
		return false // the caller gave up: nobody waits for the primary's answer
	case ranOut:
		reason = fmt.Sprintf("replica did not answer a read within %s", r.cfg.Timeout)
	case replicaLacks(err):
		reason = "replica refused a read: " + err.Error()
	case errors.Is(err, pgx.ErrNoRows) || !Transient(err):
		return false
	case errors.As(err, &pgErr):
		reason = "replica refused a read: " + err.Error()
	default:
		reason = "replica unreachable: " + err.Error()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.setLocked(r.primaryState(causeUnreachable, reason))
	return true
}

// replicaLacks tells an error that is the replica's, not the read's: its role may not read
// what the primary's may (database.read_url's user never granted), or it lacks a table or
// column the primary has. The same read on the primary answers.
func replicaLacks(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	switch pgErr.Code {
	case "42501", "42P01", "42703", "42883": // insufficient privilege, undefined table, column, function
		return true
	}
	return false
}

// Start measures the lag at once and then every Config.Every until ctx ends.
func (r *Reads) Start(ctx context.Context) {
	if r.replica == nil {
		return
	}
	t := time.NewTicker(r.cfg.Every)
	defer t.Stop()
	for {
		r.RunOnce(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// replicaLag is what one measurement read from the two servers.
type replicaLag struct {
	primaryLSN uint64
	// other, when set, says the replica is not a copy of the primary's database: another
	// cluster (system identifier) or another database of it.
	other      string
	inRecovery bool
	replayLSN  uint64
	paused     bool
	// sinceReplay is the primary's clock at the measurement less the replica's
	// pg_last_xact_replay_timestamp(); nil before it replayed any transaction.
	sinceReplay *time.Duration
}

// RunOnce measures the replica's lag once, routes reads by it and returns the new state.
func (r *Reads) RunOnce(ctx context.Context) ReadState {
	if r.replica == nil {
		return r.State()
	}
	start := r.cfg.Now()
	m, cause, err := r.measure(ctx)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil {
		r.setLocked(r.primaryState(cause, err.Error()))
		return r.state
	}
	if m.other != "" {
		r.setLocked(r.primaryState(causeOther, "replica at "+r.where+" "+m.other))
		return r.state
	}
	if !m.inRecovery {
		r.setLocked(r.primaryState(causeNotStandby, "replica at "+r.where+" is not a standby (promoted?): its data no longer follows the primary"))
		return r.state
	}
	st := ReadState{Source: SourceReplica, Replica: true, Where: r.where, MaxLag: r.cfg.MaxLag, Paused: m.paused, MeasuredAt: start}
	st.Lag, st.LagKnown = r.lag(m, start)
	r.last.lsn, r.last.at = m.primaryLSN, start
	switch {
	case !st.LagKnown:
		st.Source, st.Reason = SourcePrimary, "replica lag unknown: it has replayed no transaction since it started"
		r.setLocked(st, causeLagging)
	case st.Lag > r.cfg.MaxLag:
		st.Source, st.Reason = SourcePrimary, fmt.Sprintf("replica lagging %s, max %s", roundLag(st.Lag), r.cfg.MaxLag)
		if m.paused {
			st.Reason += "; its replay is paused"
		}
		r.setLocked(st, causeLagging)
	default:
		r.setLocked(st, causeNone)
	}
	return r.state
}

// lag is the replica's lag at the start of the measurement: 0 when it had replayed everything
// the primary had written when the measurement began; otherwise the least of two upper bounds,
// the time since its last replayed commit (which alone would count an idle primary's quiet
// spell as lag) and the time since the previous measurement, when it has replayed what the
// primary had written then.
func (r *Reads) lag(m replicaLag, now time.Time) (time.Duration, bool) {
	if m.replayLSN >= m.primaryLSN {
		return 0, true
	}
	var bound time.Duration
	known := false
	if m.sinceReplay != nil {
		bound, known = max(*m.sinceReplay, 0), true
	}
	if !r.last.at.IsZero() && m.replayLSN >= r.last.lsn {
		if d := now.Sub(r.last.at); !known || d < bound {
			bound, known = d, true
		}
	}
	return bound, known
}

// measure reads the primary's WAL position, then how far the replica has replayed: in that
// order, so a replica at or past the position had everything committed before the measurement.
func (r *Reads) measure(ctx context.Context) (replicaLag, readCause, error) {
	ctx, cancel := context.WithTimeout(ctx, r.cfg.Timeout)
	defer cancel()
	var m replicaLag
	var lsn string
	// The cluster's identity and the database's name, on both: a standby of another cluster
	// (left following an old primary, a staging one) has LSNs that say nothing about ours, and
	// another database on the right standby lacks our tables; either would be read as in step.
	var sysID, db, rSysID, rDB string
	var primaryNow time.Time
	if err := r.primary.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text, (SELECT system_identifier::text FROM pg_control_system()), current_database(), clock_timestamp()`).
		Scan(&lsn, &sysID, &db, &primaryNow); err != nil {
		return m, causePrimary, fmt.Errorf("cannot measure the replica's lag: the primary's WAL position: %w", err)
	}
	var err error
	if m.primaryLSN, err = parseLSN(lsn); err != nil {
		return m, causePrimary, err
	}
	var replay *string
	var replayedAt *time.Time
	// pg_is_wal_replay_paused() fails outside recovery; CASE does not call it there.
	err = r.replica.QueryRow(ctx, `
		SELECT pg_is_in_recovery(), pg_last_wal_replay_lsn()::text,
		       CASE WHEN pg_is_in_recovery() THEN pg_is_wal_replay_paused() ELSE false END,
		       pg_last_xact_replay_timestamp(),
		       (SELECT system_identifier::text FROM pg_control_system()), current_database()`).
		Scan(&m.inRecovery, &replay, &m.paused, &replayedAt, &rSysID, &rDB)
	if err != nil {
		return m, causeUnreachable, fmt.Errorf("replica unreachable at %s: %w", r.where, err)
	}
	switch {
	case rSysID != sysID:
		m.other = fmt.Sprintf("belongs to another cluster (system identifier %s, the primary's %s): it is not a standby of the primary", rSysID, sysID)
	case rDB != db:
		m.other = fmt.Sprintf("serves database %q, the primary's is %q: check database.read_url", rDB, db)
	}
	if m.other == "" {
		// The functions above are everyone's: a role that may not read the tables would look
		// in step, and every read would fail on it first. Partitions are read through their
		// parents, whose privileges decide.
		var denied *string
		if err := r.replica.QueryRow(ctx, `
			SELECT string_agg(c.relname, ', ' ORDER BY c.relname) FROM pg_class c
			WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema()) AND c.relkind IN ('r', 'p')
			  AND NOT c.relispartition AND NOT has_table_privilege(c.oid, 'SELECT')`).Scan(&denied); err != nil {
			return m, causeUnreachable, fmt.Errorf("replica unreachable at %s: %w", r.where, err)
		}
		if denied != nil {
			return m, causeUnreachable, fmt.Errorf("replica at %s cannot be read: database.read_url's role may not read %s (GRANT SELECT ON ALL TABLES IN SCHEMA on the primary)", r.where, *denied)
		}
	}
	if replayedAt != nil {
		// A commit's time is the primary's clock: measured on it, not on the replica's, whose
		// skew would hide a stalled replay (a replica 60 s slow read lag 0) or invent one.
		since := primaryNow.Sub(*replayedAt)
		m.sinceReplay = &since
	}
	if replay != nil {
		if m.replayLSN, err = parseLSN(*replay); err != nil {
			return m, causeUnreachable, err
		}
	}
	if m.other == "" && m.replayLSN > m.primaryLSN {
		// Past the position read before it: the primary may have written on meanwhile. Past one
		// read after it, the replica has replayed WAL the primary never wrote: it follows another
		// timeline (left behind by a failover or a restore) and serves a past that is no longer
		// ours, which a lag of 0 would pass off as current.
		var now string
		if err := r.primary.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&now); err != nil {
			return m, causePrimary, fmt.Errorf("cannot measure the replica's lag: the primary's WAL position: %w", err)
		}
		if after, err := parseLSN(now); err == nil && m.replayLSN > after {
			m.other = fmt.Sprintf("has replayed WAL the primary has not written (%s, the primary at %s): it follows another timeline, "+
				"left behind by a failover or a restore; make it again from the primary", *replay, now)
		}
	}
	return m, causeNone, nil
}

// parseLSN reads PostgreSQL's pg_lsn text form, "16/B374D848".
func parseLSN(s string) (uint64, error) {
	var hi, lo uint32
	if _, err := fmt.Sscanf(s, "%X/%X", &hi, &lo); err != nil {
		return 0, fmt.Errorf("read WAL position %q: %w", s, err)
	}
	return uint64(hi)<<32 | uint64(lo), nil
}

// primaryState is the state that sends reads to the primary for cause.
func (r *Reads) primaryState(cause readCause, reason string) (ReadState, readCause) {
	return ReadState{Source: SourcePrimary, Replica: true, Where: r.where, MaxLag: r.cfg.MaxLag, Reason: reason,
		MeasuredAt: r.cfg.Now()}, cause
}

// setLocked stores the state and logs a change of where reads go or of why.
func (r *Reads) setLocked(st ReadState, cause readCause) {
	prev, prevCause := r.state, r.kind
	r.state, r.kind = st, cause
	if st.Source == prev.Source && cause == prevCause {
		return
	}
	fields := []zap.Field{zap.String("replica", r.where), zap.String("reads_from", string(st.Source)),
		zap.Duration("max_lag_seconds", r.cfg.MaxLag)}
	if st.LagKnown {
		fields = append(fields, zap.Duration("lag_seconds", st.Lag))
	}
	if st.Source == SourceReplica {
		r.log.Info("reads go to the replica", fields...)
		return
	}
	r.log.Warn("reads go to the primary: "+st.Reason, fields...)
}
