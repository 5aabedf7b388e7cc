// Package catalog owns the tracked items' life cycle in tracked_items: importing items from a
// targets file, scoring popularity and applying the tier policy (internal/tierplan) to the
// rows, operators' pins, and reactivating items when someone shows interest in them. It also
// owns the one definition of a synthetic item id that every ranking or summarising read path
// filters through; the fixtures themselves are internal/devdata's.
package catalog

import (
	"context"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// DB is what this package needs from PostgreSQL: a *pgxpool.Pool, a *pgx.Conn or a pgx.Tx.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// SyntheticPrefixes are the id prefixes of fixtures: `seed-` from seed:synthetic and
// `integration-item-` from integration tests. Real Neople ids are 32 lowercase hex
// characters, which never contain '-', so no real id can ever carry one of these prefixes.
var SyntheticPrefixes = []string{"seed-", "integration-item-"}

// SyntheticPatterns are SyntheticPrefixes as LIKE patterns, for `NOT item_id LIKE ANY($n)`.
func SyntheticPatterns() []string {
	out := make([]string, len(SyntheticPrefixes))
	for i, p := range SyntheticPrefixes {
		out[i] = p + "%" // the prefixes hold no LIKE wildcards
	}
	return out
}

// SyntheticPrefix is the prefix seed:synthetic gives its items.
const SyntheticPrefix = "seed-"

// IsSynthetic reports whether an item id belongs to a fixture.
func IsSynthetic(itemID string) bool {
	for _, p := range SyntheticPrefixes {
		if strings.HasPrefix(itemID, p) {
			return true
		}
	}
	return false
}
