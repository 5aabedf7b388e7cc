package store_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

func TestRefusedCauseNamesTheServerState(t *testing.T) {
	pg := func(code string) error { return fmt.Errorf("write back: %w", &pgconn.PgError{Code: code}) }
	for _, c := range []struct {
		err  error
		want store.WriteCause
	}{
		{nil, ""},
		{context.Canceled, ""},
		{pg("25006"), store.CauseReadOnly},
		{pg("53100"), store.CauseDiskFull},
		{pg("53200"), store.CauseResources},
		{pg("53300"), store.CauseResources},
		{pg("57P01"), store.CauseShutdown},
		{pg("57P02"), store.CauseShutdown},
		{pg("57P03"), store.CauseShutdown},
		{pg("08006"), store.CauseUnreachable},
		{fmt.Errorf("write: %w", io.ErrUnexpectedEOF), store.CauseUnreachable},
		{pg("23505"), ""}, // the data's fault: the database is fine
		{pg("22003"), ""},
		{pg("40001"), ""}, // a serialization failure is the transaction's, not the server's
	} {
		if got := store.RefusedCause(c.err); got != c.want {
			t.Errorf("RefusedCause(%v) = %q, want %q", c.err, got, c.want)
		}
	}
}

// The last refusal stands until a write succeeds; a data error changes nothing, and a clean
// probe clears only what a probe can see.
func TestWriteHealthKeepsTheLastRefusal(t *testing.T) {
	h := store.NewWriteHealth()
	var changes []store.WriteState
	h.OnChange = func(s store.WriteState) { changes = append(changes, s) }
	h.Observe(&pgconn.PgError{Code: "53100", Message: "could not extend file"})
	h.Observe(&pgconn.PgError{Code: "23505"})
	h.ObserveProbe("", "")
	if s := h.State(); s.Writable || s.Cause != store.CauseDiskFull || s.Since.IsZero() {
		t.Fatalf("state %+v: want disk_full kept", s)
	}
	h.Observe(nil)
	if s := h.State(); !s.Writable {
		t.Fatalf("state %+v after a successful write", s)
	}
	h.ObserveProbe(store.CauseStandby, "in recovery")
	h.ObserveProbe("", "")
	if s := h.State(); !s.Writable {
		t.Fatalf("state %+v after a clean probe following a probe's refusal", s)
	}
	h.Observe(&pgconn.PgError{Code: "57P01"}) // a connection cut: the next clean probe shows the server answers
	h.ObserveProbe("", "")
	if s := h.State(); !s.Writable {
		t.Fatalf("state %+v after a clean probe following a cut connection", s)
	}
	if len(changes) != 6 {
		t.Fatalf("%d changes %+v, want 6", len(changes), changes)
	}
}

// The probe names a database whose new sessions are read-only, and nothing on a writable one.
func TestProbeWritableSeesReadOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, url := storetest.NewPool(t)
	if c, d := store.ProbeWritable(ctx, pool); c != "" {
		t.Fatalf("writable database probed as %q (%s)", c, d)
	}
	storetest.SetReadOnly(t, url, true)
	pool.Reset() // the pool's sessions keep their settings; a failover cuts them too
	c, d := store.ProbeWritable(ctx, pool)
	if c != store.CauseReadOnly || d == "" {
		t.Fatalf("read-only database probed as %q (%s)", c, d)
	}
	_, err := pool.Exec(ctx, `CREATE TABLE x (i int)`)
	if got := store.RefusedCause(err); got != store.CauseReadOnly {
		t.Fatalf("a write on the read-only database: %v, cause %q", err, got)
	}
}

// Wait holds while writes are refused and returns once they are taken again, or ctx ends.
func TestWriteHealthWaitReturnsWhenWritable(t *testing.T) {
	h := store.NewWriteHealth()
	if !h.Wait(context.Background()) {
		t.Fatal("Wait on a writable database returned false")
	}
	h.Observe(&pgconn.PgError{Code: "25006"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if h.Wait(ctx) {
		t.Fatal("Wait with writes refused and ctx ended returned true")
	}
	done := make(chan bool)
	go func() { done <- h.Wait(context.Background()) }()
	h.Observe(nil)
	if !<-done {
		t.Fatal("Wait returned false once writes were taken again")
	}
}
