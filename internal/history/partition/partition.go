package partition

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/config"
)

// Table is a partitioned history table and its retention (0 = kept).
type Table struct {
	Name      string
	Retention time.Duration
}

// The partitioned tables, by the time they are partitioned on (migrations/001_schema.sql):
// auction_snapshots by collected_at, auction_sales by sold_at.
const (
	Snapshots = "auction_snapshots"
	Sales     = "auction_sales"
)

// Any fixed numbers. Creating takes a transaction-level lock, so it works through PgBouncer
// and from the write path; dropping holds a session lock on a direct connection across the
// two transactions of DETACH … CONCURRENTLY.
const (
	createLockKey = 7_305_118_220_501
	dropLockKey   = 7_305_118_220_502
)

// Config is history.partition_interval, history.partition_ahead and the tables'
// retention.
type Config struct {
	Interval time.Duration
	Ahead    time.Duration
	Tables   []Table
}

// FromConfig is the history tables' partitioning as configured (history.partition_*), with
// their retention (retention.snapshots, retention.sales).
func FromConfig(c *config.Config) Config {
	return Config{
		Interval: c.History.PartitionInterval,
		Ahead:    c.History.PartitionAhead,
		Tables:   []Table{{Name: Snapshots, Retention: c.Retention.Snapshots}, {Name: Sales, Retention: c.Retention.Sales}},
	}
}

// Validate refuses what would leave writes without a partition.
func (c Config) Validate() error {
	var errs []error
	if c.Interval < time.Hour {
		errs = append(errs, fmt.Errorf("partition interval %v: must be >= 1h", c.Interval))
	}
	if c.Ahead < c.Interval {
		errs = append(errs, fmt.Errorf("partitions ahead %v: must be >= the interval %v", c.Ahead, c.Interval))
	}
	for _, t := range c.Tables {
		if t.Name != Snapshots && t.Name != Sales {
			errs = append(errs, fmt.Errorf("table %q: not a partitioned history table", t.Name))
		}
	}
	return errors.Join(errs...)
}

// Partitions keeps the history tables partitioned: created ahead, dropped past retention.
type Partitions struct {
	pool   *pgxpool.Pool // creating: a transaction, fine behind PgBouncer
	direct *pgxpool.Pool // dropping: a session (database.direct_url)
	cfg    Config
}

// New validates cfg. direct may be pool when no pooler stands between.
func New(pool, direct *pgxpool.Pool, cfg Config) (*Partitions, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("history partitions: %w", err)
	}
	if direct == nil {
		direct = pool
	}
	return &Partitions{pool: pool, direct: direct, cfg: cfg}, nil
}

// TableState is one table after a pass.
type TableState struct {
	Table      string
	Created    []string
	Dropped    []string
	Partitions int
	// Ahead is how far past now writes have a partition; Oldest is the lower bound of the
	// oldest partition past the archive (zero when there is none).
	Ahead  time.Duration
	Oldest time.Time
}

// RunOnce drops the partitions past retention, then creates what is missing up to
// Ahead past now, for every table. Several instances may run it at once.
func (p *Partitions) RunOnce(ctx context.Context) ([]TableState, error) {
	var out []TableState
	for _, t := range p.cfg.Tables {
		st := TableState{Table: t.Name}
		if t.Retention > 0 {
			dropped, err := p.dropPast(ctx, t)
			st.Dropped = dropped
			if err != nil {
				return out, err
			}
		}
		created, err := p.create(ctx, p.pool, t.Name, p.cfg.Ahead, time.Time{})
		st.Created = created
		if err != nil {
			return out, err
		}
		if err := p.describe(ctx, &st); err != nil {
			return out, err
		}
		out = append(out, st)
	}
	return out, nil
}

// EnsureCovering creates, in every table, the partitions rows at the given times need: the
// write path calls it when an insert found no partition (upkeep stopped across a boundary).
func (p *Partitions) EnsureCovering(ctx context.Context, times []time.Time) error {
	var latest time.Time
	for _, t := range times {
		if t.After(latest) {
			latest = t
		}
	}
	for _, t := range p.cfg.Tables {
		if _, err := p.create(ctx, p.pool, t.Name, p.cfg.Ahead, latest); err != nil {
			return err
		}
	}
	return nil
}

func (p *Partitions) create(ctx context.Context, pool *pgxpool.Pool, table string, ahead time.Duration, atLeast time.Time) ([]string, error) {
	var created []string
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		// A partition is created under an ACCESS EXCLUSIVE lock on the parent; never queue
		// writers behind it for long: the next pass retries, well before the ahead runs out.
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1), set_config('lock_timeout', '5s', true)`, int64(createLockKey)); err != nil {
			return err
		}
		parts, now, err := list(ctx, tx, table)
		if err != nil {
			return err
		}
		until := now.Add(ahead)
		if atLeast.After(until) {
			until = atLeast.Add(time.Nanosecond)
		}
		for _, r := range planCreate(parts, now, until, p.cfg.Interval) {
			name := partitionName(table, r)
			lower := "MINVALUE"
			if r.Lower != nil {
				lower = literal(*r.Lower)
			}
			stmt := fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM (%s) TO (%s)`,
				pgx.Identifier{name}.Sanitize(), pgx.Identifier{table}.Sanitize(), lower, literal(r.Upper))
			if _, err := tx.Exec(ctx, stmt); err != nil {
				return fmt.Errorf("create partition %s: %w", name, err)
			}
			created = append(created, name)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("create %s partitions: %w", table, err)
	}
	return created, nil
}

// dropPast detaches (concurrently: writers are not blocked) and drops each partition whose
// range is past the table's retention, judged from the bounds in the catalog.
func (p *Partitions) dropPast(ctx context.Context, t Table) ([]string, error) {
	conn, err := p.direct.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("drop %s partitions: %w", t.Name, err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, `SELECT pg_advisory_lock($1)`, int64(dropLockKey)); err != nil {
		return nil, fmt.Errorf("drop %s partitions: lock: %w", t.Name, err)
	}
	defer func() {
		// A lock left behind would stall the next pass; a broken connection frees it anyway.
		_, _ = conn.Exec(context.WithoutCancel(ctx), `SELECT pg_advisory_unlock($1)`, int64(dropLockKey))
	}()
	parts, now, err := list(ctx, conn, t.Name)
	if err != nil {
		return nil, err
	}
	var dropped []string
	parent := pgx.Identifier{t.Name}.Sanitize()
	for _, part := range parts {
		// An interrupted DETACH … CONCURRENTLY leaves the partition half detached; finish it.
		if part.DetachPending {
			if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s FINALIZE`, parent, pgx.Identifier{part.Name}.Sanitize())); err != nil {
				return dropped, fmt.Errorf("finish detaching %s: %w", part.Name, err)
			}
			if _, err := conn.Exec(ctx, fmt.Sprintf(`DROP TABLE %s`, pgx.Identifier{part.Name}.Sanitize())); err != nil {
				return dropped, fmt.Errorf("drop %s: %w", part.Name, err)
			}
			dropped = append(dropped, part.Name)
		}
	}
	drop := planDrop(parts, now.Add(-t.Retention))
	regular := slices.ContainsFunc(drop, func(p Partition) bool { return p.Lower != nil })
	for _, part := range drop {
		if part.DetachPending {
			continue
		}
		name := pgx.Identifier{part.Name}.Sanitize()
		if part.Lower == nil && !regular {
			// The archive must reach the oldest partition, so it goes (and is recreated up to
			// the new oldest) with any partition dropped above it; alone, an empty one stays.
			var any bool
			if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT FROM %s)`, name)).Scan(&any); err != nil {
				return dropped, fmt.Errorf("read %s: %w", part.Name, err)
			}
			if !any {
				continue
			}
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s CONCURRENTLY`, parent, name)); err != nil {
			return dropped, fmt.Errorf("detach %s: %w", part.Name, err)
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf(`DROP TABLE %s`, name)); err != nil {
			return dropped, fmt.Errorf("drop %s: %w", part.Name, err)
		}
		dropped = append(dropped, part.Name)
	}
	return dropped, nil
}

func (p *Partitions) describe(ctx context.Context, st *TableState) error {
	parts, now, err := list(ctx, p.pool, st.Table)
	if err != nil {
		return err
	}
	st.Partitions = len(parts)
	st.Ahead = coveredUntil(parts, now).Sub(now)
	for _, part := range parts {
		if part.Lower != nil && (st.Oldest.IsZero() || part.Lower.Before(st.Oldest)) {
			st.Oldest = *part.Lower
		}
	}
	return nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// listSQL reads each partition's bounds from the catalog, never from its name. The bound
// literals are printed in the session's time zone with an offset, so casting them back is exact.
const listSQL = `
SELECT c.relname, b.lower::timestamptz, b.upper::timestamptz, i.inhdetachpending, now()
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS expr) e
CROSS JOIN LATERAL (SELECT (regexp_match(e.expr, 'FROM \(''([^'']+)''\)'))[1] AS lower,
                           (regexp_match(e.expr, 'TO \(''([^'']+)''\)'))[1] AS upper) b
WHERE i.inhparent = $1::regclass
ORDER BY c.relname`

// list returns the table's partitions and the database's now.
func list(ctx context.Context, q querier, table string) ([]Partition, time.Time, error) {
	rows, err := q.Query(ctx, listSQL, table)
	if err != nil {
		return nil, time.Time{}, fmt.Errorf("list %s partitions: %w", table, err)
	}
	defer rows.Close()
	var parts []Partition
	var now time.Time
	for rows.Next() {
		var p Partition
		if err := rows.Scan(&p.Name, &p.Lower, &p.Upper, &p.DetachPending, &now); err != nil {
			return nil, time.Time{}, fmt.Errorf("list %s partitions: %w", table, err)
		}
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("list %s partitions: %w", table, err)
	}
	if now.IsZero() {
		if err := q.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
			return nil, time.Time{}, fmt.Errorf("list %s partitions: %w", table, err)
		}
	}
	return parts, now, nil
}

func literal(t time.Time) string { return "'" + t.UTC().Format(time.RFC3339Nano) + "'" }

// partitionName says what a partition holds; nothing reads bounds from it.
func partitionName(table string, r Range) string {
	if r.Lower == nil {
		return table + "_before_" + stamp(r.Upper)
	}
	return table + "_p" + stamp(*r.Lower)
}

func stamp(t time.Time) string {
	t = t.UTC()
	s := t.Format("20060102")
	if t.Hour() != 0 || t.Minute() != 0 {
		s += t.Format("1504")
	}
	return s
}

// IsMissing reports whether err is an insert that found no partition for its row.
func IsMissing(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23514" && strings.Contains(pg.Message, "no partition of relation")
}
