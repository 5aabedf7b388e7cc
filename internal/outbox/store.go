package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Lanes is the number of lanes rows are split into (the generated column outbox.lane and the
// rows of outbox_relay_lanes, migrations/002_outbox_relay.sql).
const Lanes = 16

// pendingRow is one outbox row on its way to Kafka.
type pendingRow struct {
	ID        int64     `db:"id"`
	EventID   string    `db:"event_id"`
	EventType string    `db:"event_type"`
	ItemID    string    `db:"item_id"`
	Payload   []byte    `db:"payload"`
	CreatedAt time.Time `db:"created_at"`
	Lane      int16     `db:"lane"`
}

// readPending returns up to limit pending rows of lanes in id order, which is an item's commit
// order (its next event is written only after the previous one committed).
func readPending(ctx context.Context, pool *pgxpool.Pool, lanes []int16, limit int) ([]pendingRow, error) {
	rows, _ := pool.Query(ctx, `
		SELECT o.id, o.event_id, o.event_type, o.item_id, o.payload, o.created_at, p.lane
		FROM outbox_pending p JOIN outbox o ON o.id = p.id
		WHERE p.lane = ANY ($1::smallint[])
		ORDER BY p.id LIMIT $2`, lanes, limit)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[pendingRow])
	if err != nil {
		return nil, fmt.Errorf("read pending outbox rows: %w", err)
	}
	return out, nil
}

// markSettled takes the settled rows of out off the pending list, and records the rejected
// ones' errors, in one statement fenced by the lane lease tokens: rows of a lane no longer held
// under one of tokens stay pending, for the lane's new holder to publish again. It returns the
// ids it took off and the database's time. The commit does not wait for the WAL flush: a mark
// lost in a database crash means a duplicate, never a loss.
func markSettled(ctx context.Context, pool *pgxpool.Pool, tokens []string, out outcome) (map[int64]bool, time.Time, error) {
	var marked []int64
	var now time.Time
	if len(out.settled) == 0 {
		return nil, now, nil
	}
	ids := make([]int64, len(out.settled))
	var failed []int64
	var reasons []string // only the failed rows': a long list here would steer the planner to scan outbox
	for i, row := range out.settled {
		ids[i] = row.ID
		if out.reasons[i] != "" {
			failed, reasons = append(failed, row.ID), append(reasons, out.reasons[i])
		}
	}
	err := pool.QueryRow(ctx, `
		WITH sc AS (SELECT set_config('synchronous_commit', 'off', true)),
		     held AS (SELECT lane FROM outbox_relay_lanes WHERE lease_token = ANY ($1::uuid[])),
		     done AS (
		         DELETE FROM outbox_pending p USING held
		         WHERE p.id = ANY ($2::bigint[]) AND p.lane = held.lane
		         RETURNING p.id),
		     failed AS (
		         UPDATE outbox o SET failed_at = now(), attempts = o.attempts + 1, last_error = f.err
		         FROM unnest($3::bigint[], $4::text[]) AS f(id, err)
		         WHERE o.id = f.id AND f.id IN (SELECT id FROM done))
		SELECT coalesce(array_agg(done.id), '{}'), now() FROM done, sc`,
		tokens, ids, failed, reasons).Scan(&marked, &now)
	if err != nil {
		return nil, now, fmt.Errorf("mark %d outbox rows settled: %w", len(ids), err)
	}
	set := make(map[int64]bool, len(marked))
	for _, id := range marked {
		set[id] = true
	}
	return set, now, nil
}

// recordAttempt notes a failed publish of rows that stay pending (broker down, timeout), so
// `collector outbox list` shows why they wait.
func recordAttempt(ctx context.Context, pool *pgxpool.Pool, ids []int64, cause string) error {
	_, err := pool.Exec(ctx, `
		UPDATE outbox SET attempts = attempts + 1, last_error = $2 WHERE id = ANY ($1::bigint[])`, ids, cause)
	if err != nil {
		return fmt.Errorf("record failed publish of %d outbox rows: %w", len(ids), err)
	}
	return nil
}

// Row is an outbox row as `collector outbox list` shows it.
type Row struct {
	ID        int64
	EventID   string
	EventType string
	ItemID    string
	Lane      int16
	CreatedAt time.Time
	Attempts  int // failed publish attempts
	FailedAt  *time.Time
	LastError *string
}

// ListOptions selects rows for List.
type ListOptions struct {
	FailedOnly bool // only rows marked failed; otherwise every row not yet published
	Limit      int  // default 100
}

// List returns unpublished rows (pending, then failed), oldest first.
func List(ctx context.Context, pool *pgxpool.Pool, opts ListOptions) ([]Row, error) {
	if opts.Limit <= 0 {
		opts.Limit = 100
	}
	rows, _ := pool.Query(ctx, `
		SELECT id, event_id::text, event_type, item_id, lane, created_at, attempts, failed_at, last_error FROM (
		    (SELECT o.*, 0 AS k FROM outbox_pending p JOIN outbox o ON o.id = p.id
		     WHERE NOT $2 ORDER BY p.id LIMIT $1)
		    UNION ALL
		    (SELECT o.*, 1 FROM outbox o WHERE o.failed_at IS NOT NULL ORDER BY o.id LIMIT $1)) u
		ORDER BY k, id LIMIT $1`, opts.Limit, opts.FailedOnly)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Row])
	if err != nil {
		return nil, fmt.Errorf("list outbox rows: %w", err)
	}
	return out, nil
}

// Counts is how many outbox rows are in each state.
type Counts struct {
	Pending   int64
	Failed    int64
	Published int64
	// OldestPending is the creation time of the oldest pending row (nil when none): the relay's lag.
	OldestPending *time.Time
}

// Count counts outbox rows by state (for `collector outbox list`).
func Count(ctx context.Context, pool *pgxpool.Pool) (Counts, error) {
	var c Counts
	err := pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE state = 'pending'), count(*) FILTER (WHERE state = 'failed'),
		       count(*) FILTER (WHERE state = 'published'), min(created_at) FILTER (WHERE state = 'pending')
		FROM outbox_events`).Scan(&c.Pending, &c.Failed, &c.Published, &c.OldestPending)
	if err != nil {
		return Counts{}, fmt.Errorf("count outbox rows: %w", err)
	}
	return c, nil
}

// RetryFailed lists the failed rows among ids (every failed row when ids is empty) as pending
// again, after everything pending so far, and wakes a following relay. Returns how many rows
// were reset.
func RetryFailed(ctx context.Context, pool *pgxpool.Pool, ids []int64) (int64, error) {
	if len(ids) == 0 {
		ids = nil // NULL: every failed row
	}
	var n int64
	err := pool.QueryRow(ctx, `
		WITH r AS (
		    UPDATE outbox SET failed_at = NULL
		    WHERE failed_at IS NOT NULL AND ($1::bigint[] IS NULL OR id = ANY ($1::bigint[]))
		    RETURNING id, lane),
		     p AS (INSERT INTO outbox_pending (id, lane) SELECT id, lane FROM r)
		SELECT count(*), pg_notify('outbox_pending', '') FROM r`, ids).Scan(&n, new(any))
	if err != nil {
		return 0, fmt.Errorf("retry failed outbox rows %v: %w", ids, err)
	}
	return n, nil
}

// Prune deletes published rows created more than olderThan ago, batch rows per statement,
// until none are left; pending and failed rows are never touched. Each statement commits on
// its own, so pruning never blocks the relay for long.
func Prune(ctx context.Context, pool *pgxpool.Pool, olderThan time.Duration, batch int) (int64, error) {
	n, _, err := prune(ctx, pool, olderThan, batch, 0)
	return n, err
}

// prune runs at most maxStatements statements (0 = no limit) and reports whether more remain.
func prune(ctx context.Context, pool *pgxpool.Pool, olderThan time.Duration, batch, maxStatements int) (deleted int64, more bool, err error) {
	if batch < 1 {
		return 0, false, fmt.Errorf("prune outbox: batch %d must be >= 1", batch)
	}
	for i := 0; maxStatements == 0 || i < maxStatements; i++ {
		tag, err := pool.Exec(ctx, `
			DELETE FROM outbox WHERE id IN (
			    SELECT o.id FROM outbox o
			    WHERE o.created_at < now() - $1::interval AND o.failed_at IS NULL
			      AND NOT EXISTS (SELECT FROM outbox_pending p WHERE p.id = o.id)
			    LIMIT $2)`, olderThan, batch)
		if err != nil {
			return deleted, false, fmt.Errorf("prune outbox rows created before %s ago: %w", olderThan, err)
		}
		deleted += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return deleted, false, nil
		}
	}
	return deleted, true, nil
}

// RelayStop is a relay that stopped for good, and why.
type RelayStop struct {
	Owner     string
	StoppedAt time.Time
	Reason    string
}

// RelayState is who holds the lanes and which relays stopped for good.
type RelayState struct {
	LanesHeld int      // lanes under an unexpired lease
	Owners    []string // who holds them
	Stops     []RelayStop
}

// ReadRelayState reads who holds lanes and which relays stopped for good.
func ReadRelayState(ctx context.Context, pool *pgxpool.Pool) (RelayState, error) {
	var st RelayState
	err := pool.QueryRow(ctx, `
		SELECT count(*), coalesce(array_agg(DISTINCT owner), '{}') FROM outbox_relay_lanes
		WHERE lease_expires_at > now()`).Scan(&st.LanesHeld, &st.Owners)
	if err != nil {
		return st, fmt.Errorf("read outbox relay lanes: %w", err)
	}
	rows, _ := pool.Query(ctx, `SELECT owner, stopped_at, reason FROM outbox_relay_stops ORDER BY stopped_at`)
	if st.Stops, err = pgx.CollectRows(rows, pgx.RowToStructByPos[RelayStop]); err != nil {
		return st, fmt.Errorf("read outbox relay stops: %w", err)
	}
	return st, nil
}

// recordStop notes that relay owner stopped for good; clearStops forgets every such note once
// a relay works again.
func recordStop(ctx context.Context, pool *pgxpool.Pool, owner, reason string) error {
	_, err := pool.Exec(ctx, `
		INSERT INTO outbox_relay_stops (owner, reason) VALUES ($1, $2)
		ON CONFLICT (owner) DO UPDATE SET stopped_at = now(), reason = excluded.reason`, owner, reason)
	return err
}

func clearStops(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `DELETE FROM outbox_relay_stops`)
	return err
}
