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
	"github.com/duecollector/duecollector/internal/store"
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

// The advisory lock keys. Creating takes a transaction-level lock, so it works through
// PgBouncer and from the write path; dropping holds a session lock on one direct connection
// across the two transactions of DETACH … CONCURRENTLY.
const (
	createLockKey = 7_305_118_220_501
	// DropLockKey is exported for the fault suite, which kills a drop pass while it holds it.
	DropLockKey = 7_305_118_220_502
)

// The drop pass's limits on its connection: a long transaction on the parent makes DETACH …
// CONCURRENTLY give up (left pending, it is finished the next pass) instead of stalling upkeep.
const (
	DropLockTimeoutDefault      = time.Minute
	DropStatementTimeoutDefault = 10 * time.Minute
)

// KeepIntervalDefault is how often the daemon keeps the partitions: far more often than
// history.partition_ahead runs out, so a failed pass is retried long before writes need it.
const KeepIntervalDefault = time.Hour

// dropIdleSession (Partitions.dropIdle) is how long the drop pass's session may sit idle while it holds the drop
// lock before the server ends it (and so the lock): its statements follow each other at once.
const dropIdleSession = time.Minute

// createLockTimeout bounds a creation's wait for the parent (ATTACH takes SHARE UPDATE
// EXCLUSIVE, which only other DDL holds); the next pass retries, well before the ahead runs out.
const createLockTimeout = "5s"

// ErrNoSession: retention drops need a session (a lock held across the two transactions of
// DETACH … CONCURRENTLY), which a transaction-pooling PgBouncer does not keep.
var ErrNoSession = errors.New("dropping partitions past retention needs a session, and the pool runs in the simple protocol " +
	"(a transaction-pooling PgBouncer): set database.direct_url to PostgreSQL itself (docs/operations.md, \"Partitions and retention\"); " +
	"partitions are still created ahead")

// Config is history.partition_interval, history.partition_ahead and the tables'
// retention.
type Config struct {
	Interval time.Duration
	Ahead    time.Duration
	Tables   []Table
	// DropLockTimeout bounds each lock wait of the drop pass (lock_timeout); 0 =
	// DropLockTimeoutDefault.
	DropLockTimeout time.Duration
	// DropStatementTimeout bounds each statement of the drop pass (statement_timeout); 0 =
	// DropStatementTimeoutDefault.
	DropStatementTimeout time.Duration
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
	if c.DropLockTimeout < 0 || c.DropStatementTimeout < 0 {
		errs = append(errs, fmt.Errorf("drop timeouts %v, %v: must be >= 0", c.DropLockTimeout, c.DropStatementTimeout))
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
	pool *pgxpool.Pool // reads
	ddl  *pgxpool.Pool // creating, detaching, dropping: database.direct_url when set, else pool
	// session: ddl keeps one server session per connection (not a transaction-pooling
	// PgBouncer), as the drop pass's lock needs.
	session bool
	cfg     Config
	// lockedForDrop, when set (tests), runs while the drop pass holds its lock.
	lockedForDrop func()
	dropIdle      time.Duration // dropIdleSession; tests shorten it
}

// New validates cfg. direct is the pool on database.direct_url: nil (or pool) when none is
// set, and then DDL goes over pool, dropping only when pool is not behind a transaction pooler
// (it does not run in the simple protocol).
func New(pool, direct *pgxpool.Pool, cfg Config) (*Partitions, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("history partitions: %w", err)
	}
	if cfg.DropLockTimeout == 0 {
		cfg.DropLockTimeout = DropLockTimeoutDefault
	}
	if cfg.DropStatementTimeout == 0 {
		cfg.DropStatementTimeout = DropStatementTimeoutDefault
	}
	p := &Partitions{pool: pool, ddl: direct, session: true, cfg: cfg, dropIdle: dropIdleSession}
	if direct == nil || direct == pool {
		p.ddl = pool
		p.session = pool != nil && pool.Config().ConnConfig.DefaultQueryExecMode != pgx.QueryExecModeSimpleProtocol
	}
	return p, nil
}

// Config is the configuration p runs with, defaults filled.
func (p *Partitions) Config() Config { return p.cfg }

// TableState is one table after a pass.
type TableState struct {
	Table   string
	Created []string
	Dropped []string
	// DropSkipped: another instance was dropping past retention; this pass left it to it.
	DropSkipped bool
	Partitions  int
	// Ahead is how far past now writes have a partition; Oldest is the lower bound of the
	// oldest partition past the archive (zero when there is none).
	Ahead  time.Duration
	Oldest time.Time
	Now    time.Time // the database's clock when they were read
	// Described: Partitions, Ahead and Oldest were read; a pass that failed to read them
	// leaves them zero, which is not what the table holds.
	Described bool
}

// RunOnce creates what is missing up to Ahead past now, then drops the partitions past
// retention, for every table: a drop that fails or waits never holds creation back, and one
// table's failure does not skip the other's work. Several instances may run it at once.
func (p *Partitions) RunOnce(ctx context.Context) ([]TableState, error) {
	states, errs := p.createAhead(ctx)
	errs = append(errs, p.dropPast(ctx, states))
	for i := range states {
		if len(states[i].Dropped) > 0 {
			// The archive goes with the partitions dropped above it: recreate it below the new oldest.
			created, err := p.create(ctx, states[i].Table, p.cfg.Ahead, time.Time{})
			states[i].Created = append(states[i].Created, created...)
			errs = append(errs, err)
		}
		errs = append(errs, p.describe(ctx, &states[i]))
	}
	return states, errors.Join(errs...)
}

// CreateAhead creates what is missing up to Ahead past now in every table and drops nothing:
// a database just migrated is ready to write at once.
func (p *Partitions) CreateAhead(ctx context.Context) ([]TableState, error) {
	states, errs := p.createAhead(ctx)
	for i := range states {
		errs = append(errs, p.describe(ctx, &states[i]))
	}
	return states, errors.Join(errs...)
}

// createAhead creates what is missing up to Ahead past now, table by table.
func (p *Partitions) createAhead(ctx context.Context) ([]TableState, []error) {
	states := make([]TableState, len(p.cfg.Tables))
	var errs []error
	for i, t := range p.cfg.Tables {
		states[i].Table = t.Name
		created, err := p.create(ctx, t.Name, p.cfg.Ahead, time.Time{})
		states[i].Created = created
		errs = append(errs, err)
	}
	return states, errs
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
	var errs []error
	for _, t := range p.cfg.Tables {
		_, err := p.create(ctx, t.Name, p.cfg.Ahead, latest)
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// create makes the table's partitions up to ahead past now (and past atLeast) as tables of
// the parent's shape, then attaches them: ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on the
// parent, so writers go on (CREATE TABLE … PARTITION OF would take ACCESS EXCLUSIVE). The
// parent's keys and indexes are built on the empty table as it is attached. Creators serialise
// on a transaction lock and each plans from the catalog after taking it, so a partition another
// instance just made is simply already there.
func (p *Partitions) create(ctx context.Context, table string, ahead time.Duration, atLeast time.Time) ([]string, error) {
	var created []string
	err := pgx.BeginFunc(ctx, p.ddl, func(tx pgx.Tx) error {
		// The timeout first, in its own statement: it must bound the wait for the lock itself, a
		// creator frozen while holding it must not hold every writer that needs a partition.
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true)`, createLockTimeout); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(createLockKey)); err != nil {
			return err
		}
		parts, now, err := list(ctx, tx, table)
		if err != nil {
			return err
		}
		schema, err := schemaOf(ctx, tx, table)
		if err != nil {
			return err
		}
		until := now.Add(ahead)
		if atLeast.After(until) {
			until = atLeast.Add(time.Nanosecond)
		}
		parent := pgx.Identifier{schema, table}.Sanitize()
		for _, r := range planCreate(parts, now, until, p.cfg.Interval) {
			name := partitionName(table, r)
			lower := "MINVALUE"
			if r.Lower != nil {
				lower = literal(*r.Lower)
			}
			ident := pgx.Identifier{schema, name}.Sanitize()
			if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE %s INCLUDING DEFAULTS INCLUDING CONSTRAINTS INCLUDING GENERATED INCLUDING STORAGE INCLUDING COMPRESSION)`,
				ident, parent)); err != nil {
				return fmt.Errorf("create partition %s: %w", name, err)
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)`,
				parent, ident, lower, literal(r.Upper))); err != nil {
				return fmt.Errorf("attach partition %s: %w", name, err)
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

// dropPast drops, in every table with a retention, the partitions past it (states line up with
// the configured tables). One instance at a time: the others skip the pass (DropSkipped). The
// lock, the timeouts and every statement stay on one connection of the direct pool.
func (p *Partitions) dropPast(ctx context.Context, states []TableState) error {
	if !slices.ContainsFunc(p.cfg.Tables, func(t Table) bool { return t.Retention > 0 }) {
		return nil
	}
	if !p.session {
		return ErrNoSession
	}
	conn, err := p.ddl.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("drop partitions: %w", err)
	}
	defer conn.Release()
	var locked bool
	var lockTimeout, stmtTimeout string
	var idleSession *string // nil before PostgreSQL 14
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1), current_setting('lock_timeout'), current_setting('statement_timeout'),
		current_setting('idle_session_timeout', true)`,
		int64(DropLockKey)).Scan(&locked, &lockTimeout, &stmtTimeout, &idleSession); err != nil {
		return fmt.Errorf("drop partitions: lock: %w", err)
	}
	if !locked {
		for i, t := range p.cfg.Tables {
			states[i].DropSkipped = t.Retention > 0
		}
		return nil
	}
	boundSession := idleSession != nil && *idleSession == "0" // an operator's own bound is kept
	defer func() {
		// Unlock and restore the session as it was; a lock left behind would lock every later
		// pass out, so a session that cannot say it let go is closed, which frees the lock.
		var unlocked bool
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err := conn.QueryRow(uctx, `SELECT pg_advisory_unlock($1), set_config('lock_timeout', $2, false), set_config('statement_timeout', $3, false)`,
			int64(DropLockKey), lockTimeout, stmtTimeout).Scan(&unlocked, nil, nil)
		if err == nil && boundSession {
			_, err = conn.Exec(uctx, `SELECT set_config('idle_session_timeout', '0', false)`)
		}
		if err != nil || !unlocked {
			_ = conn.Conn().Close(context.WithoutCancel(ctx))
		}
	}()
	if _, err := conn.Exec(ctx, `SELECT set_config('lock_timeout', $1, false), set_config('statement_timeout', $2, false)`,
		millis(p.cfg.DropLockTimeout), millis(p.cfg.DropStatementTimeout)); err != nil {
		return fmt.Errorf("drop partitions: timeouts: %w", err)
	}
	// The lock is the session's, outside any transaction, so no idle-transaction bound ends it:
	// a holder frozen between its statements (SIGSTOP, a paused VM) would keep every instance's
	// drops away for good. The server ends a session idle that long (PostgreSQL 14 and later).
	if boundSession {
		if _, err := conn.Exec(ctx, `SELECT set_config('idle_session_timeout', $1, false)`, millis(p.dropIdle)); err != nil {
			return fmt.Errorf("drop partitions: idle bound: %w", err)
		}
	}
	if p.lockedForDrop != nil {
		p.lockedForDrop()
	}
	var errs []error
	for i, t := range p.cfg.Tables {
		if t.Retention > 0 {
			dropped, err := p.dropTable(ctx, conn, t)
			states[i].Dropped = dropped
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func millis(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

// dropTable detaches (concurrently: writers are not blocked) and drops each partition whose
// range is past the table's retention, judged from the bounds in the catalog. A partition
// detached whose DROP then failed is no partition any more, so the bounds cannot find it
// again: each is marked before it is detached, and the pass first drops the marked tables
// left behind, so a failed drop costs a pass, not the disk.
func (p *Partitions) dropTable(ctx context.Context, conn *pgxpool.Conn, t Table) ([]string, error) {
	// One left behind that still cannot go (a view of the operator's on it) holds nothing else back.
	dropped, leftErr := dropLeftBehind(ctx, conn, t.Name)
	parts, now, err := list(ctx, conn, t.Name)
	if err != nil {
		return dropped, errors.Join(leftErr, err)
	}
	schema, err := schemaOf(ctx, conn, t.Name)
	if err != nil {
		return dropped, errors.Join(leftErr, err)
	}
	parent := pgx.Identifier{schema, t.Name}.Sanitize()
	for _, part := range parts {
		// An interrupted DETACH … CONCURRENTLY leaves the partition half detached; finish it.
		if part.DetachPending {
			if err := retire(ctx, conn, t.Name, parent, part, "FINALIZE"); err != nil {
				return dropped, errors.Join(leftErr, err)
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
		if part.Lower == nil && !regular {
			// The archive must reach the oldest partition, so it goes (and is recreated up to
			// the new oldest) with any partition dropped above it; alone, an empty one stays.
			var any bool
			if err := conn.QueryRow(ctx, fmt.Sprintf(`SELECT EXISTS (SELECT FROM %s)`, part.ident())).Scan(&any); err != nil {
				return dropped, errors.Join(leftErr, fmt.Errorf("read %s: %w", part.Name, err))
			}
			if !any {
				continue
			}
		}
		if err := retire(ctx, conn, t.Name, parent, part, "CONCURRENTLY"); err != nil {
			return dropped, errors.Join(leftErr, err)
		}
		dropped = append(dropped, part.Name)
	}
	return dropped, leftErr
}

// retiredMark is the comment a partition of table carries from just before it is detached
// for retention until it is dropped.
func retiredMark(table string) string {
	return "duecollector: detached from " + table + " past retention; the next drop pass drops it"
}

// retire marks a partition of table, detaches it (how: CONCURRENTLY, or FINALIZE for one an
// interrupted detach left pending) and drops it.
func retire(ctx context.Context, conn *pgxpool.Conn, table, parent string, part Partition, how string) error {
	name := part.ident()
	if _, err := conn.Exec(ctx, fmt.Sprintf(`COMMENT ON TABLE %s IS %s`, name, quote(retiredMark(table)))); err != nil {
		return fmt.Errorf("mark %s for retention: %w", part.Name, err)
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf(`ALTER TABLE %s DETACH PARTITION %s %s`, parent, name, how)); err != nil {
		return fmt.Errorf("detach %s: %w", part.Name, err)
	}
	if _, err := conn.Exec(ctx, `DROP TABLE `+name); err != nil {
		return fmt.Errorf("detached %s but could not drop it (the next pass tries again): %w", part.Name, err)
	}
	return nil
}

// leftBehindSQL finds the tables beside the parent that carry its retirement mark and are no
// partition any more: detached, then not dropped.
const leftBehindSQL = `
SELECT n.nspname, c.relname
FROM pg_class c
JOIN pg_namespace n ON n.oid = c.relnamespace
JOIN pg_description d ON d.classoid = 'pg_class'::regclass AND d.objoid = c.oid AND d.objsubid = 0
WHERE c.relkind = 'r' AND NOT c.relispartition AND d.description = $2
  AND c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = $1::regclass)
ORDER BY c.relname`

// dropLeftBehind drops what an earlier pass detached from table but could not drop.
func dropLeftBehind(ctx context.Context, conn *pgxpool.Conn, table string) ([]string, error) {
	rows, err := conn.Query(ctx, leftBehindSQL, table, retiredMark(table))
	if err != nil {
		return nil, fmt.Errorf("find what %s left detached: %w", table, err)
	}
	left, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var sn [2]string
		return sn, r.Scan(&sn[0], &sn[1])
	})
	if err != nil {
		return nil, fmt.Errorf("find what %s left detached: %w", table, err)
	}
	var dropped []string
	var errs []error
	for _, sn := range left {
		name := sn[1]
		if _, err := conn.Exec(ctx, `DROP TABLE `+pgx.Identifier{sn[0], name}.Sanitize()); err != nil {
			errs = append(errs, fmt.Errorf("drop %s, detached from %s by an earlier pass: %w", name, table, err))
			continue
		}
		dropped = append(dropped, name)
	}
	return dropped, errors.Join(errs...)
}

// quote is a SQL string literal.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

func (p *Partitions) describe(ctx context.Context, st *TableState) error {
	parts, now, err := list(ctx, p.pool, st.Table)
	if err != nil {
		return err
	}
	st.Described = true
	st.Partitions = len(parts)
	st.Ahead = coveredUntil(parts, now).Sub(now)
	st.Oldest, st.Now = oldestOf(parts), now
	return nil
}

type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// listSQL reads each partition's bounds from the catalog, never from its name. The bound
// literals are printed in the session's time zone with an offset, so casting them back is exact.
// A DEFAULT partition (an operator's) bounds nothing and is left out: read as MINVALUE to
// MAXVALUE it made the table look covered for good, and no partition was created again.
const listSQL = `
SELECT n.nspname, c.relname, b.lower::timestamptz, b.upper::timestamptz, i.inhdetachpending, now()
FROM pg_inherits i
JOIN pg_class c ON c.oid = i.inhrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS expr) e
CROSS JOIN LATERAL (SELECT (regexp_match(e.expr, 'FROM \(''([^'']+)''\)'))[1] AS lower,
                           (regexp_match(e.expr, 'TO \(''([^'']+)''\)'))[1] AS upper) b
WHERE i.inhparent = $1::regclass AND e.expr <> 'DEFAULT'
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
		if err := rows.Scan(&p.Schema, &p.Name, &p.Lower, &p.Upper, &p.DetachPending, &now); err != nil {
			return nil, time.Time{}, fmt.Errorf("list %s partitions: %w", table, err)
		}
		parts = append(parts, p)
	}
	if err := rows.Err(); err != nil {
		return nil, time.Time{}, fmt.Errorf("list %s partitions: %w", table, err)
	}
	if now.IsZero() {
		if now, err = store.Now(ctx, q); err != nil {
			return nil, time.Time{}, fmt.Errorf("list %s partitions: %w", table, err)
		}
	}
	return parts, now, nil
}

// ident is the partition's name for DDL, qualified by its schema.
func (p Partition) ident() string { return pgx.Identifier{p.Schema, p.Name}.Sanitize() }

// schemaOf is the schema the table resolves to on the session's search_path, as every other
// statement of the collector names it. DDL names it and its partitions with that schema: an
// unqualified CREATE TABLE would go to the first schema on the path (another role's, or the
// user's own), and an unqualified DROP would find a same-named table there first.
func schemaOf(ctx context.Context, q querier, table string) (string, error) {
	var schema string
	if err := q.QueryRow(ctx, `SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = $1::regclass`,
		table).Scan(&schema); err != nil {
		return "", fmt.Errorf("find the schema of %s: %w", table, err)
	}
	return schema, nil
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

// Oldest is the lower bound of the table's oldest partition past the archive (zero when
// there is none): how far back its history reaches, read as the upkeep reads the bounds.
func Oldest(ctx context.Context, q querier, table string) (time.Time, error) {
	parts, _, err := list(ctx, q, table)
	if err != nil {
		return time.Time{}, err
	}
	return oldestOf(parts), nil
}

// oldestOf is the lowest lower bound among parts (the archive, from MINVALUE, has none).
func oldestOf(parts []Partition) time.Time {
	var oldest time.Time
	for _, part := range parts {
		if part.Lower != nil && (oldest.IsZero() || part.Lower.Before(oldest)) {
			oldest = *part.Lower
		}
	}
	return oldest
}

// IsMissing reports whether err is an insert that found no partition for its row, from the
// fields no lc_messages translates: a check_violation (23514) naming a partitioned history
// table and no constraint (a CHECK or domain constraint names itself; a row that breaks a
// partition's own bound names the partition).
func IsMissing(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "23514" && pg.ConstraintName == "" &&
		(pg.TableName == Snapshots || pg.TableName == Sales)
}
