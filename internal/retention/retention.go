// Package retention deletes rows past their configured age from the tables that are not
// partitioned by time (retention.*): interest events, price candles and the outbox. Rows go
// oldest first, a bounded number per statement and each statement in its own transaction, so
// pruning never holds locks for long or competes with collection for more than a short
// statement at a time. Snapshots and sales are partitioned: internal/history drops their old
// partitions whole.
//
// Published outbox rows go after kafka.outbox_retention whether or not a relay runs (as a
// following relay also does). Unpublished ones wait for a relay, which may run on another host,
// unless the operator set retention.outbox_unpublished (package outbox owns both statements).
package retention

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/outbox"
)

// Config is what Prune reads: retention.*, and kafka.outbox_retention and kafka.prune_batch for
// the published outbox rows (which the relay prunes by the same keys).
type Config struct {
	config.RetentionConfig
	// OutboxRetention: published outbox rows older than this are deleted (kafka.outbox_retention).
	OutboxRetention time.Duration
	// OutboxBatch is the rows per outbox statement (kafka.prune_batch); retention.batch is the others'.
	OutboxBatch int
}

// FromConfig takes the keys Prune reads.
func FromConfig(c *config.Config) Config {
	return Config{RetentionConfig: c.Retention, OutboxRetention: c.Kafka.OutboxRetention, OutboxBatch: c.Kafka.PruneBatch}
}

// DB is what pruning needs: a pool or a connection.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Result is how many rows a pass deleted per table, and whether rows past their age remain
// (the pass stopped at its statement budget). OutboxExpired counts unpublished events dropped.
type Result struct {
	Interest, CandlesHourly, CandlesDaily int64
	OutboxPublished, OutboxExpired        int64
	More                                  bool
}

// Total is the number of rows deleted.
func (r Result) Total() int64 {
	return r.Interest + r.CandlesHourly + r.CandlesDaily + r.OutboxPublished + r.OutboxExpired
}

// table is one pruned table and its statement, which deletes up to $2 rows older than $1
// seconds, oldest first, through the index on the time column.
type table struct {
	name, deleteOldest string
	age                func(Config) time.Duration
	into               func(*Result) *int64
	batch              func(Config) int // nil: retention.batch
}

// tables are pruned in this order; the outbox first, as what grows without bound when nothing
// prunes it (every snapshot adds an event unless outbox.enabled is false).
var tables = []table{
	{name: "published outbox rows", deleteOldest: outbox.PruneSQL,
		age: func(c Config) time.Duration { return c.OutboxRetention }, into: func(r *Result) *int64 { return &r.OutboxPublished },
		batch: func(c Config) int { return c.OutboxBatch }},
	{name: "unpublished outbox rows", deleteOldest: outbox.ExpireSQL,
		age: func(c Config) time.Duration { return c.OutboxUnpublished }, into: func(r *Result) *int64 { return &r.OutboxExpired },
		batch: func(c Config) int { return c.OutboxBatch }},
	{"item_interest", `
		DELETE FROM item_interest WHERE id = ANY (ARRAY(
		    SELECT id FROM item_interest WHERE occurred_at < now() - $1::float8 * interval '1 second'
		    ORDER BY occurred_at LIMIT $2))`,
		func(c Config) time.Duration { return c.Interest }, func(r *Result) *int64 { return &r.Interest }, nil},
	{"hourly price_candles", `
		DELETE FROM price_candles WHERE ctid = ANY (ARRAY(
		    SELECT ctid FROM price_candles WHERE resolution = '1h' AND bucket < now() - $1::float8 * interval '1 second'
		    LIMIT $2))`,
		func(c Config) time.Duration { return c.CandlesHourly }, func(r *Result) *int64 { return &r.CandlesHourly }, nil},
	{"daily price_candles", `
		DELETE FROM price_candles WHERE ctid = ANY (ARRAY(
		    SELECT ctid FROM price_candles WHERE resolution = '1d' AND bucket < now() - $1::float8 * interval '1 second'
		    LIMIT $2))`,
		func(c Config) time.Duration { return c.CandlesDaily }, func(r *Result) *int64 { return &r.CandlesDaily }, nil},
}

// Prune deletes, per table with a non-zero age, rows older than the age by the database's
// clock, cfg.Batch rows per statement (the outbox's cfg.OutboxBatch), until none are left or
// maxStatements statements ran in all (0 = no limit; the daemon bounds its turns, `collector
// prune` does not).
func Prune(ctx context.Context, db DB, cfg Config, maxStatements int) (Result, error) {
	var res Result
	statements := 0
	for _, t := range tables {
		age := t.age(cfg)
		if age <= 0 {
			continue
		}
		batch := cfg.Batch
		if t.batch != nil {
			batch = t.batch(cfg)
		}
		if batch < 1 {
			return res, fmt.Errorf("prune %s: batch %d must be >= 1", t.name, batch)
		}
		n := t.into(&res)
		for {
			if maxStatements > 0 && statements == maxStatements {
				res.More = true
				return res, nil
			}
			tag, err := db.Exec(ctx, t.deleteOldest, age.Seconds(), batch)
			statements++
			if err != nil {
				return res, fmt.Errorf("prune %s older than %s: %w", t.name, age, err)
			}
			*n += tag.RowsAffected()
			if tag.RowsAffected() < int64(batch) {
				break
			}
		}
	}
	return res, nil
}
