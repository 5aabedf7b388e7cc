package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/tiers"
)

// walSize is the WAL section's workload: items of the realistic market, all HOT_1M, collected
// in real time for window, warm after their first collections (which store each item's backlog
// of past sales).
// Items first fall due again half an interval after their first collection, so a window
// shorter than a minute sees only some of them once. changesOnly skips history.mode every (quick
// mode, to stay within a minute).
type walSize struct {
	items        int
	warm, window time.Duration
	changesOnly  bool
}

const walSeed = 23

// walCounts is what the WAL records of one database added up to over a window: per resource
// manager and record type, per relation, and in all.
type walCounts struct {
	bytes, fpi, records int64
	byKind              map[string]int64 // "Heap/HOT_UPDATE" → bytes
	byRel               map[string]int64 // relation (or "no relation": commits) → bytes
	raw                 int64            // pg_current_wal_lsn difference: the whole server's WAL
	checkpoints         int64            // the server's checkpoints in the window
}

// benchWAL collects the workload (every item HOT, realistic market) in both history
// modes, each in a fresh database, and reports the WAL a collection writes.
func benchWAL(ctx context.Context, e *env, sz sizes, rep *report) error {
	w := sz.wal
	res := map[string]walResult{}
	modes := []string{config.HistoryChanges, config.HistoryEvery}
	if w.changesOnly {
		modes = modes[:1]
	}
	for _, mode := range modes {
		r, err := walRun(ctx, e, w, mode)
		if err != nil {
			return fmt.Errorf("history.mode %s: %w", mode, err)
		}
		res[mode] = r
	}
	how := fmt.Sprintf("%d items of `collector-dev sim --market realistic` (seed %d), all HOT_1M, collected by in-process collect-due passes (dispatcher.FromConfig(config.Default()) with history.mode set, concurrency 16, shadow checks off; the relay not running) in real time: one pass collects every item (first collections), then passes run whenever an item is due, measured for %s starting %s after the first pass; WAL: the records pg_walinspect's pg_get_wal_records_info reads between the window's ends that touch the database's relations or belong to its transactions (their commits), each counted MAXALIGNed as it lies in the WAL, ÷ collections in the window (dispatcher pass summaries). A temporary physical replication slot keeps the segments until read; no CHECKPOINT forced (but every CREATE DATABASE on the server checkpoints), so full-page images count as they fall",
		w.items, walSeed, w.window, w.warm)
	ch, ev := res[config.HistoryChanges], res[config.HistoryEvery]
	if w.changesOnly {
		rep.note("wal: history.mode every is not run in BENCH_QUICK mode (its figures read 0)")
	}
	rep.add(fmt.Sprintf("WAL per collection without full-page images, history.mode changes / every, %d HOT items", w.items),
		fmt.Sprintf("%.0f / %.0f bytes", ch.per(ch.wal.bytes-ch.wal.fpi), ev.per(ev.wal.bytes-ev.wal.fpi)),
		"the same runs as the next row, less the full-page images: what the collections themselves log, whatever the server's checkpoints (each of which makes the next change of every page log it whole)")
	rep.add(fmt.Sprintf("WAL per collection, history.mode changes / every, %d HOT items", w.items),
		fmt.Sprintf("%.0f / %.0f bytes (%d / %d collections; full-page images %.0f / %.0f bytes of it, %d / %d checkpoints in the window)", ch.perCollection(), ev.perCollection(),
			ch.collected, ev.collected, ch.per(ch.wal.fpi), ev.per(ev.wal.fpi), ch.wal.checkpoints, ev.wal.checkpoints),
		"target ≤ 700 bytes in changes mode. "+how)
	for _, m := range []struct {
		mode string
		r    walResult
	}{{config.HistoryChanges, ch}, {config.HistoryEvery, ev}} {
		if _, ok := res[m.mode]; !ok {
			continue
		}
		rep.add("WAL per collection by relation, history.mode "+m.mode, m.r.top(m.r.wal.byRel, 8),
			"the same run; bytes of WAL records ÷ collections, by the relation of the record's first block (partitions and their indexes by their own names; no relation: commit records)")
		rep.add("WAL per collection by record type, history.mode "+m.mode, m.r.top(m.r.wal.byKind, 8),
			fmt.Sprintf("the same run; pg_walinspect resource manager / record type. Whole server's pg_current_wal_lsn difference over the window (other databases' work included): %.0f bytes a collection", m.r.per(m.r.wal.raw)))
	}
	return nil
}

type walResult struct {
	collected int64
	wal       walCounts
}

func (r walResult) per(b int64) float64    { return float64(b) / float64(max(r.collected, 1)) }
func (r walResult) perCollection() float64 { return r.per(r.wal.bytes) }

// top lists the n largest entries of m per collection, the rest summed.
func (r walResult) top(m map[string]int64, n int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b string) int { return cmp.Or(cmp.Compare(m[b], m[a]), cmp.Compare(a, b)) })
	var parts []string
	var rest int64
	for i, k := range keys {
		if i < n {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, r.per(m[k])))
		} else {
			rest += m[k]
		}
	}
	if rest > 0 {
		parts = append(parts, fmt.Sprintf("other %.0f", r.per(rest)))
	}
	return strings.Join(parts, ", ")
}

// walRun collects the workload in a fresh database in one history mode and reads its WAL.
func walRun(ctx context.Context, e *env, w walSize, mode string) (walResult, error) {
	var res walResult
	db := "bench_wal_" + mode
	u, err := e.freshDB(ctx, db, true)
	if err != nil {
		return res, err
	}
	defer e.dropDB(ctx, db)
	pool, err := openPool(ctx, u, 8)
	if err != nil {
		return res, err
	}
	defer pool.Close()
	if err := createPartitions(ctx, pool); err != nil {
		return res, err
	}
	var now atomic.Int64
	now.Store(time.Now().Unix())
	rs, err := newRealisticSim(w.items, walSeed, &now)
	if err != nil {
		return res, err
	}
	defer rs.close()
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at)
		SELECT id, 'item ' || id, $2, now() FROM unnest($1::text[]) AS id`, rs.ids, string(tiers.Hot)); err != nil {
		return res, err
	}
	cfg := config.Default()
	cfg.History.Mode = mode
	dc := dispatcher.FromConfig(cfg)
	dc.Concurrency, dc.Owner, dc.ShadowFraction = 16, db, 0
	disp, err := newDispatcher(pool, rs.client, dc)
	if err != nil {
		return res, err
	}
	pass := func() (int, error) {
		now.Store(time.Now().Unix())
		s, err := disp.RunOnce(ctx)
		return s.Collected, err
	}
	if n, err := pass(); err != nil || n != w.items {
		return res, fmt.Errorf("first pass collected %d of %d: %v", n, w.items, err)
	}
	warm := time.Now().Add(w.warm)
	for time.Now().Before(warm) {
		n, err := pass()
		if err != nil {
			return res, err
		}
		if n == 0 {
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	r, err := newWALReader(ctx, pool)
	if err != nil {
		return res, err
	}
	defer r.close()
	end := time.Now().Add(w.window)
	nextRead := time.Now().Add(5 * time.Second)
	for time.Now().Before(end) {
		n, err := pass()
		if err != nil {
			return res, err
		}
		res.collected += int64(n)
		if time.Now().After(nextRead) {
			if err := r.read(ctx); err != nil {
				return res, err
			}
			nextRead = time.Now().Add(5 * time.Second)
		}
		if n == 0 {
			select {
			case <-ctx.Done():
				return res, ctx.Err()
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	if err := r.read(ctx); err != nil {
		return res, err
	}
	res.wal = r.c
	return res, nil
}

// walReader sums the WAL records of one database, reading from where it last stopped.
type walReader struct {
	pool         *pgxpool.Pool
	slot         *pgxpool.Conn
	db           uint32
	from         string
	start        string
	xids         []string // transactions of the database seen in the last read: their commits may follow
	checkpoints0 int64
	names        map[uint32]string
	c            walCounts
}

func newWALReader(ctx context.Context, pool *pgxpool.Pool) (*walReader, error) {
	r := &walReader{pool: pool, c: walCounts{byKind: map[string]int64{}, byRel: map[string]int64{}}}
	if _, err := pool.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_walinspect`); err != nil {
		return nil, fmt.Errorf("pg_walinspect: %w", err)
	}
	// Every CREATE DATABASE on the server checkpoints, and a checkpoint recycles the segments
	// behind it: a temporary slot (gone with its session) keeps the window's WAL until read. The
	// window starts at the WAL's end after the slot exists, not at the slot's own start: a
	// physical slot reserves from the last checkpoint's redo point, which on a quiet server lies
	// before the seeding and the first collections (their ~10 MB then counted as the window's).
	slot, err := pool.Acquire(ctx)
	if err != nil {
		return nil, err
	}
	r.slot = slot
	if err := slot.QueryRow(ctx, `
		SELECT d.oid
		FROM pg_database d, pg_create_physical_replication_slot('bench_wal_' || pg_backend_pid(), true, true) AS s
		WHERE d.datname = current_database()`).Scan(&r.db); err != nil {
		slot.Release()
		return nil, fmt.Errorf("wal start: %w", err)
	}
	if err := slot.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&r.from); err != nil {
		slot.Release()
		return nil, fmt.Errorf("wal start: %w", err)
	}
	r.start = r.from
	if err := pool.QueryRow(ctx, `SELECT checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`).Scan(&r.checkpoints0); err != nil {
		slot.Release()
		return nil, err
	}
	return r, nil
}

// close drops the slot with its session.
func (r *walReader) close() { r.slot.Hijack().Close(context.Background()) }

// read adds the records from the last read up to now.
func (r *walReader) read(ctx context.Context) error {
	var to string
	if err := r.pool.QueryRow(ctx, `SELECT pg_current_wal_flush_lsn()::text`).Scan(&to); err != nil {
		return err
	}
	rows, err := r.pool.Query(ctx, `
		WITH w AS (
			SELECT xid::text AS xid, resource_manager || '/' || split_part(record_type, ' ', 1) AS kind,
			       (record_length + 7) / 8 * 8 AS bytes, fpi_length,
			       substring(block_ref FROM 'rel \d+/(\d+)/')::oid AS db,
			       substring(block_ref FROM 'rel \d+/\d+/(\d+)')::oid AS rfn
			FROM pg_get_wal_records_info($1::pg_lsn, $2::pg_lsn)
		), ours AS (
			SELECT DISTINCT xid FROM w WHERE db = $3 AND xid <> '0'
			UNION SELECT unnest($4::text[])
		)
		SELECT kind, coalesce(rfn, 0), count(*), sum(bytes), sum(fpi_length),
		       coalesce(array_agg(DISTINCT xid) FILTER (WHERE xid <> '0'), '{}')
		FROM w
		WHERE db = $3 OR (db IS NULL AND xid IN (SELECT xid FROM ours))
		GROUP BY 1, 2`, r.from, to, r.db, r.xids)
	if err != nil {
		return fmt.Errorf("read wal: %w", err)
	}
	var kind string
	var rfn uint32
	var n, bytes, fpi int64
	var xids []string
	r.xids = r.xids[:0]
	_, err = pgx.ForEachRow(rows, []any{&kind, &rfn, &n, &bytes, &fpi, &xids}, func() error {
		r.c.records += n
		r.c.bytes += bytes
		r.c.fpi += fpi
		// Full-page images come with the first change of a page after a checkpoint: how many
		// fall in the window depends on the server's checkpoints, so they are their own entry.
		r.c.byKind[kind] += bytes - fpi
		r.c.byRel[r.relName(ctx, rfn)] += bytes - fpi
		r.c.byKind["full-page images"] += fpi
		r.c.byRel["full-page images"] += fpi
		r.xids = append(r.xids, xids...)
		return nil
	})
	if err != nil {
		return fmt.Errorf("read wal: %w", err)
	}
	var raw int64
	if err := r.pool.QueryRow(ctx, `SELECT pg_wal_lsn_diff($1::pg_lsn, $2::pg_lsn)::bigint`, to, r.start).Scan(&raw); err != nil {
		return err
	}
	r.c.raw, r.from = raw, to
	if err := r.pool.QueryRow(ctx, `SELECT checkpoints_timed + checkpoints_req - $1 FROM pg_stat_bgwriter`, r.checkpoints0).Scan(&r.c.checkpoints); err != nil {
		return err
	}
	return nil
}

// relName names a relfilenode of the database; partitions keep their own names.
func (r *walReader) relName(ctx context.Context, rfn uint32) string {
	if rfn == 0 {
		return "no relation"
	}
	if r.names == nil {
		r.names = map[uint32]string{}
	}
	if n, ok := r.names[rfn]; ok {
		return n
	}
	var n string
	if err := r.pool.QueryRow(ctx, `SELECT coalesce((SELECT relname::text FROM pg_class WHERE pg_relation_filenode(oid) = $1 LIMIT 1), 'other')`, rfn).Scan(&n); err != nil {
		n = "other"
	}
	r.names[rfn] = n
	return n
}
