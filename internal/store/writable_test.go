package store_test

import (
	"context"
	"fmt"
	"io"
	neturl "net/url"
	"testing"
	"time"

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
		{pg("53300"), ""}, // no new session: the pool's sessions still write
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

// The last refusal stands until a write succeeds (for a full disk: the space probe's); a data
// error changes nothing, and a clean probe clears only what a probe can see.
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
	h.ObserveSpace(nil)
	if s := h.State(); !s.Writable {
		t.Fatalf("state %+v after the space probe's write", s)
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

// A full disk is one state from its first refusal to the space probe's success: writes that
// succeed meanwhile (updates in place) and causes seen on the way (the server restarting) do
// not end it, so it starts and ends once.
func TestLackOfSpaceStandsUntilTheSpaceProbeSucceeds(t *testing.T) {
	h := store.NewWriteHealth()
	var changes []store.WriteCause
	h.OnChange = func(s store.WriteState) { changes = append(changes, s.Cause) }
	h.Observe(&pgconn.PgError{Code: "53100", Message: "could not extend file"})
	for range 3 {
		h.Observe(nil)
		h.ObserveProbe("", "")
	}
	if s := h.State(); s.Cause != store.CauseDiskFull || !h.SpaceShort() {
		t.Fatalf("state %+v after writes in place succeeded: want disk_full standing", s)
	}
	h.Observe(&pgconn.PgError{Code: "57P01"}) // the server restarts meanwhile
	h.ObserveProbe("", "")
	if s := h.State(); s.Cause != store.CauseDiskFull {
		t.Fatalf("state %+v once the restarted server answers: want disk_full again, not writable", s)
	}
	h.ObserveSpace(&pgconn.PgError{Code: "53100"})
	if s := h.State(); s.Cause != store.CauseDiskFull {
		t.Fatalf("state %+v after a failed space probe", s)
	}
	h.ObserveSpace(nil)
	if s := h.State(); !s.Writable || h.SpaceShort() {
		t.Fatalf("state %+v after the space probe's write succeeded: want writable", s)
	}
	want := []store.WriteCause{store.CauseDiskFull, store.CauseShutdown, store.CauseDiskFull, ""}
	if fmt.Sprint(changes) != fmt.Sprint(want) {
		t.Fatalf("changes %q, want %q", changes, want)
	}
	h.Observe(&pgconn.PgError{Code: "53300"}) // too many clients: no state of the server's writes
	if s := h.State(); !s.Writable {
		t.Fatalf("state %+v after a session was refused at max_connections: want writable", s)
	}
	h.Observe(&pgconn.PgError{Code: "53200"}) // out of memory: a lack of resources stands as well
	h.Observe(nil)
	if s := h.State(); s.Cause != store.CauseResources {
		t.Fatalf("state %+v after a write succeeded: want insufficient_resources standing", s)
	}
}

// The space probe fails on a full disk while an update in place succeeds, succeeds once space
// is back, leaves nothing behind, and works behind PgBouncer in transaction mode.
func TestProbeSpaceNeedsNewSpace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, url := storetest.NewPool(t)
	if err := store.ProbeSpace(ctx, pool, store.SpaceMargin); err != nil {
		t.Fatalf("space probe on a database with room: %v", err)
	}
	free := storetest.FillDisk(t, pool, "tracked_items")
	err := store.ProbeSpace(ctx, pool, store.SpaceMargin)
	if c := store.RefusedCause(err); c != store.CauseDiskFull {
		t.Fatalf("space probe on a full disk: %v, cause %q, want disk_full", err, c)
	}
	if _, err := pool.Exec(ctx, `UPDATE packing_state SET enabled = enabled`); err != nil {
		t.Fatalf("an update in place on the full disk: %v", err)
	}
	free()
	if err := store.ProbeSpace(ctx, pool, store.SpaceMargin); err != nil {
		t.Fatalf("space probe once space is back: %v", err)
	}
	var left bool
	if err := pool.QueryRow(ctx, `SELECT to_regclass('collector_space_probe') IS NOT NULL`).Scan(&left); err != nil || left {
		t.Fatalf("the probe's table left behind: %v %v", left, err)
	}

	t.Run("a role that may not create tables", func(t *testing.T) {
		role := fmt.Sprintf("dc_noprobe_%d", time.Now().UnixNano())
		if _, err := pool.Exec(ctx, `CREATE ROLE `+role+` LOGIN; REVOKE CREATE ON SCHEMA public FROM PUBLIC`); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = pool.Exec(context.Background(), `DROP ROLE IF EXISTS `+role) })
		u, err := neturl.Parse(url)
		if err != nil {
			t.Fatal(err)
		}
		u.User = neturl.User(role)
		limited, err := store.Open(ctx, store.PoolConfig{URL: u.String(), MaxConns: 1, ApplicationName: "duecollector-test"})
		if err != nil {
			t.Fatal(err)
		}
		defer limited.Close()
		if err := store.ProbeSpace(ctx, limited, store.SpaceBlock); err != nil {
			t.Fatalf("space probe of a role without CREATE: %v, want its temporary table", err)
		}
		free := storetest.FillDisk(t, pool)
		defer free()
		if c := store.RefusedCause(store.ProbeSpace(ctx, limited, store.SpaceBlock)); c != store.CauseDiskFull {
			t.Fatalf("space probe of a role without CREATE on a full disk: cause %q, want disk_full", c)
		}
	})

	t.Run("behind PgBouncer", func(t *testing.T) {
		bouncer, err := store.Open(ctx, store.PoolConfig{URL: storetest.PgBouncer(t, url, 1), MaxConns: 2, ApplicationName: "duecollector-test"})
		if err != nil {
			t.Fatal(err)
		}
		defer bouncer.Close()
		for range 3 { // one server connection: a probe that left its transaction open would block the next
			if err := store.ProbeSpace(ctx, bouncer, store.SpaceMargin); err != nil {
				t.Fatalf("space probe through PgBouncer: %v", err)
			}
		}
	})
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

// A write made now and then on a short bound reports only what the server answered: its own
// timeout (a wait for a busy pool) and a failed connection are the probe's to tell.
func TestObserveAnswerCountsOnlyTheServersRefusals(t *testing.T) {
	h := store.NewWriteHealth()
	h.ObserveAnswer(fmt.Errorf("renew leases: %w", context.DeadlineExceeded))
	h.ObserveAnswer(fmt.Errorf("heartbeat: %w", io.ErrUnexpectedEOF))
	if s := h.State(); !s.Writable {
		t.Fatalf("state %+v after a timeout and a dropped connection, want writable", s)
	}
	h.ObserveAnswer(&pgconn.PgError{Code: "25006"})
	if s := h.State(); s.Cause != store.CauseReadOnly {
		t.Fatalf("state %+v after the server refused a write, want read_only", s)
	}
	h.ObserveAnswer(nil)
	if s := h.State(); !s.Writable {
		t.Fatalf("state %+v after a write succeeded, want writable", s)
	}
}
