package main

import (
	"context"
	"crypto/md5"
	"encoding/hex"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// histSize is the stored history the history section measures on: items × days × perDay
// snapshot rows in whole daily partitions, plus today's up to now; reads samples items.
type histSize struct {
	items, days, rows, reads int
	candleItems              int // items given candles (the first ones); 0 = every item
}

func (h histSize) perDay() int { return (h.rows + h.items*h.days - 1) / (h.items * h.days) }

// histSeed is what was seeded: the days (UTC midnights, oldest first, today last) and the
// item ids, in the order md5(i) for i = 1…items.
type histSeed struct {
	days    []time.Time
	items   []string
	rows    int64
	candles int64
	took    [3]time.Duration // snapshots, candles, vacuum and checkpoint
}

func histItemID(i int) string {
	sum := md5.Sum([]byte(strconv.Itoa(i)))
	return hex.EncodeToString(sum[:])
}

func histPartition(day time.Time) string { return "auction_snapshots_p" + day.Format("20060102") }

// seedHistory fills a migrated database the way a bulk load would: each day's snapshots
// go into a plain table that is indexed and attached as that day's partition afterwards
// (building an index once is much faster than growing it row by row). Every item gets
// perDay snapshots a day, evenly spaced, each item at its own offset; today's stop at now.
// Rows are stored in collection order, items interleaved, as the write path leaves them.
// The tables after today are created empty, so a retention pass has nothing to create ahead.
func seedHistory(ctx context.Context, pool *pgxpool.Pool, h histSize, now time.Time) (histSeed, error) {
	today := now.UTC().Truncate(24 * time.Hour)
	var s histSeed
	t0 := time.Now()
	for d := h.days; d >= 0; d-- {
		s.days = append(s.days, today.AddDate(0, 0, -d))
	}
	for i := 1; i <= h.items; i++ {
		s.items = append(s.items, histItemID(i))
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, last_collected_at)
		SELECT md5(i::text), 'item ' || i, 'HOT_1M', $2 FROM generate_series(1, $1) AS i`, h.items, now); err != nil {
		return s, fmt.Errorf("seed items: %w", err)
	}
	work := make(chan int, len(s.days))
	for d := range s.days {
		work <- d
	}
	close(work)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for d := range work {
				n, err := seedHistoryDay(ctx, pool, d, s.days[d], h, now)
				mu.Lock()
				s.rows += n
				if err != nil && firstErr == nil {
					firstErr = err
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if firstErr != nil {
		return s, firstErr
	}
	for d := 1; d <= 7; d++ {
		day := today.AddDate(0, 0, d)
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF auction_snapshots FOR VALUES FROM (%s) TO (%s)`,
			histPartition(day), pgLiteral(day), pgLiteral(day.AddDate(0, 0, 1)))); err != nil {
			return s, fmt.Errorf("create partition for %s: %w", day.Format(time.DateOnly), err)
		}
	}
	if _, err := pool.Exec(ctx, `SELECT setval(pg_get_serial_sequence('auction_snapshots', 'snapshot_id'), $1)`, len(s.days)*h.perDay()*h.items+1); err != nil {
		return s, fmt.Errorf("advance the snapshot id: %w", err)
	}
	s.took[0] = time.Since(t0)
	t0 = time.Now()
	candled := h.items
	if h.candleItems > 0 {
		candled = min(h.candleItems, h.items)
	}
	n, err := seedCandles(ctx, pool, candled, s.days[0], now)
	if err != nil {
		return s, err
	}
	s.candles = n
	s.took[1] = time.Since(t0)
	t0 = time.Now()
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE tracked_items, auction_snapshots, price_candles`); err != nil {
		return s, fmt.Errorf("vacuum: %w", err)
	}
	_, err = pool.Exec(ctx, `CHECKPOINT`)
	s.took[2] = time.Since(t0)
	return s, err
}

// seedCandles stores every item's hourly and daily candles from the first day to now in
// bucket order, items interleaved, as write-backs leave them (an item's candles are on as
// many pages as it has buckets); the key is built once after the load, not row by row.
func seedCandles(ctx context.Context, pool *pgxpool.Pool, items int, from, now time.Time) (int64, error) {
	var n int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL maintenance_work_mem = '256MB'`); err != nil {
			return err
		}
		// The key as the schema defines it (with its included columns), rebuilt after the load.
		var key string
		if err := tx.QueryRow(ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'price_candles_pkey'`).Scan(&key); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `ALTER TABLE price_candles DROP CONSTRAINT price_candles_pkey`); err != nil {
			return err
		}
		for _, r := range []struct{ res, width string }{{"1d", "1 day"}, {"1h", "1 hour"}} {
			tag, err := tx.Exec(ctx, `
				INSERT INTO price_candles (item_id, resolution, bucket, snapshots, open_at, open_price, high_price, low_price,
					close_at, close_price, listings_min, listings_max, sales_count, sales_quantity, sales_value)
				SELECT md5(i::text), $4, b, 3, b, 1000 + i % 97, 1100 + i % 89, 950 + i % 83, b + $5::interval / 2, 1000 + i % 79,
				       10 + i % 7, 20 + i % 11, i % 3, i % 5, (i % 5) * 1000
				FROM generate_series(0, (floor(extract(epoch FROM $3::timestamptz - $2::timestamptz) / extract(epoch FROM $5::interval))::bigint + 1) * $1 - 1) AS k
				CROSS JOIN LATERAL (SELECT (k % $1 + 1)::int AS i, $2::timestamptz + (k / $1) * $5::interval AS b) AS x`,
				items, from, now, r.res, r.width)
			if err != nil {
				return fmt.Errorf("%s candles: %w", r.res, err)
			}
			n += tag.RowsAffected()
		}
		_, err := tx.Exec(ctx, `ALTER TABLE price_candles ADD CONSTRAINT price_candles_pkey `+key)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("seed candles: %w", err)
	}
	return n, nil
}

// seedHistoryDay loads the idx-th day's partition, gives it the parent's keys and attaches
// it (the keys become the partition's, and a CHECK constraint matching the bounds spares the
// attach its validating scan). Snapshot ids are unique across days.
func seedHistoryDay(ctx context.Context, pool *pgxpool.Pool, idx int, day time.Time, h histSize, now time.Time) (int64, error) {
	name := pgx.Identifier{histPartition(day)}.Sanitize()
	lo, hi := pgLiteral(day), pgLiteral(day.AddDate(0, 0, 1))
	spacing := 86_400 / h.perDay()
	var rows int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SET LOCAL maintenance_work_mem = '256MB'; SET LOCAL work_mem = '128MB'`); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s (LIKE auction_snapshots INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`, name)); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, fmt.Sprintf(`
			INSERT INTO %s (snapshot_id, item_id, claim_token, collected_at, tier, reason, listing_count, listing_quantity,
				lowest_unit_price, median_unit_price, weighted_unit_price, api_average_price)
			SELECT ($5::bigint * $3 + j) * $1 + i, md5(i::text), gen_random_uuid(), t, 'HOT_1M', 'change',
			       10 + (i + j) %% 13, 100 + (i * j) %% 500, 1000 + (i + 7 * j) %% 211, 1100 + (i + 3 * j) %% 199,
			       1050.5 + (i + j) %% 101, 1000 + i %% 50
			FROM generate_series(1, $1) AS i
			CROSS JOIN generate_series(0, $3 - 1) AS j
			CROSS JOIN LATERAL (SELECT $2::timestamptz + make_interval(secs => j * $4 + i %% $4) AS t) AS ts
			WHERE t < $6
			ORDER BY t`, name), h.items, day, h.perDay(), spacing, idx, now)
		if err != nil {
			return err
		}
		rows = tag.RowsAffected()
		stmts := []string{
			fmt.Sprintf(`ALTER TABLE %s ADD PRIMARY KEY (item_id, collected_at, snapshot_id), ADD UNIQUE (claim_token, collected_at)`, name),
			fmt.Sprintf(`ALTER TABLE %s ADD CONSTRAINT seed_bounds CHECK (collected_at >= %s AND collected_at < %s)`, name, lo, hi),
			fmt.Sprintf(`ALTER TABLE auction_snapshots ATTACH PARTITION %s FOR VALUES FROM (%s) TO (%s)`, name, lo, hi),
			fmt.Sprintf(`ALTER TABLE %s DROP CONSTRAINT seed_bounds`, name),
		}
		for _, q := range stmts {
			if _, err := tx.Exec(ctx, q); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("seed %s: %w", day.Format(time.DateOnly), err)
	}
	return rows, nil
}

func pgLiteral(t time.Time) string { return "'" + t.UTC().Format(time.RFC3339) + "'" }
