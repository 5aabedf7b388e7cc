package history_test

import (
	"context"
	"fmt"
	neturl "net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// A database that lost its last commits (a restore, a failover to an asynchronous replica)
// hands out again snapshot ids whose events are already in Kafka. Moved on to the clock, the
// next id is past every id used before the loss; ids ahead of the clock are left alone.
func TestSnapshotIDsMoveOnToTheClock(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	const seq = `pg_get_serial_sequence('auction_snapshots', 'snapshot_id')`
	setval := func(v int64) {
		t.Helper()
		if _, err := pool.Exec(ctx, `SELECT setval(`+seq+`, $1)`, v); err != nil {
			t.Fatal(err)
		}
	}
	setval(1_000) // the ids of long ago, as after a restore
	var clock int64
	if err := pool.QueryRow(ctx, `SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint`).Scan(&clock); err != nil {
		t.Fatal(err)
	}
	if err := history.AdvanceSnapshotIDs(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if next := nextID(t, pool); next <= clock {
		t.Fatalf("next snapshot id %d after moving on, want past the clock's %d µs", next, clock)
	}
	const ahead = int64(1) << 60
	setval(ahead)
	if err := history.AdvanceSnapshotIDs(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if next := nextID(t, pool); next != ahead+1 {
		t.Fatalf("next snapshot id %d, want %d: ids ahead of the clock must not go back", next, ahead+1)
	}
}

func nextID(t *testing.T, pool *pgxpool.Pool) int64 {
	t.Helper()
	var id int64
	if err := pool.QueryRow(context.Background(), `SELECT nextval(pg_get_serial_sequence('auction_snapshots', 'snapshot_id'))`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id
}

// A role that may read the sequence but not set it (GRANT USAGE, SELECT ON ALL SEQUENCES, the
// usual grant) leaves it alone: run on every new connection, an error would refuse the
// connection itself, and with it every command.
func TestSnapshotIDsAreLeftAloneByARoleThatMayNotMoveThem(t *testing.T) {
	t.Parallel()
	pool, url := storetest.NewPool(t)
	ctx := context.Background()
	role := fmt.Sprintf("dc_reader_%d", time.Now().UnixNano())
	if _, err := pool.Exec(ctx, `CREATE ROLE `+role+` LOGIN; GRANT USAGE ON SCHEMA public TO `+role+`;
		GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA public TO `+role); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = pool.Exec(context.Background(), `DROP OWNED BY `+role+`; DROP ROLE `+role)
	})
	if _, err := pool.Exec(ctx, `SELECT setval(pg_get_serial_sequence('auction_snapshots', 'snapshot_id'), 1000)`); err != nil {
		t.Fatal(err)
	}
	u, err := neturl.Parse(url)
	if err != nil {
		t.Fatal(err)
	}
	u.User = neturl.User(role)
	conn, err := pgx.Connect(ctx, u.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := history.AdvanceSnapshotIDs(ctx, conn); err != nil {
		t.Fatalf("a role without UPDATE on the sequence: %v; want it left alone", err)
	}
	if next := nextID(t, pool); next != 1001 {
		t.Fatalf("next snapshot id %d, want 1001: moved by a role that may not", next)
	}
}
