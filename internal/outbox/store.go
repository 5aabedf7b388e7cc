package outbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
)

// Lanes is the number of lanes rows are split into (the generated column outbox.lane and the
// rows of outbox_relay_lanes, migrations/002_outbox_relay.sql).
const Lanes = 16

// pendingRow is one outbox row on its way to Kafka, with its message once prepared.
type pendingRow struct {
	ID        int64
	EventID   [16]byte // a uuid
	EventType string
	ItemID    string
	Payload   []byte
	CreatedAt time.Time
	Lane      int16

	msg kafka.Message
}

// fetchPending reads the oldest pending rows of the given lanes: for every lane a prefix of
// its pending rows in id order, at most limit rows in all. exclude lists rows already on their
// way (the pipeline's batches in flight), left out through a hashed NOT IN.
//
// The rows themselves are read by primary key, a plan that does not depend on table
// statistics (which lag behind on queue tables). How the ids are found depends on how many
// lanes the relay holds:
//   - most of them (one relay, the usual case): one walk of outbox_pending's primary key in
//     id order, skipping the few rows of lanes held elsewhere. Ten times cheaper than a walk
//     per lane, which pays an index descent and a sort for every lane.
//   - a few: a walk of each lane's range of the (lane, id) index, perLane ids at most, so the
//     cost stays bounded however large the backlog in other relays' lanes is.
func fetchPending(ctx context.Context, pool *pgxpool.Pool, lanes []int16, limit int, exclude []int64) ([]pendingRow, error) {
	if len(lanes) == 0 {
		return nil, nil
	}
	var rows pgx.Rows
	var err error
	if len(lanes) >= Lanes/2 {
		rows, err = pool.Query(ctx, `
			SELECT o.id, o.event_id, o.event_type, o.item_id, o.payload::text, o.created_at, o.lane
			FROM outbox o
			WHERE o.id = ANY (ARRAY(
				SELECT p.id FROM outbox_pending p
				WHERE p.lane = ANY ($1::smallint[]) AND p.id NOT IN (SELECT unnest($3::bigint[]))
				ORDER BY p.id LIMIT $2))
			ORDER BY o.id`, lanes, limit, exclude)
	} else {
		// Rows are spread evenly over lanes, so twice a fair share per lane fills a batch without
		// reading far more index entries than it uses; a backlog in few lanes gets smaller batches.
		perLane := min(limit, max(64, 2*limit/len(lanes)))
		rows, err = pool.Query(ctx, `
			SELECT o.id, o.event_id, o.event_type, o.item_id, o.payload::text, o.created_at, o.lane
			FROM outbox o
			WHERE o.id = ANY (ARRAY(
				SELECT p.id
				FROM unnest($1::smallint[]) AS l(lane),
				LATERAL (SELECT id FROM outbox_pending
				         WHERE lane = l.lane AND id NOT IN (SELECT unnest($4::bigint[]))
				         ORDER BY id LIMIT $3) p
				ORDER BY p.id LIMIT $2))
			ORDER BY o.id`, lanes, limit, perLane, exclude)
	}
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

// recordOutcome takes rows off the queue and marks them published (one outbox_published row
// for the batch) or failed (with their errors), in one transaction fenced by the lane lease
// tokens: a row whose lane is no longer held under one of tokens is left alone, to be
// published again by the lane's new holder. It returns the ids it marked. Published rows
// themselves are not rewritten (migrations/006_outbox_publish_log.sql says why).
//
// The commit does not wait for the WAL flush (synchronous_commit off): a mark lost in a
// database crash only means the row is published again, which at-least-once allows, and it
// saves a disk flush per batch.
//
// onPublished, when set, gets each marked row's age in seconds by the database clock (created
// to published): the publish latency.
func recordOutcome(ctx context.Context, pool *pgxpool.Pool, out outcome, tokens []string, relay string, onPublished func(ages []float64)) (published, failed []int64, err error) {
	if len(out.published) == 0 && len(out.failed) == 0 {
		return nil, nil, nil
	}
	defer func() {
		if err != nil {
			err = fmt.Errorf("mark %d outbox rows published, %d failed: %w", len(out.published), len(out.failed), err)
		}
	}()
	// The common case is one statement, one round trip; set_config(..., true) is SET LOCAL for
	// the statement's own transaction, and sc is joined so that it runs. A data-modifying WITH
	// runs whether or not the outer query reads it.
	markPublished := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) ([]int64, error) {
		var ids []int64
		var now time.Time
		err := q.QueryRow(ctx, `
			WITH sc AS (SELECT set_config('synchronous_commit', 'off', true)),
			     done AS (`+dequeue+`),
			     logged AS (
			         INSERT INTO outbox_published (relay, first_id, last_id, ids)
			         SELECT $3, min(id), max(id), array_agg(id ORDER BY id) FROM done, sc
			         HAVING count(*) > 0)
			SELECT coalesce(array_agg(id), '{}'), now() FROM done`, out.published, tokens, relay).Scan(&ids, &now)
		if err == nil && onPublished != nil && len(ids) > 0 {
			onPublished(out.ages(ids, now))
		}
		return ids, err
	}
	if len(out.failed) == 0 {
		published, err = markPublished(pool)
		return published, nil, err
	}
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if len(out.published) > 0 {
			if published, err = markPublished(tx); err != nil {
				return err
			}
		}
		rows, _ := tx.Query(ctx, `
			WITH done AS (`+dequeue+`)
			UPDATE outbox o SET failed_at = now(), attempts = o.attempts + 1, last_error = u.err
			FROM unnest($1::bigint[], $3::text[]) AS u(id, err)
			WHERE o.id = ANY (ARRAY(SELECT id FROM done)) AND u.id = o.id
			RETURNING o.id`, out.failed, tokens, out.failedErrs)
		failed, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		return err
	})
	return published, failed, err
}

// dequeue deletes rows $1 from the queue where their lane is held under one of tokens $2.
// The held lanes are folded into an array first so that PostgreSQL finds the rows through the
// primary key (one probe per id); a join on the lanes made it walk each lane's whole index
// range once per lane instead, five times slower at a 20k-row backlog.
const dequeue = `
	DELETE FROM outbox_pending p
	WHERE p.id = ANY ($1::bigint[])
	  AND p.lane = ANY (ARRAY(SELECT lane FROM outbox_relay_lanes WHERE lease_token = ANY ($2::uuid[])))
	RETURNING p.id`

// recordAttempt notes a failed publish of rows that stay pending (broker down, timeout), so
// `collector outbox list` shows why they wait.
func recordAttempt(ctx context.Context, pool *pgxpool.Pool, ids []int64, cause string) error {
	_, err := pool.Exec(ctx, `
		UPDATE outbox SET attempts = attempts + 1, last_error = $2
		WHERE id = ANY (ARRAY(SELECT id FROM outbox_pending WHERE id = ANY ($1::bigint[])))`, ids, cause)
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
	const cols = `SELECT id, event_id::text, event_type, item_id, lane, created_at, attempts, failed_at, last_error FROM outbox`
	q := cols + ` WHERE id = ANY (ARRAY(SELECT id FROM outbox_pending ORDER BY id LIMIT $1)) ORDER BY id`
	if opts.FailedOnly {
		q = cols + ` WHERE failed_at IS NOT NULL ORDER BY id LIMIT $1`
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
		SELECT (SELECT count(*) FROM outbox_pending),
		       (SELECT count(*) FROM outbox WHERE failed_at IS NOT NULL),
		       (SELECT count(*) FROM outbox o
		        WHERE o.failed_at IS NULL AND NOT EXISTS (SELECT FROM outbox_pending p WHERE p.id = o.id)),
		       (SELECT o.created_at FROM outbox o WHERE o.id = (SELECT min(id) FROM outbox_pending))`).Scan(&c.Pending, &c.Failed, &c.Published, &c.OldestPending)
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
	tag, err := pool.Exec(ctx, `
		WITH r AS (UPDATE outbox SET failed_at = NULL WHERE id = ANY ($1::bigint[]) AND failed_at IS NOT NULL RETURNING id, lane)
		INSERT INTO outbox_pending (id, lane) SELECT id, lane FROM r`, ids)
	if err != nil {
		return 0, fmt.Errorf("retry failed outbox rows %v: %w", ids, err)
	}
	return tag.RowsAffected(), nil
}

// RetryAllFailed puts every failed row back in line for the relay.
func RetryAllFailed(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	tag, err := pool.Exec(ctx, `
		WITH r AS (UPDATE outbox SET failed_at = NULL WHERE failed_at IS NOT NULL RETURNING id, lane)
		INSERT INTO outbox_pending (id, lane) SELECT id, lane FROM r`)
	if err != nil {
		return 0, fmt.Errorf("retry all failed outbox rows: %w", err)
	}
	return tag.RowsAffected(), nil
}

// Prune deletes rows published more than olderThan ago, about batch rows per statement, until
// none are left; unpublished and failed rows are never touched. Each statement commits on its
// own, so pruning never blocks the relay for long.
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
		// The oldest expired publish batches while the rows before them number fewer than
		// batch (always at least one), with the outbox rows they list: a published row is in
		// exactly one batch and never becomes pending or failed again.
		var rows, batches int64
		err := pool.QueryRow(ctx, `
			WITH picked AS (
			    SELECT batch_id FROM (
			        SELECT batch_id, sum(cardinality(ids)) OVER (ORDER BY published_at, batch_id) - cardinality(ids) AS before
			        FROM outbox_published
			        WHERE published_at < now() - $1::interval
			        ORDER BY published_at, batch_id
			        LIMIT $2) c
			    WHERE before < $2),
			gone AS (
			    DELETE FROM outbox_published b USING picked WHERE b.batch_id = picked.batch_id
			    RETURNING b.ids),
			rows AS (
			    DELETE FROM outbox WHERE id IN (SELECT unnest(ids) FROM gone)
			    RETURNING 1)
			SELECT (SELECT count(*) FROM rows), (SELECT count(*) FROM gone)`, olderThan, batch).Scan(&rows, &batches)
		if err != nil {
			return deleted, false, fmt.Errorf("prune outbox rows published before %s ago: %w", olderThan, err)
		}
		deleted += rows
		if batches == 0 {
			return deleted, false, nil
		}
	}
	return deleted, true, nil
}
