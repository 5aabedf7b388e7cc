package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/testsignal"
)

// Listen wakes once it listens, on every notification, and again after its connection is
// killed and re-established.
func TestListenWakesAndReconnects(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx, cancel := context.WithCancel(context.Background())
	wake := make(chan struct{}, 1)
	var interrupted testsignal.Signal[error]
	interrupted.Init(t)
	var restored testsignal.Signal[int]
	restored.Init(t)
	cfg := store.ListenConfig{Pool: pool, Channel: "listen_test", Retry: backoff.Policy{Min: 10 * time.Millisecond, Max: 10 * time.Millisecond},
		Restored: restored.Signal}
	done := make(chan struct{})
	go func() {
		defer close(done)
		store.Listen(ctx, cfg, wake, func(err error, _ int) { interrupted.Signal(err) })
	}()
	t.Cleanup(func() { cancel(); testkit.Recv(t, done, testkit.Timeout, "Listen to return") })

	testkit.Recv(t, wake, testkit.Timeout, "the wake-up once listening")
	notified(t, pool, wake)
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND query = 'LISTEN listen_test'`); err != nil {
		t.Fatal(err)
	}
	if err := interrupted.Wait(t); err == nil || errors.Is(err, context.Canceled) {
		t.Fatalf("interruption reported as %v", err)
	}
	// The outage's end is told once, with its failed attempts; the first LISTEN told nothing.
	if n := restored.Wait(t); n != 1 {
		t.Fatalf("restored after %d failed attempts, want 1", n)
	}
	if n := len(restored.C()); n != 0 {
		t.Fatalf("%d more restorations told", n)
	}
	// Only the new connection can wake it now.
	select {
	case <-wake:
	default:
	}
	notified(t, pool, wake)
}

// notified sends NOTIFY until a wake-up arrives (a notification sent before LISTEN is lost).
func notified(t *testing.T, pool *pgxpool.Pool, wake <-chan struct{}) {
	t.Helper()
	testkit.Eventually(t, testkit.Timeout, "a wake-up from NOTIFY", func() bool {
		if _, err := pool.Exec(context.Background(), `NOTIFY listen_test`); err != nil {
			t.Fatal(err)
		}
		timer := time.NewTimer(50 * time.Millisecond)
		defer timer.Stop()
		select {
		case <-wake:
			return true
		case <-timer.C:
			return false
		}
	})
}
