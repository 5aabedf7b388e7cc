// Package storetest gives each test its own fresh PostgreSQL database, cloned from a template
// that is migrated once per schema version. Cloning a template takes tens of milliseconds,
// so tests stay independent without paying for migrations every time. Items, Sales, Snapshots
// and Interests write fixture rows with defaults, so a test states only what it is about.
//
// The server is found through DUECOLLECTOR_TEST_DATABASE_URL (an admin connection string),
// defaulting to the local trust-auth server.
package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/migrations"
)

// DefaultAdminURL is used when DUECOLLECTOR_TEST_DATABASE_URL is unset.
const DefaultAdminURL = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"

// Any fixed number: serialises template builds across test binaries running in parallel.
const templateLockKey = 7_305_118_220_417

// AdminURL is the connection string of the maintenance database used to create test databases.
func AdminURL() string {
	if u := os.Getenv("DUECOLLECTOR_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultAdminURL
}

// templateName changes whenever a migration changes, so a stale template is never reused, and
// with the UTC day: a template holds the history partitions of the day it was built, and a test
// that lays out its own days around today (PartitionDays) would collide with a partition a
// template built yesterday already holds for what is now the day before.
func templateName() (string, error) {
	h := sha256.New()
	var names []string
	err := fs.WalkDir(migrations.FS, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		names = append(names, path)
		return nil
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := migrations.FS.ReadFile(n)
		if err != nil {
			return "", err
		}
		h.Write([]byte(n))
		h.Write(b)
	}
	return "dc_tmpl_" + hex.EncodeToString(h.Sum(nil))[:16] + "_" + time.Now().UTC().Format("20060102"), nil
}

// dropOldTemplates drops the templates of this naming built two or more days ago; nothing can
// still be cloning them (a test binary builds today's, or yesterday's near midnight).
func dropOldTemplates(ctx context.Context, admin *pgx.Conn) {
	cutoff := time.Now().UTC().AddDate(0, 0, -2).Format("20060102")
	rows, err := admin.Query(ctx, `SELECT datname FROM pg_database WHERE datname ~ '^dc_tmpl_[0-9a-f]{16}_[0-9]{8}$' AND right(datname, 8) <= $1`, cutoff)
	if err != nil {
		return
	}
	old, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, name := range old {
		_, _ = admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize())
	}
}

// URLFor returns the admin URL pointed at another database on the same server.
func URLFor(dbName string) string {
	u, err := url.Parse(AdminURL())
	if err != nil {
		panic(fmt.Sprintf("DUECOLLECTOR_TEST_DATABASE_URL %s does not parse as a URL", config.RedactURL(AdminURL())))
	}
	u.Path = "/" + dbName
	return u.String()
}

func ensureTemplate(ctx context.Context, admin *pgx.Conn) (string, error) {
	name, err := templateName()
	if err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockKey); err != nil {
		return "", fmt.Errorf("lock template build: %w", err)
	}
	defer admin.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", templateLockKey) //nolint:errcheck
	var exists bool
	if err := admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", err
	}
	if exists {
		return name, nil
	}
	dropOldTemplates(ctx, admin)
	// Build under a scratch name and rename at the end: a crash mid-build never leaves a
	// half-migrated template behind under the real name.
	building := name + "_building"
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{building}.Sanitize()+" WITH (FORCE)"); err != nil {
		return "", err
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{building}.Sanitize()); err != nil {
		return "", fmt.Errorf("create template database: %w", err)
	}
	if err := store.Migrate(ctx, URLFor(building), nil); err != nil {
		return "", fmt.Errorf("migrate template database: %w", err)
	}
	if err := partitionHistory(ctx, URLFor(building)); err != nil {
		return "", fmt.Errorf("partition template database: %w", err)
	}
	if _, err := admin.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{building}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("rename template database: %w", err)
	}
	return name, nil
}

// partitionHistory creates the history partitions the configuration's defaults ask for.
func partitionHistory(ctx context.Context, url string) error {
	pool, err := store.Open(ctx, store.PoolConfig{URL: url, MaxConns: 2, ApplicationName: "duecollector-test"})
	if err != nil {
		return err
	}
	defer pool.Close()
	_, err = Keeper(pool).RunOnce(ctx)
	return err
}

// Keeper is a partition keeper over pool with the configuration's defaults, as the process
// builds its one keeper for the write path and upkeep.
func Keeper(pool *pgxpool.Pool) *partition.Partitions {
	p, err := partition.New(pool, pool, partition.FromConfig(config.Default()))
	if err != nil {
		panic(fmt.Sprintf("partition keeper from the default configuration: %v", err)) // config's tests hold the defaults valid
	}
	return p
}

// NewDatabase creates a fresh, migrated database and returns its URL. It is dropped when the
// test ends.
func NewDatabase(tb testing.TB) string {
	tb.Helper()
	return newDatabase(tb, true)
}

// NewEmptyDatabase creates a database that was never migrated (no schema at all), dropped when
// the test ends: what a new user's `createdb` gives.
func NewEmptyDatabase(tb testing.TB) string {
	tb.Helper()
	return newDatabase(tb, false)
}

// NewEmptyDatabaseInLocale is NewEmptyDatabase with the server's locale set aside for locale
// ("C": lower() lowers ASCII only), as a database an operator created so would have it.
func NewEmptyDatabaseInLocale(tb testing.TB, locale string) string {
	tb.Helper()
	return newDatabase(tb, false, " TEMPLATE template0 ENCODING 'UTF8' LOCALE '"+strings.ReplaceAll(locale, "'", "''")+"'")
}

// NewPreReleaseDatabase creates a database as the pre-release chain of migrations left it
// (folded into one migration before the first release): its version row at 14, and
// tracked_items with that chain's first columns in that chain's order, which is how
// store.CheckCurrent knows it.
func NewPreReleaseDatabase(tb testing.TB) string {
	tb.Helper()
	u := newDatabase(tb, false)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		tb.Fatalf("storetest: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, `
		CREATE TABLE schema_version (version integer NOT NULL);
		INSERT INTO schema_version VALUES (14);
		CREATE TABLE tracked_items (item_id text PRIMARY KEY, item_name text NOT NULL,
			collection_tier text NOT NULL, next_collect_at timestamptz)`); err != nil {
		tb.Fatalf("storetest: pre-release schema: %v", err)
	}
	return u
}

func newDatabase(tb testing.TB, migrated bool, options ...string) string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	admin, err := pgx.Connect(ctx, AdminURL())
	if err != nil {
		tb.Fatalf("storetest: connect to %s (start PostgreSQL or set DUECOLLECTOR_TEST_DATABASE_URL): %v", config.RedactURL(AdminURL()), err)
	}
	defer admin.Close(context.Background())
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	name := "dc_test_" + hex.EncodeToString(rnd[:])
	create := "CREATE DATABASE " + pgx.Identifier{name}.Sanitize()
	if migrated {
		tmpl, err := ensureTemplate(ctx, admin)
		if err != nil {
			tb.Fatalf("storetest: %v", err)
		}
		create += " TEMPLATE " + pgx.Identifier{tmpl}.Sanitize()
	}
	create += strings.Join(options, "")
	if _, err := admin.Exec(ctx, create); err != nil {
		tb.Fatalf("storetest: create database: %v", err)
	}
	if migrated {
		// The template may be days old: partitions up to a week from today, as a daemon keeps.
		if err := partitionHistory(ctx, URLFor(name)); err != nil {
			tb.Fatalf("storetest: %v", err)
		}
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, AdminURL())
		if err != nil {
			tb.Logf("storetest: drop %s: %v", name, err)
			return
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			tb.Logf("storetest: drop %s: %v", name, err)
		}
	})
	return URLFor(name)
}

// NewPool creates a fresh database (see NewDatabase) and a pool on it, closed at cleanup.
func NewPool(tb testing.TB) (*pgxpool.Pool, string) {
	tb.Helper()
	u := NewDatabase(tb)
	pool, err := store.Open(context.Background(), store.PoolConfig{URL: u, MaxConns: 20, ApplicationName: "duecollector-test"})
	if err != nil {
		tb.Fatalf("storetest: %v", err)
	}
	tb.Cleanup(pool.Close)
	return pool, u
}

// SetReadOnly makes the test database at url refuse writes in new sessions
// (default_transaction_read_only), or take them again, as a failover to a read-only node and
// back does. Sessions already open keep their setting: the test cuts them where it must.
func SetReadOnly(tb testing.TB, url string, on bool) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		tb.Fatalf("storetest: %v", err)
	}
	defer conn.Close(ctx)
	var name string
	if err := conn.QueryRow(ctx, `SELECT current_database()`).Scan(&name); err != nil {
		tb.Fatalf("storetest: %v", err)
	}
	q := `ALTER DATABASE ` + pgx.Identifier{name}.Sanitize() + ` RESET default_transaction_read_only`
	if on {
		q = `ALTER DATABASE ` + pgx.Identifier{name}.Sanitize() + ` SET default_transaction_read_only = on`
	}
	// This session is read-only too once the database is: it may still write.
	if _, err := conn.Exec(ctx, `SET default_transaction_read_only = off`); err != nil {
		tb.Fatalf("storetest: %v", err)
	}
	if _, err := conn.Exec(ctx, q); err != nil {
		tb.Fatalf("storetest: %s: %v", q, err)
	}
}
