// Package retention deletes collected history past its configured age (retention.*):
// auction snapshots, sales and interest events. Rows go oldest first, a bounded number per
// statement and each statement in its own transaction, through the time indexes the schema
// keeps for it (migrations/001_schema.sql), so pruning never holds locks for long or competes
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

// table is one pruned table and its statement, which deletes up to $2 rows older than $1
// seconds, oldest first, through the index on the time column. auction_sales has a
// three-column primary key; its rows are never updated, so their ctid is as good a key.
type table struct {
	name, deleteOldest string
	age                func(config.RetentionConfig) time.Duration
	into               func(*Result) *int64
}

var tables = []table{
	{"auction_snapshots", `
		DELETE FROM auction_snapshots WHERE snapshot_id = ANY (ARRAY(
		    SELECT snapshot_id FROM auction_snapshots WHERE collected_at < now() - $1::float8 * interval '1 second'
		    ORDER BY collected_at LIMIT $2))`,
		func(c config.RetentionConfig) time.Duration { return c.Snapshots }, func(r *Result) *int64 { return &r.Snapshots }},
	{"auction_sales", `
		DELETE FROM auction_sales WHERE ctid = ANY (ARRAY(
		    SELECT ctid FROM auction_sales WHERE sold_at < now() - $1::float8 * interval '1 second'
		    ORDER BY sold_at LIMIT $2))`,
		func(c config.RetentionConfig) time.Duration { return c.Sales }, func(r *Result) *int64 { return &r.Sales }},
	{"item_interest", `
		DELETE FROM item_interest WHERE id = ANY (ARRAY(
		    SELECT id FROM item_interest WHERE occurred_at < now() - $1::float8 * interval '1 second'
		    ORDER BY occurred_at LIMIT $2))`,
		func(c config.RetentionConfig) time.Duration { return c.Interest }, func(r *Result) *int64 { return &r.Interest }},
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
			tag, err := db.Exec(ctx, t.deleteOldest, age.Seconds(), cfg.Batch)
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
