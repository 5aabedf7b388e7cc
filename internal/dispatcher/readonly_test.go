package dispatcher

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/testsignal"
	"github.com/duecollector/duecollector/internal/tiers"
)

// setReadOnly switches the test database's new sessions to read-only (or back) and cuts its
// other sessions, so the pool reconnects into the new setting, as a failover cuts them.
func setReadOnly(t *testing.T, url string, conn *pgx.Conn, on bool) {
	t.Helper()
	storetest.SetReadOnly(t, url, on)
	if _, err := conn.Exec(context.Background(), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE datname = current_database() AND pid <> pg_backend_pid()`); err != nil {
		t.Fatal(err)
	}
}

// Results fetched when the database turns read-only are kept and written once it takes writes
// again within their lease: the item is fetched from the provider once, not again after its
// lease expires, and the write-health tracker names the cause while it lasts.
func TestReadOnlyDatabaseKeepsFetchedResults(t *testing.T) {
	ctx := context.Background()
	var e *env
	var conn *pgx.Conn
	var auctions atomic.Int64
	var once sync.Once
	e = setup(t, 1, tiers.Active, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction" {
				auctions.Add(1)
				// The item is claimed and being fetched: the database stops taking writes now.
				once.Do(func() { setReadOnly(t, e.url, conn, true) })
			}
			next.ServeHTTP(w, r)
		})
	})
	var err error
	if conn, err = pgx.Connect(ctx, e.url); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close(context.Background()) })

	wh := store.NewWriteHealth()
	// Writes come back only once a write-back itself was refused and is being retried.
	var retrying testsignal.Signal[struct{}]
	retrying.Init(t)
	log := zap.New(hookCore{fn: func(e zapcore.Entry, fs []zapcore.Field) {
		for _, f := range fs {
			if e.Message == "write-back failed; retrying" && f.Key == "cause" && f.String == string(store.CauseReadOnly) {
				retrying.Signal(struct{}{})
			}
		}
	}})
	type passOut struct {
		s   Summary
		err error
	}
	done := make(chan passOut, 1)
	go func() {
		s, err := e.dispatcher(t, Config{Concurrency: 1, MaxBatches: 1, Lease: 10 * time.Minute, WriteHealth: wh}, log).RunOnce(ctx)
		done <- passOut{s, err}
	}()
	retrying.WaitWithin(t, time.Minute)
	st := wh.State()
	if st.Cause != store.CauseReadOnly || st.Detail == "" {
		t.Fatalf("write health %+v: want refused with the error", st)
	}
	setReadOnly(t, e.url, conn, false)
	out := testkit.Recv(t, done, 2*time.Minute, "the pass to write its result once writes are back")
	if out.err != nil || out.s.Collected != 1 {
		t.Fatalf("summary %s, %v: want the item collected from its first fetch", out.s, out.err)
	}
	if n := auctions.Load(); n != 1 {
		t.Fatalf("the provider served %d auction requests for the item, want 1", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM auction_snapshots`); n != 1 {
		t.Fatalf("%d snapshots, want 1", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL OR last_outcome <> 'ok'`); n != 0 {
		t.Fatalf("%d items leased or not ok", n)
	}
	if s := wh.State(); !s.Writable {
		t.Fatalf("write health %+v after the successful write, want writable", s)
	}
}

// hookCore hands every log entry with its fields to fn.
type hookCore struct {
	fn func(zapcore.Entry, []zapcore.Field)
}

func (hookCore) Enabled(zapcore.Level) bool          { return true }
func (c hookCore) With([]zapcore.Field) zapcore.Core { return c }
func (c hookCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	return ce.AddCore(e, c)
}
func (c hookCore) Write(e zapcore.Entry, fs []zapcore.Field) error { c.fn(e, fs); return nil }
func (hookCore) Sync() error                                       { return nil }
