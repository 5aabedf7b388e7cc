package store

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs one statement: a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}
