// Package catalog owns the catalog's life cycle: importing tracked items from a targets file,
// seeding and purging synthetic fixtures, scoring popularity into collection tiers, and
// reactivating items when someone shows interest in them. It also owns the one definition of
// a synthetic item id that every ranking or summarising read path filters through.
package catalog

import (
	"context"
	"fmt"
	"regexp"
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

var sqlColumn = regexp.MustCompile(`^[a-z_][a-z0-9_]*(\.[a-z_][a-z0-9_]*)?$`)

// SyntheticSQL is the SQL twin of IsSynthetic for column col (e.g. "t.item_id"): a boolean
// expression in parentheses. Read paths that rank or summarise add `AND NOT <this>`, so a
// half-purged database never leaks fixtures. col is spliced into the SQL, so it must be a
// column reference written in code; anything else panics.
func SyntheticSQL(col string) string {
	if !sqlColumn.MatchString(col) {
		panic(fmt.Sprintf("catalog.SyntheticSQL: %q is not a column reference", col))
	}
	parts := make([]string, len(SyntheticPrefixes))
	for i, p := range SyntheticPrefixes {
		// The prefixes hold no LIKE wildcards (% _) and no quotes, so they go in verbatim.
		parts[i] = fmt.Sprintf("%s LIKE '%s%%'", col, p)
	}
	return "(" + strings.Join(parts, " OR ") + ")"
}
