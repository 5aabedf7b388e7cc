// Package catalog owns tracked_items, every statement on it, and the tracked items' life
// cycle: importing items from a targets file, scoring popularity and applying the tier policy
// (internal/tierplan) to the rows, operators' pins, and reactivating items when someone shows
// interest in them. The dispatcher's lease (lease.go) and write-back (writeback.go) are
// statements here too: the dispatcher decides when and how much to claim, and history decides
// what a collection records on the row (history.Policy.Rows). It also
// names the seed:synthetic fixtures' ids; the one rule that tells any fixture apart is the
// schema's synthetic_item(item_id), and the fixtures themselves are internal/devdata's.
package catalog

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what this package needs from PostgreSQL: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DB interface {
	Reader
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Reader is what the catalog's reads need: a pool, or a router that may send them to a replica
// (store.Reads).
type Reader interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SyntheticPrefix is the prefix seed:synthetic gives its items, one of those the schema's
// synthetic_item(item_id) recognises (TestSyntheticItemRule holds the two together).
const SyntheticPrefix = "seed-"
