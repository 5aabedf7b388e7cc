package outbox

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
)

// Lanes is the number of lanes rows are split into (the generated column outbox.lane and the
// rows of outbox_relay_lanes, migrations/002_outbox_relay.sql).
const Lanes = 16

// pendingRow is one outbox row on its way to Kafka, with its queue entry and, once prepared,
// its message.
type pendingRow struct {
	ID        int64
	Entry     int64 // outbox_queue.entry_id
	EventID   [16]byte
	EventType []byte
	ItemID    []byte
	Payload   []byte
	CreatedAt time.Time
	Lane      int16
	// Whole: every id of the entry is in a lane the reading relay held, so the batch read all
	// of the entry's rows and settling them all may delete it. Otherwise only the settled
	// ids are taken out of it (recordOutcome).
	Whole bool

	headers []kafka.Header // prepare
	size    int64          // prepare: messageSize of msg()
}

// fetchPending reads the outbox rows of rd.lanes from the oldest queue entries that hold
// any: at most rd.limit rows, from at most rd.entries entries (0: limit), so that a relay does
// not walk far more entries than it uses (Relay.entriesFor). The last entry may be read in
// part (a statement queues up to 500 rows in one entry). Rows come in entry order, each entry
// in id order, which is the order the relay publishes in. rd.inFlight says, per entry, up
// to which id its rows are already on their way (the pipeline's batches in flight): the read
// goes on after it.
//
// Entries are walked from the head of the queue, skipping those only other relays' lanes
// still need. A run of entries of consecutive ids held whole is read with one range scan
// (headSpans); otherwise entry by entry (fetchEntries).
func fetchPending(ctx context.Context, pool *pgxpool.Pool, rd read) ([]pendingRow, error) {
	if len(rd.lanes) == 0 {
		return nil, nil
	}
	if rd.entries <= 0 || rd.entries > rd.limit {
		rd.entries = rd.limit
	}
	head, drained, err := headSpans(ctx, pool, rd)
	switch {
	case err != nil:
		return nil, fmt.Errorf("read pending outbox rows: %w", err)
	case len(head) > 0:
		return fetchSpans(ctx, pool, rd, head)
	case drained:
		// The end of every pass: reading entry by entry would only confirm it, with a
		// statement several times as costly as the listing.
		return nil, nil
	}
	return fetchEntries(ctx, pool, rd)
}

// entrySpan is a queue entry whose pending rows are the consecutive ids lo..hi, all in lanes
// the reader holds; whole when they are all the entry has.
type entrySpan struct {
	entry, lo, hi int64
	whole         bool
}

// headSpans returns the longest run of entries at the head of the queue (as fetchEntries
// would walk it) that are held whole, hold consecutive ids, and follow one another in id
// order, up to rd.limit rows: the usual queue of a relay holding every lane. Their rows are
// exactly the ids from the first span's lo to the last one's hi, which one range scan in id
// order reads, without fetchEntries' per-entry probes and sorts (about half of PostgreSQL's
// work per event). It returns nil when the first entry does not qualify, and drained when
// the lanes have nothing left to read: every entry of theirs is on its way (rd.inFlight),
// or there is none.
func headSpans(ctx context.Context, pool *pgxpool.Pool, rd read) (spans []entrySpan, drained bool, err error) {
	// Holding every lane (the usual case), every entry is the reader's: comparing each entry's
	// lanes with the held ones (up to 500 × 16 comparisons) was most of this statement's cost.
	lanes := `lanes <@ $1::smallint[]
		FROM outbox_queue
		WHERE lanes && $1::smallint[]`
	if len(rd.lanes) == Lanes { // "mine" is then always true; $1 stays in the statement
		lanes = `cardinality($1::smallint[]) = ` + strconv.Itoa(Lanes) + `
		FROM outbox_queue`
	}
	limit := rd.entries + len(rd.inFlight)
	rows, err := pool.Query(ctx, `
		SELECT entry_id, ids[1], ids[cardinality(ids)], cardinality(ids), `+lanes+`
		ORDER BY entry_id LIMIT $2`, rd.lanes, limit)
	if err != nil {
		return nil, false, err
	}
	defer rows.Close()
	upTo := make(map[int64]int64, len(rd.inFlight))
	for _, f := range rd.inFlight {
		upTo[f.entry] = f.id
	}
	total, listed := int64(0), 0
	drained = true
	var entry, first, last, n int64
	var mine bool
	for rows.Next() {
		if err := rows.Scan(&entry, &first, &last, &n, &mine); err != nil {
			return nil, false, err
		}
		listed++
		sp := entrySpan{entry: entry, lo: first, hi: last, whole: true}
		if id, ok := upTo[entry]; ok {
			sp.lo, sp.whole = max(first, id+1), false
			if sp.lo > sp.hi {
				continue // read in full already, on its way
			}
		}
		drained = false
		if !mine || last-first+1 != n || len(spans) > 0 && sp.lo != spans[len(spans)-1].hi+1 {
			break
		}
		spans = append(spans, sp)
		if total += sp.hi - sp.lo + 1; total >= int64(rd.limit) {
			if total > int64(rd.limit) {
				spans[len(spans)-1].whole = false // read in part
			}
			break
		}
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	// Entries past the limit were not listed.
	return spans, drained && listed < limit, nil
}

// fetchSpans reads the rows of spans (headSpans) with one range scan.
func fetchSpans(ctx context.Context, pool *pgxpool.Pool, rd read, spans []entrySpan) ([]pendingRow, error) {
	rows, err := pool.Query(ctx, `
		SELECT `+pendingColumns+`
		FROM outbox o WHERE o.id BETWEEN $1 AND $2 ORDER BY o.id LIMIT $3`,
		spans[0].lo, spans[len(spans)-1].hi, rd.limit)
	if err != nil {
		return nil, fmt.Errorf("read pending outbox rows: %w", err)
	}
	out, err := scanPending(rows, min(rd.expect, rd.limit), rd.mem)
	if err != nil {
		return nil, fmt.Errorf("read pending outbox rows: %w", err)
	}
	i := 0
	for j := range out {
		for out[j].ID > spans[i].hi {
			i++
		}
		out[j].Entry, out[j].Whole = spans[i].entry, spans[i].whole
	}
	return out, nil
}

// fetchEntries reads rows entry by entry. An entry whose ids are consecutive (a writer whose
// ids were not interleaved with another's) is read with a range scan of the primary key,
// which is cheaper per row than probing even when relays split the lanes and each reads past
// the others' rows; any other entry by primary-key probes of its ids.
func fetchEntries(ctx context.Context, pool *pgxpool.Pool, rd read) ([]pendingRow, error) {
	entries, upTo := make([]int64, len(rd.inFlight)), make([]int64, len(rd.inFlight))
	for i, f := range rd.inFlight {
		entries[i], upTo[i] = f.entry, f.id
	}
	rows, err := pool.Query(ctx, `
		WITH f AS (SELECT u.entry, u.upto FROM unnest($3::bigint[], $5::bigint[]) AS u(entry, upto)),
		     e AS (
		    SELECT entry_id, ids, mine, whole, after, n, sum(n) OVER (ORDER BY entry_id) AS upto,
		           ids[cardinality(ids)] - ids[1] + 1 = cardinality(ids) AS dense
		    FROM (SELECT entry_id, ids, mine, mine AND after = 0 AS whole, after,
		                 CASE WHEN mine AND after = 0 THEN cardinality(ids)
		                      ELSE (SELECT count(*) FROM unnest(ids, lanes) AS x(id, lane)
		                            WHERE x.lane = ANY ($1::smallint[]) AND x.id > after) END AS n
		          FROM (SELECT entry_id, ids, lanes, lanes <@ $1::smallint[] AS mine,
		                       coalesce((SELECT f.upto FROM f WHERE f.entry = q.entry_id), 0) AS after
		                FROM (SELECT entry_id, ids, lanes FROM outbox_queue
		                      WHERE lanes && $1::smallint[] ORDER BY entry_id LIMIT $4) q) q) q
		    WHERE n > 0)
		SELECT e.entry_id, `+pendingColumns+`, e.whole AND e.upto <= $2
		FROM e, LATERAL (
		    SELECT * FROM outbox o
		    WHERE e.dense AND o.id BETWEEN e.ids[1] AND e.ids[cardinality(e.ids)] AND o.id > e.after
		      AND (e.mine OR o.lane = ANY ($1::smallint[]))
		    UNION ALL
		    SELECT * FROM outbox o
		    WHERE NOT e.dense AND o.id = ANY (e.ids) AND (e.mine OR o.lane = ANY ($1::smallint[])) AND o.id > e.after
		    ORDER BY id) o
		WHERE e.upto - e.n < $2
		ORDER BY e.entry_id, o.id
		LIMIT $2`, rd.lanes, rd.limit, entries, rd.entries+len(rd.inFlight), upTo)
	if err != nil {
		return nil, fmt.Errorf("read pending outbox rows: %w", err)
	}
	out, err := scanPending(rows, min(rd.expect, rd.limit), rd.mem)
	if err != nil {
		return nil, fmt.Errorf("read pending outbox rows: %w", err)
	}
	return out, nil
}

// read is what fetchPending reads: rows of lanes, at most limit, walking at most entries queue
// entries besides those in flight, and in each entry of inFlight only the ids after its id.
// expect is how many rows the caller expects (the size of its last read), to size the batch.
type read struct {
	lanes                  []int16
	limit, entries, expect int
	inFlight               []rowPos
	mem                    *batchMem // where the rows go (a new one when nil)
}

// rowPos is a row of a queue entry.
type rowPos struct{ entry, id int64 }

// recordOutcome takes what a batch settled off the queue and marks it: published rows as one
// outbox_published row, failed rows with their errors. Entries the batch read whole and
// settled every row of are deleted; from the others (shared with relays holding other lanes,
// or read or published in part) the settled rows are taken out (takeOut). It all happens in
// one transaction fenced by the lane lease tokens: rows of a lane no longer held under one of
// tokens stay queued, to be published again by the lane's new holder. It returns the ids it
// marked. Outbox rows themselves are only written for failures
// (migrations/006_outbox_publish_log.sql says why).
//
// The commit does not wait for the WAL flush (synchronous_commit off): a mark lost in a
// database crash only means the rows are published again, which at-least-once allows, and it
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
	// runs whether or not the outer query reads it. $4 are settled rows of partly settled
	// entries, $5 the failed rows. The lists of rows marked are worked out here from the
	// entries that went (any not deleted were fenced out), which is cheaper than having
	// PostgreSQL return them.
	//
	// A batch of whole entries all published (the usual one) logs the ids of the entries that
	// went as they come, in entry order; merging in other rows and leaving out failed ones,
	// then sorting, doubled the statement's cost (0.9 against 0.5 ms for 2,000 ids).
	mark := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, extra []int64) (gone []int64, now time.Time, err error) {
		logged, args := `
			         SELECT $3, min(id), max(id), array_agg(id)
			         FROM (SELECT unnest(ids) AS id FROM done) s, sc`, []any{out.settled, tokens, relay}
		if len(extra) > 0 || len(out.failed) > 0 {
			logged, args = `
			         SELECT $3, min(id), max(id), array_agg(id ORDER BY id)
			         FROM (SELECT unnest(ids) AS id FROM done UNION ALL SELECT unnest($4::bigint[])) s, sc
			         WHERE id NOT IN (SELECT unnest(coalesce($5::bigint[], '{}')))`, append(args, extra, out.failed)
		}
		err = q.QueryRow(ctx, `
			WITH sc AS (SELECT set_config('synchronous_commit', 'off', true)),
			     done AS (
			         DELETE FROM outbox_queue q
			         WHERE q.entry_id = ANY ($1::bigint[]) AND q.lanes <@ `+heldLanes+`
			         RETURNING q.entry_id, q.ids),
			     logged AS (
			         INSERT INTO outbox_published (relay, first_id, last_id, ids)`+logged+`
			         HAVING count(*) > 0)
			SELECT coalesce(array_agg(entry_id), '{}'), now() FROM done`, args...).Scan(&gone, &now)
		return gone, now, err
	}
	var now time.Time
	var gone []int64
	var held []int16 // the lanes held under tokens, read when rows were taken out of entries
	if len(out.failed) == 0 && len(out.partial) == 0 {
		gone, now, err = mark(pool, nil)
	} else {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			// The lanes stay locked until commit: no relay takes one over between taking its
			// rows out of entries and logging them published.
			if err := tx.QueryRow(ctx, `
				SELECT coalesce(array_agg(lane), '{}') FROM (
				    SELECT lane FROM outbox_relay_lanes WHERE lease_token = ANY ($1::uuid[]) FOR SHARE) l`,
				tokens).Scan(&held); err != nil {
				return err
			}
			extra, err := takeOut(ctx, tx, out, held)
			if err != nil {
				return err
			}
			if gone, now, err = mark(tx, extra); err != nil {
				return err
			}
			failed = out.confirmed(out.failed, gone, held)
			if len(failed) == 0 {
				return nil
			}
			_, err = tx.Exec(ctx, `
				UPDATE outbox o SET failed_at = now(), attempts = o.attempts + 1, last_error = u.err
				FROM unnest($1::bigint[], $2::text[]) AS u(id, err)
				WHERE o.id = u.id AND o.id = ANY ($3::bigint[])`, out.failed, out.failedErrs, failed)
			return err
		})
	}
	if err != nil {
		return nil, nil, err
	}
	published = out.published
	if len(gone) != len(out.settled) || len(out.partial) > 0 {
		published = out.confirmed(out.published, gone, held)
	}
	if onPublished != nil && len(published) > 0 {
		onPublished(out.ages(published, now))
	}
	return published, failed, nil
}

// takeOut removes the settled rows of the entries a batch did not delete whole (shared with
// lanes held elsewhere, or stopped in the middle of) from those entries, rows of the held
// lanes only, deletes entries left empty, and returns the ids it took out. Relays sharing an
// entry each take out their own rows; the row lock makes the later one recompute from the
// earlier one's result, so none of them puts back what another took out.
func takeOut(ctx context.Context, tx pgx.Tx, out outcome, held []int16) ([]int64, error) {
	if len(out.partial) == 0 {
		return nil, nil
	}
	var entries, ids, taken []int64
	for entry, settled := range out.partial {
		for _, id := range settled {
			entries, ids = append(entries, entry), append(ids, id)
			if slices.Contains(held, out.ref(id).lane) {
				taken = append(taken, id)
			}
		}
	}
	_, err := rewriteEntries(ctx, tx, entries, `
		WITH d AS (SELECT u.entry, array_agg(u.id) AS ids FROM unnest($1::bigint[], $2::bigint[]) AS u(entry, id) GROUP BY u.entry)
		UPDATE outbox_queue q SET `+keepIDs(`NOT (x.lane = ANY ($3::smallint[]) AND x.id = ANY (d.ids))`)+`
		FROM d WHERE q.entry_id = d.entry`, entries, ids, held)
	return taken, err
}

// keepIDs is the SET clause that keeps in entry q the ids, and their lanes in step, for which
// cond holds of x.id and x.lane.
func keepIDs(cond string) string {
	rest := `FROM unnest(q.ids, q.lanes) AS x(id, lane) WHERE ` + cond + ` ORDER BY x.id`
	return `ids = ARRAY(SELECT x.id ` + rest + `), lanes = ARRAY(SELECT x.lane ` + rest + `)`
}

// rewriteEntries runs update (which takes ids out of some of entries) and deletes the entries
// it leaves empty, having locked entries in entry order: relays sharing entries, and
// ForgetDeleted, change several in one transaction, and taking the locks in one order keeps
// them from deadlocking, which would fail a mark and send its rows again. It returns how many
// entries update changed.
func rewriteEntries(ctx context.Context, tx pgx.Tx, entries []int64, update string, args ...any) (int64, error) {
	if _, err := tx.Exec(ctx, `SELECT FROM outbox_queue WHERE entry_id = ANY ($1::bigint[]) ORDER BY entry_id FOR UPDATE`, entries); err != nil {
		return 0, err
	}
	tag, err := tx.Exec(ctx, update, args...)
	if err != nil {
		return 0, err
	}
	if _, err := tx.Exec(ctx, `DELETE FROM outbox_queue WHERE entry_id = ANY ($1::bigint[]) AND cardinality(ids) = 0`, entries); err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}

// heldLanes is the lanes held under the lease tokens $2, as an array: matching entries against
// it keeps the plan on the queue's primary key.
const heldLanes = `ARRAY(SELECT lane FROM outbox_relay_lanes WHERE lease_token = ANY ($2::uuid[]))`

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
	const cols = `SELECT id, event_id::text, event_type, item_id, lane, created_at, attempts, failed_at, last_error FROM outbox`
	q := cols + ` WHERE id = ANY (ARRAY(
		SELECT u.id FROM (SELECT ids FROM outbox_queue ORDER BY entry_id LIMIT $1) q, unnest(q.ids) AS u(id)
		ORDER BY u.id LIMIT $1)) ORDER BY id`
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
		WITH pending AS (SELECT coalesce(sum(cardinality(ids)), 0)::bigint AS n, min(ids[1]) AS oldest FROM outbox_queue)
		SELECT pending.n,
		       (SELECT count(*) FROM outbox WHERE failed_at IS NOT NULL),
		       (SELECT count(*) FROM outbox WHERE failed_at IS NULL) - pending.n,
		       (SELECT o.created_at FROM outbox o WHERE o.id = pending.oldest)
		FROM pending`).Scan(&c.Pending, &c.Failed, &c.Published, &c.OldestPending)
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
	n, err := requeueFailed(ctx, pool, ids)
	if err != nil {
		return 0, fmt.Errorf("retry failed outbox rows %v: %w", ids, err)
	}
	return n, nil
}

// RetryAllFailed puts every failed row back in line for the relay.
func RetryAllFailed(ctx context.Context, pool *pgxpool.Pool) (int64, error) {
	n, err := requeueFailed(ctx, pool, nil)
	if err != nil {
		return 0, fmt.Errorf("retry all failed outbox rows: %w", err)
	}
	return n, nil
}

// requeueFailed clears failed_at of the failed rows among ids (every failed row when ids is
// nil) and queues them again (new entries, after everything queued so far), waking a
// following relay.
func requeueFailed(ctx context.Context, pool *pgxpool.Pool, ids []int64) (int64, error) {
	var n int64
	err := pool.QueryRow(ctx, `
		WITH r AS (
		    UPDATE outbox SET failed_at = NULL
		    WHERE failed_at IS NOT NULL AND ($1::bigint[] IS NULL OR id = ANY ($1::bigint[]))
		    RETURNING id, lane),
		     q AS (SELECT outbox_queue_add(array_agg(id), array_agg(lane)), pg_notify('outbox_pending', '') FROM r)
		SELECT count(*) FROM r, (SELECT count(*) FROM q) AS run`, ids).Scan(&n)
	return n, err
}

// ForgetDeleted takes the ids of outbox rows that no longer exist out of the relay's queue,
// deletes the entries it empties, and returns how many entries it changed. Rows are deleted
// while pending only by hand or by `collector purge:synthetic` (pruning keeps them); without
// this their ids would count as pending for ever, and an entry holding only such ids would
// never be published and deleted. Each entry is recomputed from its current version, so a
// relay taking its rows out of the same entry meanwhile loses nothing.
func ForgetDeleted(ctx context.Context, db interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}) (int64, error) {
	var changed int64
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `
			SELECT DISTINCT q.entry_id FROM outbox_queue q, unnest(q.ids) AS u(id)
			WHERE NOT EXISTS (SELECT FROM outbox o WHERE o.id = u.id)`)
		if err != nil {
			return err
		}
		entries, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || len(entries) == 0 {
			return err
		}
		changed, err = rewriteEntries(ctx, tx, entries, `
			UPDATE outbox_queue q SET `+keepIDs(`EXISTS (SELECT FROM outbox o WHERE o.id = x.id)`)+`
			WHERE q.entry_id = ANY ($1::bigint[])`, entries)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("take deleted outbox rows out of the relay queue: %w", err)
	}
	return changed, nil
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
