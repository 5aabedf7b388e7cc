package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// WriteCause names why the database does not take writes. The set is fixed and small: it is a
// metric label and part of `collector status -o json`.
type WriteCause string

const (
	// CauseReadOnly: transactions are read-only (default_transaction_read_only, SQLSTATE 25006
	// read_only_sql_transaction), as after a failover left the address on a read-only node.
	CauseReadOnly WriteCause = "read_only"
	// CauseStandby: the server is a hot standby (pg_is_in_recovery()): it never takes writes
	// until promoted.
	CauseStandby WriteCause = "standby"
	// CauseDiskFull: SQLSTATE 53100 disk_full.
	CauseDiskFull WriteCause = "disk_full"
	// CauseResources: another insufficient_resources error (class 53: out of memory, a
	// configuration limit; not 53300, a new session refused at max_connections).
	CauseResources WriteCause = "insufficient_resources"
	// CauseShutdown: the server is shutting down, crashed or is starting up (57P01 admin_shutdown,
	// 57P02 crash_shutdown, 57P03 cannot_connect_now).
	CauseShutdown WriteCause = "shutting_down"
	// CauseUnreachable: no answer at all (connection refused, reset or timed out; class 08).
	CauseUnreachable WriteCause = "unreachable"
)

// WriteCauses lists every cause, for metric labels.
var WriteCauses = []WriteCause{CauseReadOnly, CauseStandby, CauseDiskFull, CauseResources, CauseShutdown, CauseUnreachable}

// RefusedCause tells whether err means the database cannot take writes now, and why; "" for
// nil, a cancelled context, and anything caused by the statement or its data (retrying those
// fails the same way, whatever the database's state). Every cause is the server's state, not
// the write's: the same write succeeds once the state passes. The first three refuse writes
// on a server that still answers; the last two mean it does not answer usefully at all.
func RefusedCause(err error) WriteCause {
	if err == nil || errors.Is(err, context.Canceled) || dataFault(err) {
		return ""
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return CauseUnreachable // no answer from the server, as Transient reads it
	}
	switch c := pgErr.Code; {
	case c == "25006":
		return CauseReadOnly
	case c == "53100":
		return CauseDiskFull
	case c == "53300":
		// A new session refused at max_connections: the server takes writes on the sessions it
		// has (the pool's), so this holds nothing; Transient retries it.
		return ""
	case strings.HasPrefix(c, "53"):
		return CauseResources
	case c == "57P01", c == "57P02", c == "57P03":
		return CauseShutdown
	case strings.HasPrefix(c, "08"):
		return CauseUnreachable
	}
	return ""
}

// RefusedByServer tells whether the server itself answered err with a refusal (RefusedCause
// of a PgError). Loops that write now and then report only these: a connection that failed is
// the probe's to tell, and an error of their own (a timeout, a missing session) is no state of
// the database.
func RefusedByServer(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && RefusedCause(err) != ""
}

// WriteState is whether the database takes writes, as this process last saw it.
type WriteState struct {
	Writable bool
	Cause    WriteCause // "" when Writable
	Detail   string     // the error or probe answer that set Cause
	Since    time.Time  // when the current state began (zero: writable since start)
}

// WriteHealth tracks whether the database takes this process's writes: every write path
// reports its outcome (Observe), and the last refusal stands until a write succeeds. A probe
// (ProbeWritable) adds what a read can tell before any write fails. A lack of space or other
// resources (class 53) stands until a write that needed them succeeds (ProbeSpace): an update
// that fits in its page succeeds on a full disk, and clearing on it made the state flap. Safe
// for concurrent use.
type WriteHealth struct {
	mu    sync.Mutex
	state WriteState
	// short is the class-53 refusal standing until ObserveSpace proves space again (zero:
	// none); it outlives other causes seen meanwhile, so a restart of a server whose disk is
	// full ends in short again, not in writable.
	short   WriteState
	changed chan struct{} // closed and replaced on every change
	// OnChange, when set before use, hears every change of state (metrics, logs).
	OnChange func(WriteState)
	seq      uint64     // changes made (under mu)
	notify   sync.Mutex // serialises OnChange
	told     uint64     // the last change OnChange heard (under notify)
}

// NewWriteHealth starts writable.
func NewWriteHealth() *WriteHealth {
	return &WriteHealth{state: WriteState{Writable: true}, changed: make(chan struct{})}
}

// Wait returns true at once while the database takes writes, else when it takes them again;
// false when ctx ends first. A nil WriteHealth never waits.
func (h *WriteHealth) Wait(ctx context.Context) bool {
	if h == nil {
		return true
	}
	for {
		h.mu.Lock()
		ok, ch := h.state.Writable, h.changed
		h.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

// Hold is a provider.Hold: it holds a call while the database refuses writes, so nothing is
// asked whose answer could not be stored.
func (h *WriteHealth) Hold(ctx context.Context) (held bool, err error) {
	if h.State().Writable {
		return false, nil
	}
	if !h.Wait(ctx) {
		return true, ctx.Err()
	}
	return true, nil
}

// Observe records a write's outcome: an error RefusedCause names marks the database refused;
// nil marks it writable, unless a lack of space stands (SpaceShort): that only ObserveSpace
// clears. Any other error (the write's own data) tells nothing and is ignored.
func (h *WriteHealth) Observe(err error) {
	if h == nil {
		return
	}
	if err == nil {
		h.clear(false)
		return
	}
	if c := RefusedCause(err); c != "" {
		h.refuse(WriteState{Cause: c, Detail: err.Error()})
	}
}

// ObserveAnswer records the outcome of a write made now and then on a short bound (a
// heartbeat, a lease renewal or release): a success, or a refusal the server answered. Its own
// timeout is no state of the database: under a busy pool it is a wait for a pooled connection,
// and an unreachable server is the probe's to tell, which asks on a session of its own.
func (h *WriteHealth) ObserveAnswer(err error) {
	if err == nil || RefusedByServer(err) {
		h.Observe(err)
	}
}

// ObserveProbe records ProbeWritable's answer: a refusal it sees is set; a clean answer clears
// what a probe can see (read-only, standby, a server shutting down or unreachable), whoever
// reported it, back to writable or to a lack of space still standing.
func (h *WriteHealth) ObserveProbe(cause WriteCause, detail string) {
	if h == nil {
		return
	}
	if cause != "" {
		h.refuse(WriteState{Cause: cause, Detail: detail})
		return
	}
	h.mu.Lock()
	seen := h.state.Cause
	h.mu.Unlock()
	if seen != "" && !lacking(seen) {
		h.clear(false)
	}
}

// ObserveSpace records ProbeSpace's answer: nil proves the database takes a write that needs
// new space, and clears every cause; an error is recorded as Observe records it.
func (h *WriteHealth) ObserveSpace(err error) {
	if h == nil {
		return
	}
	if err == nil {
		h.clear(true)
		return
	}
	h.Observe(err)
}

// SpaceShort reports a lack of space or resources standing until ObserveSpace proves otherwise.
func (h *WriteHealth) SpaceShort() bool {
	if h == nil {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.short.Cause != ""
}

// lacking is whether c is a lack of space or resources, which only a write that needed them
// disproves.
func lacking(c WriteCause) bool { return c == CauseDiskFull || c == CauseResources }

func (h *WriteHealth) refuse(s WriteState) {
	h.update(func() WriteState {
		if lacking(s.Cause) {
			h.short = s
		}
		return s
	})
}

// clear marks the database writable, or short of space while that stands and space is not
// proven.
func (h *WriteHealth) clear(spaceProven bool) {
	h.update(func() WriteState {
		if spaceProven {
			h.short = WriteState{}
		}
		if h.short.Cause != "" {
			return h.short
		}
		return WriteState{Writable: true}
	})
}

// update sets the state next returns, next running under the lock so that concurrent reports
// apply in one order.
func (h *WriteHealth) update(next func() WriteState) {
	h.mu.Lock()
	s, prev := next(), h.state
	if prev.Writable == s.Writable && prev.Cause == s.Cause {
		h.state.Detail = s.Detail // same state, fresher words
		h.mu.Unlock()
		return
	}
	s.Since = time.Now()
	h.state = s
	if h.changed != nil {
		close(h.changed)
	}
	h.changed = make(chan struct{})
	h.seq++
	seq := h.seq
	h.mu.Unlock()
	if h.OnChange == nil {
		return
	}
	// One change told at a time, never one older than the last told: two changes racing here
	// must not leave the metric and the log on the earlier state.
	h.notify.Lock()
	defer h.notify.Unlock()
	if seq > h.told {
		h.told = seq
		h.OnChange(s)
	}
}

// State is the current state.
func (h *WriteHealth) State() WriteState {
	if h == nil {
		return WriteState{Writable: true}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state
}

// RowQuerier is a pool or a single connection.
type RowQuerier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ProbeWritable asks the database, without writing anything, whether it would take a write:
// a fresh transaction's transaction_read_only (on for default_transaction_read_only and on a
// standby) and pg_is_in_recovery() (a standby). It returns "" when it would, or the cause and
// the words to show. A disk that is full only shows on a real write, which a probe does not
// make: WriteHealth keeps that from the write paths. The pool's connections keep the session
// settings they were opened with, so a database switched to read-only under open connections
// shows here once they reconnect, as after a failover, where they are all cut.
func ProbeWritable(ctx context.Context, db RowQuerier) (WriteCause, string) {
	var readOnly string
	var recovery bool
	err := db.QueryRow(ctx, `SELECT current_setting('transaction_read_only'), pg_is_in_recovery()`,
		pgx.QueryExecModeSimpleProtocol).Scan(&readOnly, &recovery)
	switch {
	case err != nil:
		if NoSessionToSpare(err) {
			// No refusal of writes, but what `collector status` should show of a server at
			// max_connections; the daemon's probe does not ask the pool when it met this.
			return CauseResources, fmt.Sprintf("probe: %v", err)
		}
		if c := RefusedCause(err); c != "" {
			return c, fmt.Sprintf("probe: %v", err)
		}
		return CauseUnreachable, fmt.Sprintf("probe: %v", err)
	case recovery:
		return CauseStandby, "the server is a standby in recovery (pg_is_in_recovery() is true): it takes no writes until promoted"
	case readOnly == "on":
		return CauseReadOnly, "new transactions are read-only (transaction_read_only is on: default_transaction_read_only is set for this database, role or server)"
	}
	return "", ""
}

// TxBeginner is a pool or a single connection.
type TxBeginner interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// spaceProbeSQL writes about a megabyte into a table created in the same transaction: a new
// table's file starts empty, so every block it gets is new space in the database's default
// tablespace, which no update in place or reused page would prove. The margin keeps a disk with a few pages free from passing for one with room
// (the state would flap). UNLOGGED keeps the megabyte out of the WAL; the caller's rollback
// unlinks the file, so nothing is left behind.
const spaceProbeSQL = `
CREATE %[1]s TABLE collector_space_probe (b text) %[2]s;
INSERT INTO collector_space_probe SELECT repeat('x', 1000) FROM generate_series(1, %[3]d)`

// SpaceMargin is the daemon's probe: a megabyte. SpaceBlock is one block, what a status read
// needs to tell a full disk from one that takes a write, at a thousandth of the cost.
const (
	SpaceMargin = 1000
	SpaceBlock  = 1
)

// ProbeSpace makes a write that certainly needs new space in the database's default tablespace,
// rows of about a kilobyte each (SpaceMargin, SpaceBlock), and rolls it back: nil when the
// database took it. Its error says why not; RefusedCause reads it (53100 disk_full on a full
// disk). It runs in one transaction in the simple protocol, so it works behind PgBouncer in
// transaction mode. A role that may not create a table in its schema (PostgreSQL 15's public
// schema) makes a temporary one instead, which needs only TEMP and lands in the same
// tablespace unless temp_tablespaces points elsewhere.
func ProbeSpace(ctx context.Context, db TxBeginner, rows int) error {
	err := probeSpace(ctx, db, fmt.Sprintf(spaceProbeSQL, "UNLOGGED", "", rows))
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (strings.HasPrefix(pgErr.Code, "42") || strings.HasPrefix(pgErr.Code, "3F")) {
		err = probeSpace(ctx, db, fmt.Sprintf(spaceProbeSQL, "TEMPORARY", "ON COMMIT DROP", rows))
	}
	return err
}

func probeSpace(ctx context.Context, db TxBeginner, sql string) error {
	tx, err := db.Begin(ctx)
	if err != nil {
		return fmt.Errorf("space probe: %w", err)
	}
	defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }()
	if _, err := tx.Exec(ctx, sql, pgx.QueryExecModeSimpleProtocol); err != nil {
		return fmt.Errorf("space probe: %w", err)
	}
	return nil
}

// NoSessionToSpare tells whether err is the server refusing a new session at max_connections
// (53300): it answers, and says nothing of whether it takes writes.
func NoSessionToSpare(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "53300"
}
