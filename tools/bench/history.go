package main

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/history/partition"
)

const (
	historyDB          = "bench_history"
	historyWriteBatch  = 20                    // collections per write-back transaction
	historyWriteEvery  = 50 * time.Millisecond // 400 collections/s: 20,000 items at HOT_1M
	historyDeleteBatch = 5000
	historyWarmReads   = 20
)

func benchHistory(ctx context.Context, e *env, sz sizes, rep *report) error {
	if err := historyDay(ctx, e, sz.historyDay, rep); err != nil {
		return err
	}
	return historyStored(ctx, e, sz.history, rep)
}

// historyStored seeds one database of stored history (not timed), reads from it, then
// retires its oldest day by partition and the next one row by row.
func historyStored(ctx context.Context, e *env, h histSize, rep *report) error {
	u, err := e.freshDB(ctx, historyDB, true)
	if err != nil {
		return err
	}
	defer e.dropDB(ctx, historyDB)
	pool, err := openPool(ctx, u, 8)
	if err != nil {
		return err
	}
	defer pool.Close()
	seed, err := seedHistory(ctx, pool, h, time.Now())
	if err != nil {
		return err
	}
	stored := fmt.Sprintf("%s snapshot rows (%d items × %d a day, %d whole days in daily partitions plus today's up to now) and %s candle rows (hourly and daily, every item, every bucket since the first day), seeded in bulk, not timed, in time order with items interleaved as write-backs store them (an item's day of snapshots or month of hourly candles lies on as many heap pages as it has rows)",
		approx(seed.rows), h.items, h.perDay(), h.days, approx(seed.candles))
	rep.note("history: seeded %s snapshot rows in %s, %s candle rows in %s, vacuumed and checkpointed in %s", approx(seed.rows), seed.took[0].Round(time.Second),
		approx(seed.candles), seed.took[1].Round(time.Second), seed.took[2].Round(time.Second))
	if err := historyReads(ctx, pool, seed, h.reads, stored, rep); err != nil {
		return err
	}
	return historyRetention(ctx, pool, seed, h, rep)
}

// historyReads reads each of n random items once at each resolution, in a random order.
func historyReads(ctx context.Context, pool *pgxpool.Pool, seed histSeed, n int, stored string, rep *report) error {
	sample := slices.Clone(seed.items)
	rand.Shuffle(len(sample), func(i, j int) { sample[i], sample[j] = sample[j], sample[i] })
	sample = sample[:min(n, len(sample))]
	for _, c := range []struct {
		label, res, sinceLabel string
		since                  time.Duration
		target                 string
	}{
		{"last 30 days of hourly candles", history.Hourly, "30 days", 30 * 24 * time.Hour, "10 ms"},
		{"last day of raw snapshots", "raw", "24 h", 24 * time.Hour, "20 ms"},
	} {
		// Every connection of the pool has prepared the statements before the timed reads.
		for _, id := range seed.items[:historyWarmReads] {
			if _, err := catalog.ReadSeries(ctx, pool, id, c.res, time.Now().Add(-c.since), time.Time{}); err != nil {
				return fmt.Errorf("read %s of %s: %w", c.res, id, err)
			}
		}
		var lat []float64
		var got int
		for _, id := range sample {
			t := time.Now()
			s, err := catalog.ReadSeries(ctx, pool, id, c.res, t.Add(-c.since), time.Time{})
			if err != nil {
				return fmt.Errorf("read %s of %s: %w", c.res, id, err)
			}
			lat = append(lat, ms(time.Since(t)))
			got += len(s.Points) + len(s.Candle)
		}
		rep.add("History read: one item's "+c.label+", p50 / p99",
			fmt.Sprintf("%.2f / %.2f ms (%.0f rows a read)", quantile(lat, 0.5), quantile(lat, 0.99), float64(got)/float64(len(sample))),
			fmt.Sprintf("target p99 ≤ %s. catalog.ReadSeries(item, %q, now − %s) for %d random items, one read each, one after another through the pool (the item's row, then one index range), after %d untimed reads; over %s",
				c.target, c.res, c.sinceLabel, len(sample), historyWarmReads, stored))
	}
	return nil
}

// historyRetention drops the oldest seeded day the way the daemon does (partition.RunOnce
// with a retention that puts exactly that day past it), then deletes the next day's rows in
// batches the way retention used to, while a writer stores small write-backs throughout.
func historyRetention(ctx context.Context, pool *pgxpool.Pool, seed histSeed, h histSize, rep *report) error {
	wctx, stopWriter := context.WithCancel(ctx)
	w := &historyWriter{pool: pool, items: seed.items}
	done := make(chan error, 1)
	go func() { done <- w.run(wctx) }()
	stop := func() error {
		stopWriter()
		return <-done
	}
	calm := 3 * time.Second
	if h.items < 10_000 {
		calm = time.Second
	}
	quiet := func() error {
		select {
		case <-time.After(calm):
			return nil
		case err := <-done:
			done <- err
			return fmt.Errorf("history writer stopped: %w", err)
		}
	}
	if err := quiet(); err != nil {
		stopWriter()
		return err
	}
	idle := span{time.Now().Add(-calm), time.Now()}
	drop, err := historyDrop(ctx, pool, seed)
	if err == nil {
		err = quiet()
	}
	var del deleteResult
	if err == nil {
		del, err = historyDelete(ctx, pool, seed.days[1])
	}
	if werr := stop(); err == nil && werr != nil {
		err = fmt.Errorf("history writer: %w", werr)
	}
	if err != nil {
		return err
	}
	day := fmt.Sprintf("one day of %s snapshot rows (%d items × %d) out of %s stored", approx(int64(h.items*h.perDay())), h.items, h.perDay(), approx(seed.rows))
	rep.add("History retention: one day dropped by partition", fmt.Sprintf("%s (%.1f MB partition; table size fell %.1f MB; WAL %s)", dur(drop.took), mb(drop.partBytes), mb(drop.fell), kbOrMB(drop.wal)),
		fmt.Sprintf("target ≤ 1 s, no bloat. partition.Partitions.RunOnce on auction_snapshots with a retention putting exactly the oldest day past it: the partitions ahead checked and an empty archive created below the seeded days first (the pass creates before it drops), then ALTER TABLE … DETACH PARTITION … CONCURRENTLY and DROP TABLE of the oldest day and that archive, and the archive created again below the new oldest day; %s. Size: pg_total_relation_size summed over the table's partitions before and after (the writer's rows land meanwhile)", day))
	rep.add("History retention: the next day deleted in batches (the old way)", fmt.Sprintf("%s, %d statements (partition %.1f → %.1f MB; %s dead rows left for vacuum; WAL %s)", dur(del.took), del.statements, mb(del.before), mb(del.after), approx(del.dead), kbOrMB(del.wal)),
		fmt.Sprintf("for comparison: DELETE FROM auction_snapshots WHERE ctid = ANY(ARRAY(SELECT ctid … WHERE collected_at in the day LIMIT %d)) (the day's range on both sides, so one partition), one statement per transaction until none is left, on the same database right after the drop; %s. Dead rows: pg_stat_user_tables.n_dead_tup of the partition right after the last statement (autovacuum left on); the partition keeps its size until a VACUUM FULL or its own drop", historyDeleteBatch, day))
	spans := w.spans()
	idleP, nIdle := w.p99In(spans, idle)
	dropP, nDrop := w.p99In(spans, span{drop.start, drop.start.Add(drop.took)})
	delP, nDel := w.p99In(spans, span{del.start, del.start.Add(del.took)})
	rep.add("History retention: write-back p99 during drop / during batched DELETE / neither",
		fmt.Sprintf("%.1f ms (%d tx) / %.1f ms (%d tx) / %.1f ms (%d tx)", dropP, nDrop, delP, nDel, idleP, nIdle),
		fmt.Sprintf("a writer storing %d collections per transaction (history.Policy.Write: a first snapshot each, its hourly and daily candles and its outbox event; fresh claim tokens, the current time, %d distinct random items) every %s; latency from BEGIN to COMMIT of the transactions overlapping each window (neither: the %s before the drop)",
			historyWriteBatch, historyWriteBatch, historyWriteEvery, calm))
	return nil
}

type dropResult struct {
	start           time.Time
	took            time.Duration
	partBytes, fell int64
	wal             int64
}

func historyDrop(ctx context.Context, pool *pgxpool.Pool, seed histSeed) (dropResult, error) {
	var r dropResult
	oldest := seed.days[0]
	name := histPartition(oldest)
	if err := pool.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass)`, name).Scan(&r.partBytes); err != nil {
		return r, fmt.Errorf("size of %s: %w", name, err)
	}
	// The cutoff falls in the middle of the second day: the first is wholly past it.
	retention := time.Since(oldest) - 36*time.Hour
	p, err := partition.New(pool, pool, partition.Config{Interval: 24 * time.Hour, Ahead: 24 * time.Hour,
		Tables: []partition.Table{{Name: partition.Snapshots, Retention: retention}}})
	if err != nil {
		return r, err
	}
	before, wal0, err := historySizes(ctx, pool)
	if err != nil {
		return r, err
	}
	r.start = time.Now()
	st, err := p.RunOnce(ctx)
	r.took = time.Since(r.start)
	if err != nil {
		return r, fmt.Errorf("retention pass: %w", err)
	}
	after, wal1, err := historySizes(ctx, pool)
	if err != nil {
		return r, err
	}
	// The pass creates first: an archive below the seeded days, which goes with the oldest day
	// and is made again below the next.
	days := slices.DeleteFunc(slices.Clone(st[0].Dropped), func(n string) bool { return strings.Contains(n, "_before_") })
	if len(st) != 1 || !slices.Equal(days, []string{name}) {
		return r, fmt.Errorf("retention pass dropped %v, want only %s", st, name)
	}
	r.fell, r.wal = before-after, wal1-wal0
	return r, nil
}

// historySizes is the snapshot table's size (every partition, indexes included) and the
// WAL position.
func historySizes(ctx context.Context, pool *pgxpool.Pool) (size, wal int64, err error) {
	err = pool.QueryRow(ctx, `
		SELECT (SELECT coalesce(sum(pg_total_relation_size(relid)), 0) FROM pg_partition_tree('auction_snapshots') WHERE isleaf)::bigint,
		       pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`).Scan(&size, &wal)
	if err != nil {
		return 0, 0, fmt.Errorf("history size: %w", err)
	}
	return size, wal, nil
}

type deleteResult struct {
	start         time.Time
	took          time.Duration
	statements    int
	before, after int64
	dead, wal     int64
}

func historyDelete(ctx context.Context, pool *pgxpool.Pool, day time.Time) (deleteResult, error) {
	var r deleteResult
	name := histPartition(day)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return r, err
	}
	defer conn.Release()
	if err := conn.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass), pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`, name).Scan(&r.before, &r.wal); err != nil {
		return r, fmt.Errorf("size of %s: %w", name, err)
	}
	r.start = time.Now()
	for {
		tag, err := conn.Exec(ctx, `
			DELETE FROM auction_snapshots WHERE collected_at >= $1 AND collected_at < $2 AND ctid = ANY (ARRAY(
			    SELECT ctid FROM auction_snapshots WHERE collected_at >= $1 AND collected_at < $2 LIMIT $3))`,
			day, day.AddDate(0, 0, 1), historyDeleteBatch)
		if err != nil {
			return r, fmt.Errorf("delete %s: %w", day.Format(time.DateOnly), err)
		}
		r.statements++
		if tag.RowsAffected() == 0 {
			break
		}
	}
	r.took = time.Since(r.start)
	var wal int64
	if err := conn.QueryRow(ctx, `SELECT pg_total_relation_size($1::regclass), pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')::bigint`, name).Scan(&r.after, &wal); err != nil {
		return r, fmt.Errorf("size of %s: %w", name, err)
	}
	r.wal = wal - r.wal
	// This session's counts reach the statistics view only once flushed.
	if _, err := conn.Exec(ctx, `SELECT pg_stat_force_next_flush()`); err != nil {
		return r, err
	}
	if err := conn.QueryRow(ctx, `SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = $1::regclass`, name).Scan(&r.dead); err != nil {
		return r, fmt.Errorf("dead rows of %s: %w", name, err)
	}
	return r, nil
}

type span struct{ from, to time.Time }

func (s span) overlaps(o span) bool { return s.from.Before(o.to) && o.from.Before(s.to) }

// historyWriter stores write-backs at a steady pace and records how long each took.
type historyWriter struct {
	pool  *pgxpool.Pool
	items []string
	mu    sync.Mutex
	done  []span
}

func (w *historyWriter) run(ctx context.Context) error {
	policy := history.Policy{Heartbeat: time.Hour}
	tick := time.NewTicker(historyWriteEvery)
	defer tick.Stop()
	price := int64(1000)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		first := rand.IntN(len(w.items) - historyWriteBatch)
		cs := make([]history.Collection, historyWriteBatch)
		for i := range cs {
			price++
			p := price
			cs[i] = history.Collection{ItemID: w.items[first+i], ItemName: "item", Tier: "HOT_1M",
				Token: claimToken(), At: time.Now(),
				State: history.State{Count: 10, Quantity: 100, Lowest: &p}}
		}
		t := time.Now()
		err := pgx.BeginFunc(ctx, w.pool, func(tx pgx.Tx) error {
			_, err := policy.Write(ctx, tx, cs)
			return err
		})
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		w.mu.Lock()
		w.done = append(w.done, span{t, time.Now()})
		w.mu.Unlock()
	}
}

func (w *historyWriter) spans() []span {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.done)
}

// p99In is the 99th percentile latency (ms) of the transactions overlapping win, and their number.
func (w *historyWriter) p99In(spans []span, win span) (float64, int) {
	var lat []float64
	for _, s := range spans {
		if s.overlaps(win) {
			lat = append(lat, ms(s.to.Sub(s.from)))
		}
	}
	return quantile(lat, 0.99), len(lat)
}

func claimToken() pgtype.UUID {
	u := pgtype.UUID{Valid: true}
	_, _ = crand.Read(u.Bytes[:])
	return u
}

// quantile is the q-th quantile by the nearest rank (0 for no values).
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// approx is a row count to three figures.
func approx(n int64) string {
	switch {
	case n >= 1_000_000:
		return fmt.Sprintf("%.3gM", float64(n)/1e6)
	case n >= 10_000:
		return fmt.Sprintf("%.3gk", float64(n)/1e3)
	}
	return fmt.Sprint(n)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func kbOrMB(b int64) string {
	if b < 1<<20 {
		return fmt.Sprintf("%.0f kB", float64(b)/1024)
	}
	return fmt.Sprintf("%.1f MB", mb(b))
}

func dur(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%.0f ms", ms(d))
	}
	return d.Round(100 * time.Millisecond).String()
}
