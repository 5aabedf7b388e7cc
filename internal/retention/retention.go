// Package retention deletes collected history past its configured age (retention.*):
// auction snapshots, sales and interest events. Rows go oldest first, a bounded number per
// statement and each statement in its own transaction, through the time indexes of
// migrations/003_retention_indexes.sql, so pruning never holds locks for long or competes
// with collection for more than a short statement at a time.
package retention

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/duecollector/duecollector/internal/config"
)

// DB is what pruning needs: a pool or a connection.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Result is how many rows a pass deleted per table, and whether rows past their age remain
// (the pass stopped at its statement budget).
type Result struct {
	Snapshots, Sales, Interest int64
	More                       bool
}

// Total is the number of rows deleted.
func (r Result) Total() int64 { return r.Snapshots + r.Sales + r.Interest }

// table is one pruned table: its rows are found oldest first through the index on column
// at, and deleted by key (auction_sales has a three-column primary key; its rows are never
// updated, so their ctid is as good).
type table struct {
	name, key, at string
	age           func(config.RetentionConfig) time.Duration
	into          func(*Result) *int64
}

var tables = []table{
	{"auction_snapshots", "snapshot_id", "collected_at",
		func(c config.RetentionConfig) time.Duration { return c.Snapshots }, func(r *Result) *int64 { return &r.Snapshots }},
	{"auction_sales", "ctid", "sold_at",
		func(c config.RetentionConfig) time.Duration { return c.Sales }, func(r *Result) *int64 { return &r.Sales }},
	{"item_interest", "id", "occurred_at",
		func(c config.RetentionConfig) time.Duration { return c.Interest }, func(r *Result) *int64 { return &r.Interest }},
}

// deleteOldest deletes up to $2 rows older than $1 seconds, oldest first.
func (t table) deleteOldest() string {
	return fmt.Sprintf(`
		DELETE FROM %[1]s WHERE %[2]s = ANY (ARRAY(
		    SELECT %[2]s FROM %[1]s WHERE %[3]s < now() - $1::float8 * interval '1 second'
		    ORDER BY %[3]s LIMIT $2))`, t.name, t.key, t.at)
}

// Prune deletes, per table with a non-zero age, rows older than the age by the database's
// clock, cfg.Batch rows per statement, until none are left or maxStatements statements ran
// in all (0 = no limit; the daemon bounds its turns, `collector prune` does not).
func Prune(ctx context.Context, db DB, cfg config.RetentionConfig, maxStatements int) (Result, error) {
	var res Result
	statements := 0
	for _, t := range tables {
		age := t.age(cfg)
		if age <= 0 {
			continue
		}
		n := t.into(&res)
		for {
			if maxStatements > 0 && statements == maxStatements {
				res.More = true
				return res, nil
			}
			tag, err := db.Exec(ctx, t.deleteOldest(), age.Seconds(), cfg.Batch)
			statements++
			if err != nil {
				return res, fmt.Errorf("prune %s older than %s: %w", t.name, age, err)
			}
			*n += tag.RowsAffected()
			if tag.RowsAffected() < int64(cfg.Batch) {
				break
			}
		}
	}
	return res, nil
}
