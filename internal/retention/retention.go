// Package retention deletes rows past their configured age from the tables that are not
// partitioned by time (retention.*): interest events and price candles. Rows go oldest first, a
// bounded number per statement and each statement in its own transaction, so pruning never
// holds locks for long or competes with collection for more than a short statement at a time.
// Snapshots and sales are partitioned: internal/history drops their old partitions whole.
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
	Interest, CandlesHourly, CandlesDaily int64
	More                                  bool
}

// Total is the number of rows deleted.
func (r Result) Total() int64 { return r.Interest + r.CandlesHourly + r.CandlesDaily }

// table is one pruned table and its statement, which deletes up to $2 rows older than $1
// seconds, oldest first, through the index on the time column.
type table struct {
	name, deleteOldest string
	age                func(config.RetentionConfig) time.Duration
	into               func(*Result) *int64
}

var tables = []table{
	{"item_interest", `
		DELETE FROM item_interest WHERE id = ANY (ARRAY(
		    SELECT id FROM item_interest WHERE occurred_at < now() - $1::float8 * interval '1 second'
		    ORDER BY occurred_at LIMIT $2))`,
		func(c config.RetentionConfig) time.Duration { return c.Interest }, func(r *Result) *int64 { return &r.Interest }},
	{"hourly price_candles", `
		DELETE FROM price_candles WHERE ctid = ANY (ARRAY(
		    SELECT ctid FROM price_candles WHERE resolution = '1h' AND bucket < now() - $1::float8 * interval '1 second'
		    LIMIT $2))`,
		func(c config.RetentionConfig) time.Duration { return c.CandlesHourly }, func(r *Result) *int64 { return &r.CandlesHourly }},
	{"daily price_candles", `
		DELETE FROM price_candles WHERE ctid = ANY (ARRAY(
		    SELECT ctid FROM price_candles WHERE resolution = '1d' AND bucket < now() - $1::float8 * interval '1 second'
		    LIMIT $2))`,
		func(c config.RetentionConfig) time.Duration { return c.CandlesDaily }, func(r *Result) *int64 { return &r.CandlesDaily }},
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
