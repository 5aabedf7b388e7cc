// Package retention is the one pruner: it deletes rows past their configured age from the
// tables that are not partitioned by time (retention.*): interest events, price candles and the
// outbox. Rows go oldest first, a bounded number per statement and each statement in its own
// transaction, so pruning never holds locks for long or competes with collection for more than
// a short statement at a time. Snapshots and sales are partitioned: the partition keeper
// (internal/history/partition) drops their old partitions whole.
//
// Published outbox rows go after kafka.outbox_retention whether or not a relay runs; nothing
// else deletes them. Unpublished ones wait for a relay, which may run on another host, unless
// the operator set retention.outbox_unpublished. The statements belong to the tables' owners
// (outbox, catalog, history); this package only decides what goes when.
package retention

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/store"
)

// Sizes and pacing no operator needs to turn (they were configuration keys before issue 37);
// tests set Config's fields instead.
const (
	// BatchDefault is the interest events or candles one statement deletes.
	BatchDefault = 5000
	// OutboxBatchDefault is the outbox rows one statement deletes: outbox rows are wider, and a
	// relay may be waiting on the same lanes.
	OutboxBatchDefault = 1000
	// IntervalDefault is the daemon's pause between turns once nothing is left over.
	IntervalDefault = 10 * time.Minute
	// BacklogWaitDefault is the daemon's pause between turns while a backlog is worked off.
	BacklogWaitDefault = time.Second
	// TurnStatementsDefault bounds one of the daemon's turns, so a large first backlog
	// (retention turned on for an old database) goes in short turns rather than one long run.
	TurnStatementsDefault = 20
)

// Config is what the pruner reads: the ages (retention.*, and kafka.outbox_retention for
// published outbox rows) and its sizes. Zero sizes take the …Default constants.
type Config struct {
	config.RetentionConfig
	// OutboxRetention: published outbox rows older than this are deleted (kafka.outbox_retention).
	OutboxRetention time.Duration
	// Batch is the interest events or candles per statement; 0 = BatchDefault.
	Batch int
	// OutboxBatch is the outbox rows per statement; 0 = OutboxBatchDefault.
	OutboxBatch int
	// Interval is the pause between Start's turns; 0 = IntervalDefault.
	Interval time.Duration
	// TurnStatements bounds one of Start's turns; 0 = TurnStatementsDefault.
	TurnStatements int
	// BacklogWait is the pause between Start's turns while a backlog lasts; 0 = BacklogWaitDefault.
	BacklogWait time.Duration
}

// FromConfig takes the ages the pruner reads.
func FromConfig(c *config.Config) Config {
	return Config{RetentionConfig: c.Retention, OutboxRetention: c.Kafka.OutboxRetention}
}

// WithDefaults fills the zero sizes.
func (c Config) WithDefaults() Config {
	c.Batch = cmp.Or(c.Batch, BatchDefault)
	c.OutboxBatch = cmp.Or(c.OutboxBatch, OutboxBatchDefault)
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.TurnStatements = cmp.Or(c.TurnStatements, TurnStatementsDefault)
	c.BacklogWait = cmp.Or(c.BacklogWait, BacklogWaitDefault)
	return c
}

// Validate refuses sizes that would stall pruning.
func (c Config) Validate() error {
	if c.Batch < 1 || c.OutboxBatch < 1 || c.Interval <= 0 || c.TurnStatements < 1 || c.BacklogWait <= 0 {
		return fmt.Errorf("retention: batch %d, outbox batch %d, interval %s, statements per turn %d and backlog wait %s must be > 0",
			c.Batch, c.OutboxBatch, c.Interval, c.TurnStatements, c.BacklogWait)
	}
	return nil
}

// Pruner is the one pruner's loop, run by the daemon and by a following relay-outbox: a turn
// every Interval, a second apart while a backlog lasts.
type Pruner struct {
	db  store.Execer
	cfg Config
	// OnTurn, when set before Start, hears every turn's result (logs, metrics, test signals).
	OnTurn func(Result, error)
}

// New fills cfg's defaults and validates it once.
func New(db store.Execer, cfg Config) (*Pruner, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Pruner{db: db, cfg: cfg, OnTurn: func(Result, error) {}}, nil
}

// Config is the configuration p runs with, defaults filled.
func (p *Pruner) Config() Config { return p.cfg }

// RunOnce prunes one turn of at most TurnStatements statements.
func (p *Pruner) RunOnce(ctx context.Context) (Result, error) {
	res, err := Prune(ctx, p.db, p.cfg, p.cfg.TurnStatements)
	p.OnTurn(res, err)
	return res, err
}

// Start prunes every Interval (BacklogWait apart while a backlog lasts) until ctx ends.
func (p *Pruner) Start(ctx context.Context) {
	wait := p.cfg.Interval
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = p.cfg.Interval
		if res, _ := p.RunOnce(ctx); res.More {
			wait = p.cfg.BacklogWait
		}
	}
}

// LogTurn logs what a pass deleted: a warning for unpublished events dropped (consumers lose
// them), a line when anything went.
func LogTurn(log *zap.Logger, cfg Config, res Result) {
	LogExpired(log, cfg, res.OutboxExpired)
	if res.Total() > 0 {
		log.Info("pruned collected history", zap.Int64("interest", res.Interest),
			zap.Int64("candles_hourly", res.CandlesHourly), zap.Int64("candles_daily", res.CandlesDaily),
			zap.Int64("outbox_published", res.OutboxPublished), zap.Int64("outbox_expired", res.OutboxExpired), zap.Bool("more", res.More))
	}
}

// LogExpired warns that n unpublished events were dropped, when any were.
func LogExpired(log *zap.Logger, cfg Config, n int64) {
	if n > 0 {
		log.Warn("dropped unpublished outbox events past retention.outbox_unpublished; their snapshots stay in auction_snapshots",
			zap.Int64("expired", n), zap.Duration("older_than_seconds", cfg.OutboxUnpublished))
	}
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

// deleteOldest deletes up to limit rows older than age, oldest first, and says how many went.
type deleteOldest func(ctx context.Context, db store.Execer, age time.Duration, limit int) (int64, error)

// table is one pruned table: its owner's statement, its age and where its count goes.
type table struct {
	name   string
	delete deleteOldest
	age    func(Config) time.Duration
	into   func(*Result) *int64
	outbox bool // OutboxBatch rows per statement, not Batch
}

func candles(resolution string) deleteOldest {
	return func(ctx context.Context, db store.Execer, age time.Duration, limit int) (int64, error) {
		return history.DeleteCandlesOlderThan(ctx, db, resolution, age, limit)
	}
}

// tables are pruned in this order; the outbox first, as what grows without bound when nothing
// prunes it (every snapshot adds an event unless outbox.enabled is false), and its expired
// events before its published ones, which are deleted only below the oldest event left
// unpublished.
var tables = []table{
	{"unpublished outbox rows", outbox.DeleteExpired,
		func(c Config) time.Duration { return c.OutboxUnpublished }, func(r *Result) *int64 { return &r.OutboxExpired }, true},
	{"published outbox rows", outbox.DeletePublished,
		func(c Config) time.Duration { return c.OutboxRetention }, func(r *Result) *int64 { return &r.OutboxPublished }, true},
	{"item_interest", catalog.DeleteInterestOlderThan,
		func(c Config) time.Duration { return c.Interest }, func(r *Result) *int64 { return &r.Interest }, false},
	{"hourly price_candles", candles(history.Hourly),
		func(c Config) time.Duration { return c.CandlesHourly }, func(r *Result) *int64 { return &r.CandlesHourly }, false},
	{"daily price_candles", candles(history.Daily),
		func(c Config) time.Duration { return c.CandlesDaily }, func(r *Result) *int64 { return &r.CandlesDaily }, false},
}

// Prune deletes, per table with a non-zero age, rows older than the age by the database's
// clock, cfg.Batch rows per statement (the outbox's cfg.OutboxBatch), until none are left or
// maxStatements statements ran in all (0 = no limit; the daemon bounds its turns, `collector
// prune` does not).
func Prune(ctx context.Context, db store.Execer, cfg Config, maxStatements int) (Result, error) {
	cfg = cfg.WithDefaults()
	var res Result
	if err := cfg.Validate(); err != nil {
		return res, err
	}
	statements := 0
	// A table whose statement fails (a lock held past lock_timeout, a right a migration took)
	// is left for the next pass; the others are pruned still, or they would grow with it.
	var errs []error
	for _, t := range tables {
		age := t.age(cfg)
		if age <= 0 {
			continue
		}
		batch := cfg.Batch
		if t.outbox {
			batch = cfg.OutboxBatch
		}
		n := t.into(&res)
		for {
			if maxStatements > 0 && statements == maxStatements {
				res.More = true
				return res, errors.Join(errs...)
			}
			deleted, err := t.delete(ctx, db, age, batch)
			statements++
			if err != nil {
				errs = append(errs, fmt.Errorf("prune %s: %w", t.name, err))
				break
			}
			*n += deleted
			if deleted < int64(batch) {
				break
			}
		}
		if ctx.Err() != nil {
			break
		}
	}
	return res, errors.Join(errs...)
}
