package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Backlog is what waits in the outbox, for collector status, outbox list and the metrics.
type Backlog struct {
	Pending   int64         // not yet published
	Oldest    time.Duration // age of the oldest pending row; 0 when none
	Failed    int64         // rejected by the broker; `collector outbox retry` sends them again
	Published int64         // published, not yet pruned; only counted on request
}

// ReadBacklog counts published rows only on request: that scans the outbox.
func ReadBacklog(ctx context.Context, pool *pgxpool.Pool, countPublished bool) (Backlog, error) {
	var b Backlog
	var oldest float64
	err := pool.QueryRow(ctx, `
		WITH p AS (SELECT count(*) AS n, `+pendingHead+` AS oldest FROM outbox_pending),
		     f AS (SELECT count(*) AS n FROM outbox WHERE failed_at IS NOT NULL)
		SELECT p.n, f.n, coalesce(extract(epoch FROM now() - (SELECT created_at FROM outbox WHERE id = p.oldest)), 0),
		       CASE WHEN $1 THEN (SELECT count(*) FROM outbox) - p.n - f.n ELSE 0 END
		FROM p, f`, countPublished).Scan(&b.Pending, &b.Failed, &oldest, &b.Published)
	if err != nil {
		return b, fmt.Errorf("read outbox backlog: %w", err)
	}
	b.Oldest = time.Duration(oldest * float64(time.Second))
	return b, nil
}

// Unheld counts the pending rows in lanes no relay holds: what a relay that just released its
// lanes leaves for the next one, leaving out what other running relays are publishing.
func Unheld(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_pending WHERE lane NOT IN
		(SELECT lane FROM outbox_relay_lanes WHERE owner IS NOT NULL AND lease_expires_at > now())`).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count outbox rows in lanes no relay holds: %w", err)
	}
	return n, nil
}

// RelayState is who holds lanes, what is pending in them and which relays stopped for good.
type RelayState struct {
	LanesHeld int      // lanes under an unexpired lease, with an owner
	Owners    []string // who holds them
	Pending   int64    // rows pending in those lanes
	// Cooling is lanes given back after a failed send, free once it can no longer land.
	Cooling int
	Stops   []RelayStop
}

// RelayStop is a relay that stopped for good, and why.
type RelayStop struct {
	Owner     string
	StoppedAt time.Time
	Reason    string
}

// ReadRelayState reads the lane leases and the stop notes.
func ReadRelayState(ctx context.Context, pool *pgxpool.Pool) (RelayState, error) {
	var st RelayState
	err := pool.QueryRow(ctx, `
		WITH l AS (SELECT lane, owner FROM outbox_relay_lanes WHERE lease_expires_at > now()),
		     h AS (SELECT lane, owner FROM l WHERE owner IS NOT NULL)
		SELECT (SELECT count(*) FROM h), (SELECT coalesce(array_agg(DISTINCT owner), '{}') FROM h),
		       (SELECT count(*) FROM outbox_pending WHERE lane IN (SELECT lane FROM h)),
		       (SELECT count(*) FROM l WHERE owner IS NULL)`).
		Scan(&st.LanesHeld, &st.Owners, &st.Pending, &st.Cooling)
	if err != nil {
		return st, fmt.Errorf("read outbox relay lanes: %w", err)
	}
	rows, _ := pool.Query(ctx, `SELECT owner, stopped_at, reason FROM outbox_relay_stops ORDER BY stopped_at`)
	if st.Stops, err = pgx.CollectRows(rows, pgx.RowToStructByPos[RelayStop]); err != nil {
		return st, fmt.Errorf("read outbox relay stops: %w", err)
	}
	return st, nil
}
