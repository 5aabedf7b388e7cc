// Package store opens the PostgreSQL pool and applies the embedded schema migrations.
package store

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/tern/v2/migrate"

	"github.com/duecollector/duecollector/migrations"
)

// VersionTable records the applied schema version (tern's bookkeeping).
const VersionTable = "public.schema_version"

// PoolConfig sizes the pool. The pool is the collector's whole footprint on a database that
// other services share, so it is deliberately small and bounded.
type PoolConfig struct {
	URL             string
	MaxConns        int32
	ApplicationName string
	// QueryExecMode overrides the URL's default_query_exec_mode ("" = keep it).
	QueryExecMode string
	// IdleInTransaction bounds on the server how long a transaction may wait on its client
	// (0 = IdleInTransactionDefault), unless the role or the URL already bounds it.
	IdleInTransaction time.Duration
	// OnConnect, when set, runs on every new connection before it is used.
	OnConnect func(context.Context, *pgx.Conn) error
}

// IdleInTransactionDefault is how long the server keeps a transaction whose client went quiet
// mid-way. A client frozen there (a paused VM, SIGSTOP, a cut network) keeps its row locks
// until the server notices, two hours by TCP's defaults, and every claim skips the locked
// items although their leases lapsed. The server ending the transaction frees them; our
// transactions never wait on anything but the database.
const IdleInTransactionDefault = 60 * time.Second

// LockWaitDefault bounds how long a pooled session waits for a lock (lock_timeout), unless the
// role or the URL already bounds it. Our statements take row locks for milliseconds and skip
// locked rows where they may; what they wait on for longer is someone else's DDL (an ALTER
// TABLE, a VACUUM FULL, a LOCK TABLE left open in psql). Unbounded, that wait stopped every
// claim, write-back and gauge in silence for as long as the lock was held; bounded, each fails
// as lock_not_available, a transient error that is logged, counted and retried. Statements
// that must wait longer set their own (the recalculation's wait, partition upkeep).
const LockWaitDefault = time.Minute

var execModes = map[string]pgx.QueryExecMode{
	"cache_statement": pgx.QueryExecModeCacheStatement,
	"cache_describe":  pgx.QueryExecModeCacheDescribe,
	"describe_exec":   pgx.QueryExecModeDescribeExec,
	"exec":            pgx.QueryExecModeExec,
	"simple_protocol": pgx.QueryExecModeSimpleProtocol,
}

// Open connects a pool and checks that the server answers.
func Open(ctx context.Context, cfg PoolConfig) (*pgxpool.Pool, error) {
	pc, err := poolConfig(cfg, "database.url")
	if err != nil {
		return nil, err
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot connect to the database at %s:%d/%s (user %s; database.url): %w",
			pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database, pc.ConnConfig.User, err)
	}
	return pool, nil
}

// poolConfig parses cfg; key names the setting the URL came from in errors.
func poolConfig(cfg PoolConfig, key string) (*pgxpool.Config, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, parseError(err))
	}
	pc.ConnConfig.DialFunc = dial
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	if cfg.ApplicationName != "" {
		pc.ConnConfig.RuntimeParams["application_name"] = cfg.ApplicationName
	}
	idle := cfg.IdleInTransaction
	if idle <= 0 {
		idle = IdleInTransactionDefault
	}
	pc.AfterConnect = func(ctx context.Context, c *pgx.Conn) error {
		inUTC(c.TypeMap())
		if err := boundIdle(ctx, c, idle); err != nil {
			return err
		}
		if err := boundLockWaits(ctx, c, LockWaitDefault); err != nil {
			return err
		}
		if cfg.OnConnect != nil {
			return cfg.OnConnect(ctx, c)
		}
		return nil
	}
	if cfg.QueryExecMode != "" {
		mode, ok := execModes[cfg.QueryExecMode]
		if !ok {
			return nil, fmt.Errorf("database.query_exec_mode %q: unknown mode", cfg.QueryExecMode)
		}
		pc.ConnConfig.DefaultQueryExecMode = mode
	}
	return pc, nil
}

// boundIdle has the server end the session's transaction once it has been idle for longer
// than idle: a client frozen inside one (a paused VM, SIGSTOP) would otherwise keep its locks,
// and what waits on them, for good. A bound the operator set (ALTER ROLE, the URL's options)
// is theirs to keep.
func boundIdle(ctx context.Context, c *pgx.Conn, idle time.Duration) error {
	_, err := c.Exec(ctx, `SELECT set_config('idle_in_transaction_session_timeout', $1, false)
		WHERE current_setting('idle_in_transaction_session_timeout') = '0'`, fmt.Sprintf("%dms", idle.Milliseconds()))
	if err != nil {
		return fmt.Errorf("bound idle transactions: %w", err)
	}
	return nil
}

// boundLockWaits sets lock_timeout to wait on the session, unless it is already bounded.
func boundLockWaits(ctx context.Context, c *pgx.Conn, wait time.Duration) error {
	_, err := c.Exec(ctx, `SELECT set_config('lock_timeout', $1, false)
		WHERE current_setting('lock_timeout') = '0'`, fmt.Sprintf("%dms", wait.Milliseconds()))
	if err != nil {
		return fmt.Errorf("bound lock waits: %w", err)
	}
	return nil
}

// Connect opens one connection outside any pool (migrations), bounded as the pools' are: a
// migrator frozen between the statements of a migration's transaction would otherwise hold
// its ACCESS EXCLUSIVE locks, and every query of every collector behind them, for good.
func Connect(ctx context.Context, url string) (*pgx.Conn, error) {
	conn, err := connect(ctx, url)
	if err != nil {
		return nil, err
	}
	if err := boundIdle(ctx, conn, IdleInTransactionDefault); err != nil {
		conn.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return conn, nil
}

// inUTC makes timestamptz values (and arrays of them) scan in UTC rather than the host's
// time zone: what the API, `collector history` and the exports write must not depend on the
// TZ of the machine serving it (a daemon on a host in Asia/Seoul answered +09:00 beside the
// events' Z, and two servers gave one answer two ETags).
func inUTC(m *pgtype.Map) {
	tz := &pgtype.Type{Name: "timestamptz", OID: pgtype.TimestamptzOID, Codec: &pgtype.TimestamptzCodec{ScanLocation: time.UTC}}
	m.RegisterType(tz)
	m.RegisterType(&pgtype.Type{Name: "_timestamptz", OID: pgtype.TimestamptzArrayOID, Codec: &pgtype.ArrayCodec{ElementType: tz}})
}

// MigrationStatus is the applied and the latest known schema version.
type MigrationStatus struct {
	Current int32
	Latest  int32
	Pending []string
}

// Step is one migration to run, in one direction, with the SQL it runs.
type Step struct {
	Sequence  int32 // the migration's own number
	Name      string
	Direction string // "up" or "down"
	SQL       string
}

// Latest is the version the embedded migrations bring a database to.
const Latest int32 = -1

var embedded = sync.OnceValues(func() ([]*migrate.Migration, error) {
	// A migrator without a connection only loads and parses (tern's templates included).
	m, err := migrate.NewMigratorEx(context.Background(), nil, VersionTable, &migrate.MigratorOptions{})
	if err != nil {
		return nil, err
	}
	m.Data["revision"] = migrations.Revision()
	if err := m.LoadMigrations(migrations.FS); err != nil {
		return nil, fmt.Errorf("load embedded migrations: %w", err)
	}
	return m.Migrations, nil
})

// LatestVersion is the highest sequence among the embedded migrations, as tern numbers them.
func LatestVersion() (int32, error) {
	ms, err := embedded()
	if err != nil {
		return 0, err
	}
	return int32(len(ms)), nil
}

func newMigrator(ctx context.Context, conn *pgx.Conn) (*migrate.Migrator, error) {
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return nil, fmt.Errorf("prepare migrator: %w", err)
	}
	m.Data["revision"] = migrations.Revision()
	if err := m.LoadMigrations(migrations.FS); err != nil {
		return nil, fmt.Errorf("load embedded migrations: %w", err)
	}
	return m, nil
}

// Migrate applies every pending migration. tern serialises concurrent migrators with an
// advisory lock, so several processes may call this at once.
func Migrate(ctx context.Context, url string, onStart func(seq int32, name string)) error {
	return MigrateTo(ctx, url, Latest, MigrateHooks{OnStart: func(s Step) {
		if onStart != nil {
			onStart(s.Sequence, s.Name)
		}
	}})
}

// MigrateHooks are what MigrateTo tells its caller, each optional: OnStart before each step,
// OnWait when another session holds the migration lock and the migration waits for it (who
// holds it: a migration that hangs, or a frozen one, is otherwise a silent wait).
type MigrateHooks struct {
	OnStart func(Step)
	OnWait  func(holder string)
}

// MigrateTo brings the schema up or down to version target (Latest for the newest), under
// tern's advisory lock.
func MigrateTo(ctx context.Context, url string, target int32, hooks MigrateHooks) error {
	conn, err := Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to the database at %s for migration: %w", Where(url), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, pre, err := readVersion(ctx, conn); err != nil {
		return err
	} else if pre != nil {
		pre.Where = Where(url)
		return pre
	}
	// Before the migrator: making it takes tern's lock already (for its version table).
	if hooks.OnWait != nil {
		if holder, err := migrationLockHolder(ctx, conn); err != nil {
			return fmt.Errorf("migrate to version %d: %w", target, err)
		} else if holder != "" {
			hooks.OnWait(holder)
		}
	}
	m, err := newMigrator(ctx, conn)
	if err != nil {
		return err
	}
	if target == Latest {
		target = int32(len(m.Migrations))
	}
	if target < 0 || target > int32(len(m.Migrations)) {
		return fmt.Errorf("target version %d: allowed 0 to %d", target, len(m.Migrations))
	}
	boundSteps(ctx, conn, m, hooks.OnStart)
	if err := m.MigrateTo(ctx, target); err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) && pgErr.Code == "55P03" { // lock_not_available
			return fmt.Errorf("migrate to version %d: waited %s for a lock another session holds (a long query, an export, a claim) and gave up rather than queue every writer behind it; nothing of that step was applied, run it again: %w",
				target, migrationLockTimeout, err)
		}
		return fmt.Errorf("migrate to version %d: %w", target, err)
	}
	return nil
}

// ternLockKey is the advisory lock tern's Migrator holds for a whole migration (its lockNum);
// TestAMigrationSaysWhoHoldsTheMigrationLock fails if tern's changes.
const ternLockKey int64 = 9628173550095224

// migrationLockHolder names the sessions holding tern's migration lock, "" when it is free (taken
// and given back at once, so that tern takes it next).
func migrationLockHolder(ctx context.Context, conn *pgx.Conn) (string, error) {
	var free bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, ternLockKey).Scan(&free); err != nil {
		return "", fmt.Errorf("read the migration lock: %w", err)
	}
	if free {
		if _, err := conn.Exec(ctx, `SELECT pg_advisory_unlock($1)`, ternLockKey); err != nil {
			return "", fmt.Errorf("release the migration lock: %w", err)
		}
		return "", nil
	}
	// A bigint advisory key is its high and low 32 bits in classid and objid (objsubid 1).
	var holder string
	err := conn.QueryRow(ctx, `
		SELECT coalesce(string_agg(format('pid %s (%s%s, %s since %s)', l.pid,
		           coalesce(nullif(a.application_name, ''), 'no application name'),
		           coalesce(' from ' || host(a.client_addr), ''), coalesce(a.state, 'state unknown'),
		           coalesce(to_char(a.state_change AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS "UTC"'), '?')), '; '),
		         'a session this role cannot see')
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND l.classid = $1::bigint::oid AND l.objid = $2::bigint::oid AND l.objsubid = 1`,
		ternLockKey>>32, ternLockKey&0xFFFFFFFF).Scan(&holder)
	if err != nil {
		return "", fmt.Errorf("read who holds the migration lock: %w", err)
	}
	return holder, nil
}

// migrationLockTimeout bounds how long a migration step waits for a table lock. Waiting, its
// ACCESS EXCLUSIVE request would queue every claim and write-back behind the transaction it
// waits for; failed, the step rolls back and is run again. A role's statement_timeout does
// not apply inside a step: a long DDL is meant to finish. Both are set for the step's
// transaction: a step that runs outside one (tern's disable-tx, for CREATE INDEX
// CONCURRENTLY) must set its own.
var migrationLockTimeout = 10 * time.Second

// boundSteps bounds each migration's transaction as Connect bounds the connection, then calls
// onStart (when set): tern runs RESET ALL at the end of every migration, which undid
// Connect's bound for the migrations after the first.
func boundSteps(ctx context.Context, conn *pgx.Conn, m *migrate.Migrator, onStart func(Step)) {
	m.OnStart = func(seq int32, name, direction, sql string) {
		// Inside the step's transaction: an error aborts it, and the step fails saying so.
		_ = boundIdle(ctx, conn, IdleInTransactionDefault)
		_, _ = conn.Exec(ctx, `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', '0', true)`,
			fmt.Sprintf("%dms", migrationLockTimeout.Milliseconds()))
		if onStart != nil {
			onStart(Step{Sequence: seq, Name: name, Direction: direction, SQL: sql})
		}
	}
}

// Plan lists the steps MigrateTo(target) would run now, changing nothing (not even creating
// the version table on a fresh database).
func Plan(ctx context.Context, url string, target int32) (current int32, steps []Step, err error) {
	ms, err := embedded()
	if err != nil {
		return 0, nil, err
	}
	conn, err := connect(ctx, url)
	if err != nil {
		return 0, nil, fmt.Errorf("connect to the database at %s for migration status: %w", Where(url), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	current, pre, err := readVersion(ctx, conn)
	if err != nil {
		return 0, nil, err
	}
	if pre != nil {
		pre.Where = Where(url)
		return current, nil, pre
	}
	if target == Latest {
		target = int32(len(ms))
	}
	if target < 0 || target > int32(len(ms)) {
		return current, nil, fmt.Errorf("target version %d: allowed 0 to %d", target, len(ms))
	}
	if current > int32(len(ms)) {
		return current, nil, &SchemaAheadError{Where: Where(url), Current: current, Latest: int32(len(ms))}
	}
	for v := current; v < target; v++ {
		steps = append(steps, Step{Sequence: ms[v].Sequence, Name: ms[v].Name, Direction: "up", SQL: ms[v].UpSQL})
	}
	for v := current; v > target; v-- {
		steps = append(steps, Step{Sequence: ms[v-1].Sequence, Name: ms[v-1].Name, Direction: "down", SQL: ms[v-1].DownSQL})
	}
	return current, steps, nil
}

// Status reports the applied version against the embedded migrations.
func Status(ctx context.Context, url string) (MigrationStatus, error) {
	cur, steps, err := Plan(ctx, url, Latest)
	if err != nil {
		return MigrationStatus{}, err
	}
	latest, _ := LatestVersion()
	st := MigrationStatus{Current: cur, Latest: latest}
	for _, s := range steps {
		st.Pending = append(st.Pending, s.Name)
	}
	return st, nil
}

// Querier is a pool, a connection or a transaction.
type Querier interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}

// CurrentVersion reads tern's version row with one plain query (no advisory lock, no DDL, so
// it works through a transaction-pooling PgBouncer); 0 when no migration ever ran.
func CurrentVersion(ctx context.Context, q Querier) (int32, error) {
	v, _, err := readVersion(ctx, q)
	return v, err
}

// readVersion is CurrentVersion, and whether the schema was made by a pre-release text of the
// schema: by the pre-release chain of migrations (its first migration made next_collect_at the
// fourth column of tracked_items, 001_schema.sql places it later, and a column never moves), or
// by another text of 001_schema.sql than this binary's, which changes in place until the first release and
// records which text it was on tracked_items (migrations.Revision). A database of a later
// release, whose version may be anything, has the released 001 and is never taken for either.
func readVersion(ctx context.Context, q Querier) (v int32, pre *PreReleaseSchemaError, err error) {
	var exists bool
	if err := q.QueryRow(ctx, `SELECT to_regclass($1) IS NOT NULL`, VersionTable).Scan(&exists); err != nil {
		return 0, nil, fmt.Errorf("read schema version: %w", err)
	}
	if !exists {
		return 0, nil, nil
	}
	// The version and what 001 left on tracked_items come from one statement, so from one
	// snapshot: tern commits its version table before the migration, and a migration
	// committing between two reads would pair version 1 with a tracked_items not yet seen,
	// taken for a pre-release schema.
	var oldChain bool
	var revision string
	if err := q.QueryRow(ctx, `SELECT version,
		coalesce((SELECT attnum = 4 FROM pg_attribute
		          WHERE attrelid = to_regclass('public.tracked_items') AND attname = 'next_collect_at'), false),
		coalesce(obj_description(to_regclass('public.tracked_items'), 'pg_class'), '')
		FROM `+VersionTable).Scan(&v, &oldChain, &revision); err != nil {
		return 0, nil, fmt.Errorf("read schema version: %w", err)
	}
	if oldChain || v >= 1 && revision != revisionComment() {
		return v, &PreReleaseSchemaError{Version: v, NoRevision: !oldChain && revision == ""}, nil
	}
	return v, nil, nil
}

// revisionComment is what 001_schema.sql leaves on tracked_items.
func revisionComment() string { return "duecollector schema " + migrations.Revision() }

// CheckCurrent fails when the database schema is behind the binary. Every command that needs
// the schema and /readyz make this same check, so a never-migrated database gets one line that
// says what to run instead of a missing-relation error.
func CheckCurrent(ctx context.Context, q Querier) error {
	v, pre, err := readVersion(ctx, q)
	if err != nil {
		return fmt.Errorf("database at %s: %w", whereOf(q), err)
	}
	if pre != nil {
		pre.Where = whereOf(q)
		return pre
	}
	latest, err := LatestVersion()
	if err != nil {
		return err
	}
	if v < latest {
		return &SchemaBehindError{Where: whereOf(q), Current: v, Latest: latest}
	}
	return nil
}

// SchemaBehindError is CheckCurrent's error when migrations are pending.
type SchemaBehindError struct {
	Where           string // host:port/dbname
	Current, Latest int32
}

func (e *SchemaBehindError) Error() string {
	return fmt.Sprintf("the database at %s is at schema version %d of %d: migrations are pending", e.Where, e.Current, e.Latest)
}

// SchemaAheadError is Plan's error when a newer release migrated the database: this binary
// knows neither the steps up to it nor their way down.
type SchemaAheadError struct {
	Where           string // host:port/dbname
	Current, Latest int32
}

func (e *SchemaAheadError) Error() string {
	return fmt.Sprintf("the database at %s is at schema version %d, newer than this binary's %d: a newer release migrated it "+
		"(to go back, run `collector migrate down --to %d` with that release's binary)", e.Where, e.Current, e.Latest, e.Latest)
}

// PreReleaseSchemaError is the error of every migration and schema check on a database that a
// pre-release text of the schema made: the pre-release chain of migrations (folded into one
// before the first release) or another text of 001_schema.sql than this binary's. Such a database is not
// upgraded: it is made again.
type PreReleaseSchemaError struct {
	Where      string // host:port/dbname
	Version    int32  // the version it records
	NoRevision bool   // tracked_items has no comment at all
}

func (e *PreReleaseSchemaError) Error() string {
	s := fmt.Sprintf("the database at %s was created by a pre-release schema (version %d, made by another text of the migrations than this binary's); "+
		"this release creates the schema with one migration and cannot upgrade it: drop and recreate the database "+
		"(or empty it: DROP SCHEMA public CASCADE; CREATE SCHEMA public), then migrate it", e.Where, e.Version)
	if e.NoRevision {
		// A restore without comments (pg_restore --no-comments) looks the same: emptying
		// the database would throw its history away.
		s += fmt.Sprintf(". Its tracked_items has no revision comment. Only if it is a restore, made or restored with --no-comments, of a database "+
			"this release migrated, do not drop it but set the comment back: COMMENT ON TABLE public.tracked_items IS '%s'", revisionComment())
	}
	return s
}

// NeedsMigration tells whether err says the schema must be migrated (SchemaBehindError) or made
// again and migrated (PreReleaseSchemaError), for callers that add how to migrate.
func NeedsMigration(err error) bool {
	var behind *SchemaBehindError
	var pre *PreReleaseSchemaError
	return errors.As(err, &behind) || errors.As(err, &pre)
}

// Where names a database as host:port/dbname, never with its user or password, for messages.
func Where(url string) string {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return "(unparsable database.url)"
	}
	return fmt.Sprintf("%s:%d/%s", cc.Host, cc.Port, cc.Database)
}

func whereOf(q any) string {
	if p, ok := q.(interface{ Config() *pgxpool.Config }); ok {
		cc := p.Config().ConnConfig
		return fmt.Sprintf("%s:%d/%s", cc.Host, cc.Port, cc.Database)
	}
	return "database.url"
}

// WithExecMode sets pgx's default_query_exec_mode on a connection string (URL or key=value
// form); mode "" leaves it as it is.
func WithExecMode(conn, mode string) string {
	if mode == "" {
		return conn
	}
	if u, err := url.Parse(conn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("default_query_exec_mode", mode)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return conn + " default_query_exec_mode=" + mode
}

// SimpleProtocol tells whether connections to conn run in the simple protocol, the mark of a
// transaction-pooling PgBouncer in front of it (a session's state does not last there).
func SimpleProtocol(conn string) bool {
	c, err := pgx.ParseConfig(conn)
	return err == nil && c.DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol
}

// Now is the database's clock, the one clock that decides "now" for every process.
func Now(ctx context.Context, q Querier) (time.Time, error) {
	var now time.Time
	if err := q.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return now, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
}
