// Package store opens the PostgreSQL pool and applies the embedded schema migrations.
package store

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
		return nil, fmt.Errorf("connect to database %s@%s:%d/%s: %w",
			pc.ConnConfig.User, pc.ConnConfig.Host, pc.ConnConfig.Port, pc.ConnConfig.Database, err)
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
		return fmt.Errorf("connect for migration: %w", err)
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
		return MigrationStatus{}, fmt.Errorf("connect for migration status: %w", err)
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

// CheckCurrent fails when the database schema is behind the binary (used by readiness checks).
func CheckCurrent(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}) error {
	var v int32
	if err := q.QueryRow(ctx, "SELECT version FROM "+VersionTable).Scan(&v); err != nil {
		return fmt.Errorf("read schema version (run `collector migrate up`): %w", err)
	}
	entries, err := migrations.FS.ReadDir(".")
	if err != nil {
		return err
	}
	latest := int32(0)
	for _, e := range entries {
		if len(e.Name()) > 4 && e.Name()[len(e.Name())-4:] == ".sql" {
			latest++
		}
	}
	if v < latest {
		return fmt.Errorf("database schema is at version %d, binary needs %d: run `collector migrate up`", v, latest)
	}
	return nil
}
