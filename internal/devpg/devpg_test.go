package devpg

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/store/storetest"
)

// sharedURL names database db on the server every other package tests against
// (storetest.AdminURL: DUECOLLECTOR_TEST_DATABASE_URL, else 127.0.0.1:5432).
func sharedURL(t *testing.T, db string) string {
	t.Helper()
	u, err := url.Parse(storetest.AdminURL())
	if err != nil {
		t.Fatalf("test database URL: %v", err)
	}
	u.Path = "/" + db
	return u.String()
}

func randomName(t *testing.T) string {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "devpg_test_" + hex.EncodeToString(b)
}

func connect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), url)
	if err != nil {
		t.Fatalf("connect to %s: %v", url, err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return conn
}

// closedPortURL is a loopback URL where nothing listens: the port was just free.
func closedPortURL(t *testing.T, db string) string {
	p, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p, db)
}

// A server that answers is used as it is, and a missing database is created on it.
func TestEnsureUsesRunningServerAndCreatesDatabase(t *testing.T) {
	ctx := context.Background()
	db := randomName(t)
	url := sharedURL(t, db)
	admin := connect(t, sharedURL(t, "postgres"))
	t.Cleanup(func() {
		if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{db}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop test database %s: %v", db, err)
		}
	})

	got, stop, err := Ensure(ctx, url, t.TempDir(), zap.NewNop())
	if err != nil {
		t.Fatalf("Ensure: %v", err)
	}
	defer stop()
	if got != url {
		t.Fatalf("Ensure returned %s, want the configured %s", got, url)
	}
	var name string
	if err := connect(t, got).QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil || name != db {
		t.Fatalf("current_database() = %q, %v; want %q", name, err, db)
	}

	// Idempotent: the second call finds the database and changes nothing.
	if _, stop2, err := Ensure(ctx, url, t.TempDir(), zap.NewNop()); err != nil {
		t.Fatalf("second Ensure: %v", err)
	} else {
		stop2()
	}
}

// With nothing listening and server binaries installed, a private cluster is initialised,
// started, announced, stopped, and re-used (data intact) by the next call.
func TestEnsureStartsAndReusesPrivateCluster(t *testing.T) {
	if _, err := findBinaries(""); err != nil {
		t.Skipf("PostgreSQL server binaries are not installed, so a private cluster cannot be tested: %v", err)
	}
	ctx := context.Background()
	dataDir := filepath.Join(t.TempDir(), "pg")
	if os.Geteuid() == 0 {
		// As root the cluster runs as postgres, who must be able to enter the test's
		// temporary directory (created 0700).
		for d := filepath.Dir(dataDir); d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	core, logs := observer.New(zap.InfoLevel)
	url := closedPortURL(t, "demo_db")

	got, stop, err := Ensure(ctx, url, dataDir, zap.New(core))
	if err != nil {
		t.Fatalf("Ensure with nothing listening: %v", err)
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			stop()
		}
	})
	if got == url {
		t.Fatalf("Ensure returned the dead URL %s", url)
	}
	if n := logs.FilterMessage("started a private PostgreSQL").FilterField(zap.String("dir", dataDir)).Len(); n != 1 {
		t.Fatalf("want one 'started a private PostgreSQL' log line, got %d: %v", n, logs.All())
	}
	conn := connect(t, got)
	var name string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&name); err != nil || name != "demo_db" {
		t.Fatalf("current_database() = %q, %v; want demo_db", name, err)
	}
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	_ = conn.Close(ctx)
	stop()
	stopped = true
	if err := ping(ctx, mustParse(t, got)); err == nil {
		t.Fatalf("the private PostgreSQL still answers at %s after stop", got)
	}

	// Next run: no initdb, same data.
	logs.TakeAll()
	got2, stop2, err := Ensure(ctx, url, dataDir, zap.New(core))
	if err != nil {
		t.Fatalf("second Ensure: %v", err)
	}
	t.Cleanup(stop2) // already stopped by stop3 unless the test fails first; a warning then
	if n := logs.FilterMessageSnippet("initialising").Len(); n != 0 {
		t.Fatalf("second Ensure ran initdb again: %v", logs.All())
	}
	var v int
	if err := connect(t, got2).QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != 42 {
		t.Fatalf("re-used cluster lost its data: v=%d, %v", v, err)
	}

	// A run that finds the cluster still running (an earlier run was killed before its stop)
	// joins it on the same port, and its stop shuts it down.
	got3, stop3, err := Ensure(ctx, url, dataDir, zap.New(core))
	if err != nil {
		t.Fatalf("Ensure with the cluster running: %v", err)
	}
	if got3 != got2 {
		t.Fatalf("Ensure with the cluster running returned %s, want the running one %s", got3, got2)
	}
	if n := logs.FilterMessage("re-using the private PostgreSQL already running").FilterField(zap.String("dir", dataDir)).Len(); n != 1 {
		t.Fatalf("want one 're-using' log line, got %d: %v", n, logs.All())
	}
	stop3()
	if err := ping(ctx, mustParse(t, got3)); err == nil {
		t.Fatalf("the re-used private PostgreSQL still answers at %s after stop", got3)
	}
}

// Without binaries the error tells the user exactly how to get a server.
func TestEnsureExplainsHowToGetAServer(t *testing.T) {
	old := searchGlobs
	searchGlobs = []string{filepath.Join(t.TempDir(), "nothing-*")}
	t.Cleanup(func() { searchGlobs = old })
	t.Setenv("PATH", t.TempDir())

	_, stop, err := Ensure(context.Background(), closedPortURL(t, "demo_db"), t.TempDir(), zap.NewNop())
	stop()
	if err == nil {
		t.Fatal("Ensure succeeded with no server and no binaries")
	}
	for _, want := range []string{"no PostgreSQL answers at 127.0.0.1:", "docker compose up -d postgres", "apt-get install postgresql", "COLLECTOR_DATABASE_URL"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
}

// Only a server on this machine is ever replaced by a private one; a dead remote server is
// reported. (Tested without dialling: tests send traffic to loopback only.)
func TestIsLocal(t *testing.T) {
	for host, want := range map[string]bool{
		"127.0.0.1": true, "localhost": true, "::1": true, "/var/run/postgresql": true,
		"db.example.com": false, "10.0.0.5": false,
	} {
		if got := isLocal(host); got != want {
			t.Errorf("isLocal(%q) = %v, want %v", host, got, want)
		}
	}
}

func mustParse(t *testing.T, url string) *pgx.ConnConfig {
	t.Helper()
	c, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// As root the server runs as postgres; a data directory postgres cannot reach is refused up
// front with the directory to fix, instead of an obscure initdb failure.
func TestEnsureNamesUnreachableDirectoryAsRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root hands the cluster to the postgres user")
	}
	if _, err := findBinaries(""); err != nil {
		t.Skipf("PostgreSQL server binaries are not installed: %v", err)
	}
	locked := filepath.Join(t.TempDir(), "locked")
	if err := os.Mkdir(locked, 0o700); err != nil {
		t.Fatal(err)
	}
	_, stop, err := Ensure(context.Background(), closedPortURL(t, "demo_db"), filepath.Join(locked, "pg"), zap.NewNop())
	stop()
	if err == nil || !strings.Contains(err.Error(), "chmod o+x "+locked) {
		t.Fatalf("want an error naming %s to chmod, got %v", locked, err)
	}
}
