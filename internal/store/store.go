// Package store opens the PostgreSQL pool and applies the embedded schema migrations.
package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
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
}

// Open connects a pool and checks that the server answers.
func Open(ctx context.Context, cfg PoolConfig) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		// pgx redacts the password from its parse errors.
		return nil, fmt.Errorf("database.url: %w", err)
	}
	if cfg.MaxConns > 0 {
		pc.MaxConns = cfg.MaxConns
	}
	if cfg.ApplicationName != "" {
		pc.ConnConfig.RuntimeParams["application_name"] = cfg.ApplicationName
	}
	pool, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("open database pool: %w", err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("cannot reach the database at %s:%d/%s (user %s; database.url, --database-url): %w",
			pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database, pc.ConnConfig.User, err)
	}
	return pool, nil
}

// MigrationStatus is the applied and the latest known schema version.
type MigrationStatus struct {
	Current int32
	Latest  int32
	Pending []string
}

func newMigrator(ctx context.Context, conn *pgx.Conn) (*migrate.Migrator, error) {
	m, err := migrate.NewMigrator(ctx, conn, VersionTable)
	if err != nil {
		return nil, fmt.Errorf("prepare migrator: %w", err)
	}
	if err := m.LoadMigrations(migrations.FS); err != nil {
		return nil, fmt.Errorf("load embedded migrations: %w", err)
	}
	return m, nil
}

// Migrate applies every pending migration. tern serialises concurrent migrators with an
// advisory lock, so several processes may call this at once.
func Migrate(ctx context.Context, url string, onStart func(seq int32, name string)) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to the database at %s for migration: %w", Where(url), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	m, err := newMigrator(ctx, conn)
	if err != nil {
		return err
	}
	if onStart != nil {
		m.OnStart = func(seq int32, name, _, _ string) { onStart(seq, name) }
	}
	if err := m.Migrate(ctx); err != nil {
		return fmt.Errorf("apply migrations: %w", err)
	}
	return nil
}

// Status reports the applied version against the embedded migrations.
func Status(ctx context.Context, url string) (MigrationStatus, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return MigrationStatus{}, fmt.Errorf("connect to the database at %s for migration status: %w", Where(url), err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	m, err := newMigrator(ctx, conn)
	if err != nil {
		return MigrationStatus{}, err
	}
	cur, err := m.GetCurrentVersion(ctx)
	if err != nil {
		return MigrationStatus{}, fmt.Errorf("read schema version: %w", err)
	}
	st := MigrationStatus{Current: cur, Latest: int32(len(m.Migrations))}
	for _, mig := range m.Migrations {
		if mig.Sequence > cur {
			st.Pending = append(st.Pending, mig.Name)
		}
	}
	return st, nil
}

// CheckCurrent fails when the database schema is behind the binary. Every command that needs
// the schema and /readyz make this same check, so a never-migrated database gets one line that
// says what to run instead of a missing-relation error.
func CheckCurrent(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) error {
	var v int32
	err := q.QueryRow(ctx, "SELECT version FROM "+VersionTable).Scan(&v)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" { // undefined_table: never migrated
		v, err = 0, nil
	}
	if err != nil {
		return fmt.Errorf("read the schema version of the database at %s: %w", whereOf(q), err)
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
	return fmt.Sprintf("the database at %s is at schema version %d of %d: run `collector migrate up`", e.Where, e.Current, e.Latest)
}

// LatestVersion is the number of embedded migrations: the version this binary needs.
func LatestVersion() (int32, error) {
	entries, err := migrations.FS.ReadDir(".")
	if err != nil {
		return 0, fmt.Errorf("list embedded migrations: %w", err)
	}
	latest := int32(0)
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".sql") {
			latest++
		}
	}
	return latest, nil
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
