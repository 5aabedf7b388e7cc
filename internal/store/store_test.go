package store_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// emptyDatabase creates a database with no schema at all (not cloned from the template).
func emptyDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, storetest.AdminURL())
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	var b [6]byte
	_, _ = rand.Read(b[:])
	name := "dc_test_empty_" + hex.EncodeToString(b[:])
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := pgx.Connect(context.Background(), storetest.AdminURL())
		if err == nil {
			_, _ = c.Exec(context.Background(), "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			c.Close(context.Background())
		}
	})
	return storetest.URLFor(name)
}

func TestConcurrentMigrationsAreSafe(t *testing.T) {
	url := emptyDatabase(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- store.Migrate(ctx, url, nil)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate: %v", err)
		}
	}
	st, err := store.Status(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	if st.Current != st.Latest || len(st.Pending) != 0 {
		t.Fatalf("status after migrate: %+v", st)
	}
	pool, err := store.Open(ctx, store.PoolConfig{URL: url, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := store.CheckCurrent(ctx, pool); err != nil {
		t.Fatalf("CheckCurrent after migrate: %v", err)
	}
}

func TestStatusShowsPendingOnEmptyDatabase(t *testing.T) {
	url := emptyDatabase(t)
	st, err := store.Status(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	if st.Current != 0 || len(st.Pending) == 0 || int(st.Latest) != len(st.Pending) {
		t.Fatalf("fresh database status %+v: want everything pending", st)
	}
	pool, err := store.Open(context.Background(), store.PoolConfig{URL: url, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if err := store.CheckCurrent(context.Background(), pool); err == nil {
		t.Fatal("CheckCurrent must fail on an unmigrated database")
	}
}

func TestOpenNamesTheServerOnFailure(t *testing.T) {
	_, err := store.Open(context.Background(), store.PoolConfig{URL: "postgres://nobody:secretpw@127.0.0.1:1/x?sslmode=disable&connect_timeout=2"})
	if err == nil {
		t.Fatal("want an error")
	}
	if s := err.Error(); !contains(s, "127.0.0.1") || contains(s, "secretpw") {
		t.Fatalf("error %q must name the server and hide the password", s)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }
