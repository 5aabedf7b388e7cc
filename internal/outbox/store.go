package outbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/store"
)

// Lanes is the number of lanes (outbox.lane, outbox_relay_lanes: migrations/001_schema.sql).
const Lanes = 16

// pendingRow is one outbox row on its way to Kafka; publish fills in how it was settled.
type pendingRow struct {
	ID        int64     `db:"id"`
	EventID   string    `db:"event_id"`
	EventType string    `db:"event_type"`
	ItemID    string    `db:"item_id"`
	Payload   []byte    `db:"payload"`
	CreatedAt time.Time `db:"created_at"`
	sent      bool      // acknowledged, or rejected for good (reason)
	reason    string    // why the broker rejected it
}

func (p *pendingRow) settle(rejectedBy error) {
	p.sent = true
	if rejectedBy != nil {
		p.reason = rejectedBy.Error()
	}
}

// readPending reads in id order, each item's commit order: its next event waits for the last.
// It reads only lanes still held under tokens with more than margin of lease left by the
// database's clock: the relay's own count of its lease runs on a clock that a paused VM may
// stop, and a relay that woke up believing it still held lanes another relay took since would
// otherwise publish that relay's events too, out of their order. It leaves out the rows of the
// items in skip (the relay's parked items), so that they do not fill every read. skip goes as
// a jsonb object, whose key lookup is a binary search: `<> ALL` of an array parameter compares
// every element in turn for every row read, and a generic plan never hashes a parameter.
func readPending(ctx context.Context, pool *pgxpool.Pool, tokens []string, margin time.Duration, limit int, skip string) ([]pendingRow, error) {
	rows, _ := pool.Query(ctx, `
		WITH held AS (
		    SELECT coalesce(array_agg(lane), '{}') AS lanes FROM outbox_relay_lanes
		    WHERE lease_token = ANY ($1::uuid[]) AND lease_expires_at > now() + $2::interval)
		SELECT o.id, o.event_id, o.event_type, o.item_id, o.payload, o.created_at
		FROM held, outbox_pending p JOIN outbox o ON o.id = p.id
		WHERE p.lane = ANY (held.lanes) AND NOT ($4::jsonb ? o.item_id)
		ORDER BY p.id LIMIT $3`, tokens, margin, limit, skip)
	out, err := pgx.CollectRows(rows, pgx.RowToStructByName[pendingRow])
	if err != nil {
		return nil, fmt.Errorf("read pending outbox rows: %w", err)
	}
	return out, nil
}

// markSettled takes sent rows off the pending list only in lanes held under tokens (the others
// are unsent again: lost) and notes failure on unsent rows still pending in those lanes (a
// relay that woke from a pause to a failed call must not write its error over rows another
// relay has published since); skipping the WAL flush risks duplicates.
func markSettled(ctx context.Context, pool *pgxpool.Pool, tokens []string, rows []pendingRow, failure error) (now time.Time, lost bool, err error) {
	var ids, failed, unsent, unmarked []int64
	var reasons []string // only the failed rows': a long list here steers the planner to scan outbox
	for _, row := range rows {
		if !row.sent {
			unsent = append(unsent, row.ID)
			continue
		}
		ids = append(ids, row.ID)
		if row.reason != "" {
			failed, reasons = append(failed, row.ID), append(reasons, row.reason)
		}
	}
	var cause *string
	if failure != nil {
		cause = new(failure.Error())
	}
	err = pool.QueryRow(ctx, `
		WITH sc AS (SELECT set_config('synchronous_commit', 'off', true)),
		     held AS (SELECT lane FROM outbox_relay_lanes WHERE lease_token = ANY ($1::uuid[])),
		     done AS (
		         DELETE FROM outbox_pending p USING held
		         WHERE p.id = ANY ($2::bigint[]) AND p.lane = held.lane
		         RETURNING p.id),
		     failed AS (
		         UPDATE outbox o SET failed_at = now(), attempts = o.attempts + 1, last_error = f.err
		         FROM unnest($3::bigint[], $4::text[]) AS f(id, err)
		         WHERE o.id = f.id AND f.id IN (SELECT id FROM done)),
		     attempted AS (
		         UPDATE outbox o SET attempts = o.attempts + 1, last_error = $6
		         FROM outbox_pending p JOIN held ON held.lane = p.lane
		         WHERE $6::text IS NOT NULL AND o.id = ANY ($5::bigint[]) AND p.id = o.id)
		SELECT now(), (SELECT coalesce(array_agg(id), '{}') FROM unnest($2::bigint[]) AS u(id) WHERE id NOT IN (SELECT id FROM done))
		FROM sc`, tokens, ids, failed, reasons, unsent, cause).Scan(&now, &unmarked)
	if err != nil {
		return now, false, fmt.Errorf("mark %d outbox rows settled: %w", len(ids), err)
	}
	for i := range rows {
		if slices.Contains(unmarked, rows[i].ID) {
			rows[i].sent = false
		}
	}
	return now, len(unmarked) > 0, nil
}

// Row is an outbox row as `collector outbox list` shows it.
type Row struct {
	ID        int64
	EventID   string
	ItemID    string
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
		SELECT id, event_id::text, item_id, created_at, attempts, failed_at, last_error FROM (
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

// RetryFailed makes failed rows among ids (all when none) pending again and says how many.
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

// DeletePublished deletes, of the limit oldest published rows, those created more than
// olderThan ago, in one short statement of its own, and returns how many went: fewer than
// limit means none older are left. internal/retention is its one caller
// (kafka.outbox_retention), for daemons and cron jobs alike.
func DeletePublished(ctx context.Context, db store.Execer, olderThan time.Duration, limit int) (int64, error) {
	tag, err := db.Exec(ctx, deletePublishedSQL, olderThan.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("delete published outbox rows created before %s ago: %w", olderThan, err)
	}
	return tag.RowsAffected(), nil
}

// DeleteExpired drops unpublished rows created more than olderThan ago among the limit oldest
// unpublished ones (retention.outbox_unpublished), with their outbox_pending entries, and
// returns how many outbox rows went.
func DeleteExpired(ctx context.Context, db store.Execer, olderThan time.Duration, limit int) (int64, error) {
	tag, err := db.Exec(ctx, deleteExpiredSQL, olderThan.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("drop unpublished outbox rows created before %s ago: %w", olderThan, err)
	}
	return tag.RowsAffected(), nil
}

// deletePublishedSQL deletes, of the $2 published rows with the lowest ids below the oldest
// unpublished one, those created more than $1 seconds ago.
//
// Ids follow created_at but for a write-back's few seconds, so fewer than $2 deleted means the
// old ones are done: the statement reads $2 rows (and the failed ones among them) however long
// the outbox, where a filter on created_at found the last, short batch only by reading every
// row (a BRIN on created_at matches every range once pruning lets pages be reused). It stops
// at the oldest pending row: rows above it are published or still waiting, and without that
// bound a backlog (no relay, Kafka down for a day) was read whole at every pass to find the
// published rows beyond it, millions of rows every ten minutes. So a published row waits for
// every older one to be published or dropped (retention.outbox_unpublished, which the pruner
// applies first); with a relay running, the oldest pending row is seconds old (while every lane
// moves: one stuck alone, its Kafka partition down for hours, holds back the others' pruning
// too). An entry whose outbox row is gone bounds nothing (pendingHead) and goes. Every row
// below the bound is published or failed in the statement's snapshot: a row committed later
// with a lower id is not seen, so not deleted.
// = ANY (ARRAY(…)), not IN (…): the planner hashes an IN list and scans the whole outbox for it.
const deletePublishedSQL = `
WITH head AS MATERIALIZED (SELECT ` + pendingHead + ` AS id),
     orphans AS (DELETE FROM outbox_pending WHERE id < (SELECT id FROM head))
DELETE FROM outbox WHERE id = ANY (ARRAY(
    SELECT l.id FROM (
        SELECT o.id, o.created_at FROM outbox o
        WHERE o.id < (SELECT id FROM head) AND o.failed_at IS NULL
        ORDER BY o.id LIMIT $2) l
    WHERE l.created_at < now() - $1::float8 * interval '1 second'))`

// pendingHead is the oldest pending entry that has its outbox row, or the largest id when
// none: an entry whose row was deleted by hand is never read by a relay. The prune deletes
// such entries below the head (all entries there are of that kind, in its snapshot), and the
// backlog's age is the head's, so one of them hides neither old events nor the lag alert.
const pendingHead = `coalesce((SELECT p.id FROM outbox_pending p WHERE EXISTS (SELECT FROM outbox x WHERE x.id = p.id)
    ORDER BY p.id LIMIT 1), 9223372036854775807)`

// deleteExpiredSQL drops unpublished rows (pending or failed) created more than $1 seconds ago,
// with their outbox_pending entries, among the $2 oldest unpublished rows. Its command tag
// counts the outbox rows dropped.
//
// Candidates are the $2 lowest ids in outbox_pending and outbox_failed_idx: ids follow
// created_at but for a write-back's few seconds, so fewer than $2 dropped means the old ones
// are done, and the statement reads $2 rows however long the backlog, never the whole of it
// (= ANY (ARRAY(…)) keeps the deletes on the primary keys: a join with the CTEs is planned as
// a scan of the whole table).
//
// A relay may be publishing the same lane. Every lock is taken with SKIP LOCKED before
// anything is deleted, so the statement never waits: a row whose outbox row or pending entry
// a relay's markSettled holds is left for the next pass, and markSettled (which locks pending
// entries, then outbox rows) can wait on it for one short statement but never deadlock with
// it. An outbox row goes only when it is failed or its pending entry was deleted here, so no
// entry is left pointing at nothing and no published row is dropped as unpublished. A relay
// that read a row before it expired publishes it once and then finds its entry gone: markSettled
// reports it unmarked (as for a lane it lost), which the relay logs and nothing retries: the
// row is gone, so nothing reads it again and nothing is published twice. Consumers deduplicate
// by event_id anyway, and the snapshot stays in auction_snapshots either way.
const deleteExpiredSQL = `
WITH oldest AS MATERIALIZED (
    (SELECT id FROM outbox_pending ORDER BY id LIMIT $2)
    UNION ALL
    (SELECT id FROM outbox WHERE failed_at IS NOT NULL ORDER BY id LIMIT $2)
    ORDER BY id LIMIT $2),
     expired AS MATERIALIZED (
    SELECT o.id FROM outbox o
    WHERE o.id IN (SELECT id FROM oldest) AND o.created_at < now() - $1::float8 * interval '1 second'
    FOR UPDATE SKIP LOCKED),
     entries AS MATERIALIZED (
    SELECT p.id FROM outbox_pending p WHERE p.id IN (SELECT id FROM expired)
    FOR UPDATE SKIP LOCKED),
     unpending AS (
    DELETE FROM outbox_pending WHERE id = ANY (ARRAY(SELECT id FROM entries)) RETURNING id)
DELETE FROM outbox o
WHERE o.id = ANY (ARRAY(SELECT id FROM expired))
  AND (o.failed_at IS NOT NULL OR o.id IN (SELECT id FROM unpending))`

// recordStop notes a relay's stop for collector status until clearStops, when one works again.
// A stopped relay notes its stop again at each retry (the daemon's every minute, a standalone
// one's at each restart), so notes of an hour ago belong to processes gone since: every start
// has a new name, and a relay that stays stopped through restarts would otherwise add a line to
// collector status a day for good.
func recordStop(ctx context.Context, pool *pgxpool.Pool, owner, reason string) error {
	_, err := pool.Exec(ctx, `
		WITH gone AS (DELETE FROM outbox_relay_stops WHERE owner <> $1 AND stopped_at < now() - interval '1 hour')
		INSERT INTO outbox_relay_stops (owner, reason) VALUES ($1, $2)
		ON CONFLICT (owner) DO UPDATE SET stopped_at = now(), reason = excluded.reason`, owner, reason)
	return err
}

func clearStops(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := pool.Exec(ctx, `DELETE FROM outbox_relay_stops`)
	return err
}
