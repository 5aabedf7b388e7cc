package store

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Transient reports whether a failed statement or transaction is worth running again as it
// is: the connection was lost or refused (no answer, SQLSTATE class 08, the server shutting
// down or out of connections), or PostgreSQL chose it as the victim of a serialization
// failure or deadlock. A data or programming error (constraint, bad value, bad SQL) is not:
// running it again fails the same way.
func Transient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
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
	}
	return strings.HasPrefix(pgErr.Code, "08")
}
