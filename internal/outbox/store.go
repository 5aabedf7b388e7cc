package outbox

import (
	"context"
	"errors"
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
	ID        int64
	EventID   string
	EventType string
	ItemID    string
	Payload   []byte
	CreatedAt time.Time
	Lane      int16
}

// fetchPending reads the oldest unpublished, unfailed rows of the given lanes, in id order.
// Each lane is read through its own index range (at most limit ids each), so the cost stays
// bounded however large the backlog is and whoever holds the other lanes.
func fetchPending(ctx context.Context, pool *pgxpool.Pool, lanes []int16, limit int) ([]pendingRow, error) {
	rows, err := pool.Query(ctx, `
		SELECT o.id, o.event_id::text, o.event_type, o.item_id, o.payload::text, o.created_at, o.lane
		FROM outbox o
		WHERE o.id IN (
			SELECT p.id
			FROM unnest($1::smallint[]) AS l(lane),
			LATERAL (SELECT id FROM outbox
			         WHERE lane = l.lane AND published_at IS NULL AND failed_at IS NULL
			         ORDER BY id LIMIT $2) p
			ORDER BY p.id LIMIT $2)
		AND o.published_at IS NULL AND o.failed_at IS NULL
		ORDER BY o.id`, lanes, limit)
	if err != nil {
		return nil, fmt.Errorf("read pending outbox rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (pendingRow, error) {
		var p pendingRow
		err := r.Scan(&p.ID, &p.EventID, &p.EventType, &p.ItemID, &p.Payload, &p.CreatedAt, &p.Lane)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("read pending outbox rows: %w", err)
	}
	return out, nil
}

// recordOutcome marks rows published (err nil) or failed (err set) in one statement, fenced
// by the lane lease tokens: a row whose lane is no longer held under one of tokens is left
// alone, to be published again by the lane's new holder. It returns the ids it marked.
func recordOutcome(ctx context.Context, pool *pgxpool.Pool, ids []int64, errs []*string, tokens []string) (published, failed []int64, err error) {
	if len(ids) == 0 {
		return nil, nil, nil
	}
	rows, err := pool.Query(ctx, `
		UPDATE outbox o
		SET published_at = CASE WHEN u.err IS NULL THEN now() END,
		    failed_at    = CASE WHEN u.err IS NOT NULL THEN now() END,
		    last_error   = COALESCE(u.err, o.last_error),
		    attempts     = o.attempts + 1
		FROM unnest($1::bigint[], $2::text[]) AS u(id, err), outbox_relay_lanes l
		WHERE o.id = u.id AND o.published_at IS NULL AND o.failed_at IS NULL
		  AND l.lane = o.lane AND l.lease_token = ANY($3::uuid[])
		RETURNING o.id, u.err IS NOT NULL`, ids, errs, tokens)
	if err != nil {
		return nil, nil, fmt.Errorf("mark %d outbox rows: %w", len(ids), err)
	}
	var id int64
	var isFailed bool
	_, err = pgx.ForEachRow(rows, []any{&id, &isFailed}, func() error {
		if isFailed {
			failed = append(failed, id)
		} else {
			published = append(published, id)
		}
		return nil
	})
	if err != nil {
		return nil, nil, fmt.Errorf("mark %d outbox rows: %w", len(ids), err)
	}
	return published, failed, nil
}

// recordAttempt notes a failed publish of rows that stay pending (broker down, timeout), so
// `collector outbox list` shows why they wait.
func recordAttempt(ctx context.Context, pool *pgxpool.Pool, ids []int64, cause string) error {
	_, err := pool.Exec(ctx, `
		UPDATE outbox SET attempts = attempts + 1, last_error = $2
		WHERE id = ANY($1::bigint[]) AND published_at IS NULL`, ids, cause)
	if err != nil {
		return fmt.Errorf("record failed publish of %d outbox rows: %w", len(ids), err)
	}
	return nil
}

// Row is an outbox row as `collector outbox list` shows it.
type Row struct {
	ID          int64
	EventID     string
	EventType   string
	ItemID      string
	Lane        int16
	CreatedAt   time.Time
	Attempts    int
	PublishedAt *time.Time
	FailedAt    *time.Time
	LastError   *string
}

// ListOptions selects rows for List.
type ListOptions struct {
	FailedOnly bool // only rows marked failed; otherwise every row not yet published
	Limit      int  // default 100
}

// List returns unpublished rows (pending and failed), oldest first.
func List(ctx context.Context, pool *pgxpool.Pool, opts ListOptions) ([]Row, error) {
	if opts.Limit <= 0 {
		opts.Limit = 100
	}
	q := `SELECT id, event_id::text, event_type, item_id, lane, created_at, attempts, published_at, failed_at, last_error
		FROM outbox WHERE published_at IS NULL AND failed_at IS NULL
		ORDER BY id LIMIT $1`
	if opts.FailedOnly {
		q = `SELECT id, event_id::text, event_type, item_id, lane, created_at, attempts, published_at, failed_at, last_error
			FROM outbox WHERE failed_at IS NOT NULL
			ORDER BY id LIMIT $1`
	}
	rows, err := pool.Query(ctx, q, opts.Limit)
	if err != nil {
		return nil, fmt.Errorf("list outbox rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Row])
	if err != nil {
		return nil, fmt.Errorf("list outbox rows: %w", err)
	}
	if !opts.FailedOnly && len(out) < opts.Limit {
		failed, err := List(ctx, pool, ListOptions{FailedOnly: true, Limit: opts.Limit - len(out)})
		if err != nil {
			return nil, err
		}
		out = append(out, failed...)
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

// Count counts outbox rows by state (for `collector outbox list` and metrics).
func Count(ctx context.Context, pool *pgxpool.Pool) (Counts, error) {
	var c Counts
	err := pool.QueryRow(ctx, `
		SELECT count(*) FILTER (WHERE published_at IS NULL AND failed_at IS NULL),
		       count(*) FILTER (WHERE failed_at IS NOT NULL),
		       count(*) FILTER (WHERE published_at IS NOT NULL),
		       min(created_at) FILTER (WHERE published_at IS NULL AND failed_at IS NULL)
		FROM outbox`).Scan(&c.Pending, &c.Failed, &c.Published, &c.OldestPending)
	if err != nil {
		return Counts{}, fmt.Errorf("count outbox rows: %w", err)
	}
	return c, nil
}

// RetryFailed puts the given failed rows back in line for the relay; rows that are not
// failed are ignored. Returns how many rows were reset.
func RetryFailed(ctx context.Context, pool *pgxpool.Pool, ids []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, errors.New("retry failed outbox rows: no ids given")
	}
	tag, err := pool.Exec(ctx, `UPDATE outbox SET failed_at = NULL WHERE id = ANY($1::bigint[]) AND failed_at IS NOT NULL`, ids)
	if err != nil {
		return 0, fmt.Errorf("retry failed outbox rows %v: %w", ids, err)
	}
	return tag.RowsAffected(), nil
}

// RetryAllFailed puts every failed row back in line for the relay.
func RetryAllFailed(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	tag, err := pool.Exec(ctx, `UPDATE outbox SET failed_at = NULL WHERE failed_at IS NOT NULL`)
	if err != nil {
		return 0, fmt.Errorf("retry all failed outbox rows: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Prune deletes rows published more than olderThan ago, batch rows per statement, until none
// are left; unpublished and failed rows are never touched. Each statement commits on its own
// and skips rows another session has locked, so pruning never blocks the relay for long.
func Prune(ctx context.Context, pool *pgxpool.Pool, olderThan time.Duration, batch int) (int64, error) {
	n, _, err := prune(ctx, pool, olderThan, batch, 0)
	return n, err
}

// prune deletes at most maxStatements batches (0 = no limit) and reports whether more remain.
func prune(ctx context.Context, pool *pgxpool.Pool, olderThan time.Duration, batch, maxStatements int) (deleted int64, more bool, err error) {
	if batch < 1 {
		return 0, false, fmt.Errorf("prune outbox: batch %d must be >= 1", batch)
	}
	for i := 0; maxStatements == 0 || i < maxStatements; i++ {
		tag, err := pool.Exec(ctx, `
			DELETE FROM outbox WHERE id IN (
				SELECT id FROM outbox
				WHERE published_at < now() - $1::interval
				ORDER BY published_at
				LIMIT $2
				FOR UPDATE SKIP LOCKED)`, olderThan, batch)
		if err != nil {
			return deleted, false, fmt.Errorf("prune outbox rows published before %s ago: %w", olderThan, err)
		}
		deleted += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return deleted, false, nil
		}
	}
	return deleted, true, nil
}
