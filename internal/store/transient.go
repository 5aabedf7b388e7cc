package store

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Transient reports whether a failed statement or transaction is worth running again as it
// is: the connection was lost or refused (no answer, SQLSTATE class 08, the server shutting
// down or out of connections), or PostgreSQL chose it as the victim of a serialization
// failure or deadlock. A data or programming error (constraint, bad value, bad SQL) is not:
// running it again fails the same way.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || dataFault(err) {
		return false
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return true // no answer from the server: killed, reset or timed-out connection
	}
	switch pgErr.Code {
	case "40001", "40P01", "55P03", "57P01", "57P02", "57P03", "53300", "57014":
		// serialization_failure, deadlock_detected, lock_not_available, admin_shutdown,
		// crash_shutdown, cannot_connect_now, too_many_connections, query_canceled
		return true
	case "25P03", "57P05":
		// idle_in_transaction_session_timeout, idle_session_timeout: the server ended a session
		// that waited on us, as it does when this process was frozen (a paused VM, SIGSTOP)
		// mid-transaction. The data was fine; a fresh connection writes it.
		return true
	case "0A000":
		// A statement pgx prepared before a migration changed its result's columns ("cached
		// plan must not change result type", told by the server function that raises it: the
		// message is translated under lc_messages): pgx drops it from its cache on this error,
		// so the same statement succeeds again.
		return pgErr.Routine == "RevalidateCachedQuery"
	}
	return strings.HasPrefix(pgErr.Code, "08")
}

// PoolerMismatch tells whether err is a prepared statement that vanished or already existed
// (SQLSTATE 26000, 42P05): what pgx's statement cache meets behind a transaction-pooling
// PgBouncer, where consecutive statements may run on different server connections.
func PoolerMismatch(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "26000" || pgErr.Code == "42P05")
}

// ExplainPooler names the setting to change when err is a PoolerMismatch; other errors are
// returned as they are.
func ExplainPooler(err error) error {
	if !PoolerMismatch(err) {
		return err
	}
	return fmt.Errorf("%w: is the database behind PgBouncer in transaction mode? Set database.query_exec_mode: simple_protocol "+
		"(or default_query_exec_mode=simple_protocol in database.url), and database.direct_url to PostgreSQL itself for "+
		"migrations and LISTEN (docs/operations.md, \"Behind PgBouncer\")", err)
}

// dataFault tells whether err is a row's values meeting our code (a DataError, or a value pgx
// could not scan, such as an infinite time): the server answered, the connection is fine.
func dataFault(err error) bool {
	var data *DataError
	var scan pgx.ScanArgError
	return errors.As(err, &data) || errors.As(err, &scan)
}

// DataError marks an error that some row's values met before anything reached the server (a
// value that cannot be encoded, a panic on an item's data). Transient otherwise takes an error
// without the server's answer for a lost connection; retrying this one cannot help, and a
// writer that did would hold the row's batch-mates with it.
type DataError struct{ Err error }

func (e *DataError) Error() string { return e.Err.Error() }
func (e *DataError) Unwrap() error { return e.Err }
