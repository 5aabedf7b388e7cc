package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/export"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
)

const exportDB = "bench_export"

// exportItemsPerTx bounds the rows one seeding transaction writes (about 250 snapshots an
// item at the realistic market's change share).
const exportItemsPerTx = 500

// benchExport times `collector export` of one complete day at n HOT items in each format. The
// day is written with history's fixture functions rather than collected: collecting 20,000
// items a minute for a day takes far longer than the export it feeds. Each item is collected
// every minute of the day, and a collection writes a snapshot when the simulator's realistic
// market changed the item's listings or sold it since the last one (each minute with
// probability 1 − e^(−(λ+σ)·60 s), the item's true rates), or on the hourly heartbeat;
// sales at the item's true sale rate; candles rebuilt from those rows.
func benchExport(ctx context.Context, e *env, sz sizes, rep *report) error {
	n := sz.exportItems
	u, err := e.freshDB(ctx, exportDB, true)
	if err != nil {
		return err
	}
	defer e.dropDB(ctx, exportDB)
	pool, err := openPool(ctx, u, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The newest settled day: in the hour after midnight yesterday is still in progress.
	day := time.Now().UTC().Add(-export.SettleDefault).Truncate(24*time.Hour).AddDate(0, 0, -1)
	t0 := time.Now()
	counts, err := seedExportDay(ctx, pool, n, day)
	if err != nil {
		return err
	}
	rep.note("export: seeded one day of %d HOT items (%s snapshots, %s sales, %s candles) in %s",
		n, approx(counts.Snapshots), approx(counts.Sales), approx(counts.Candles), time.Since(t0).Round(time.Second))
	for _, format := range export.Formats {
		dir, err := os.MkdirTemp("", "bench-export-")
		if err != nil {
			return err
		}
		t1 := time.Now()
		res, err := export.Run(ctx, pool, export.Options{Day: day, Dir: dir, Format: format, Version: "bench"})
		took := time.Since(t1)
		os.RemoveAll(dir)
		if err != nil {
			return fmt.Errorf("export %s: %w", format, err)
		}
		var total int64
		var parts []string
		for _, f := range res.Manifest.Tables {
			total += f.Bytes
			parts = append(parts, fmt.Sprintf("%s %.1f MB", strings.TrimPrefix(f.Table, "auction_"), mb(f.Bytes)))
		}
		rows := counts.Snapshots + counts.Sales + counts.Candles
		rep.add(fmt.Sprintf("Export of one day, %s HOT items, %s", count(n), format),
			fmt.Sprintf("%.1f s, %.1f MB (%s)", took.Seconds(), mb(total), strings.Join(parts, ", ")),
			fmt.Sprintf("export.Run (what `collector export --day D --out DIR --format %s` runs) of one complete UTC day into an empty directory, "+
				"wall time including the manifest and fsyncs; %s rows (%s snapshots, %s sales, %s hourly and daily candles, %.0f bytes a row). "+
				"The day was written with history's fixture functions (InsertSnapshotRows, InsertSaleRows, RebuildCandles), not collected: "+
				"every item collected each minute, a snapshot when the realistic market (`collector-dev sim --market realistic`, its first %s items' "+
				"true rates) changed or sold it since the last one, 1 − e^(−(λ+σ)·60 s) per minute, or on the hourly heartbeat; sales at the true sale rate",
				format, approx(rows), approx(counts.Snapshots), approx(counts.Sales), approx(counts.Candles), float64(total)/float64(max(rows, 1)), count(n)))
	}
	return nil
}

// seedExportDay writes the day's rows for n HOT items and returns the day's counts.
func seedExportDay(ctx context.Context, pool *pgxpool.Pool, n int, day time.Time) (history.DayCounts, error) {
	m, err := market.New(market.Realistic, n, histDaySeed)
	if err != nil {
		return history.DayCounts{}, err
	}
	truths := m.Truths()
	items := m.Items()
	if err := exportPartitions(ctx, pool, day); err != nil {
		return history.DayCounts{}, err
	}
	if _, err := pool.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, last_collected_at)
		SELECT md5(i::text), 'item ' || i, 'HOT_1M', $2 FROM generate_series(1, $1) AS i`, n, day.AddDate(0, 0, 1)); err != nil {
		return history.DayCounts{}, fmt.Errorf("seed items: %w", err)
	}
	for lo := 0; lo < n; lo += exportItemsPerTx {
		var s history.SnapshotRows
		var sales history.SaleRows
		var ids []string
		for i := lo; i < min(lo+exportItemsPerTx, n); i++ {
			id := histItemID(i + 1)
			ids = append(ids, id)
			tr := truths[items[i].ItemID]
			exportItemDay(id, i, tr.ChangesPerHour, tr.SalesPerHour, day, &s, &sales)
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := history.InsertSnapshotRows(ctx, tx, s); err != nil {
				return err
			}
			if _, err := history.InsertSaleRows(ctx, tx, sales); err != nil {
				return err
			}
			return history.RebuildCandles(ctx, tx, ids)
		}); err != nil {
			return history.DayCounts{}, fmt.Errorf("seed the day: %w", err)
		}
	}
	if _, err := pool.Exec(ctx, `VACUUM ANALYZE auction_snapshots, auction_sales, price_candles`); err != nil {
		return history.DayCounts{}, fmt.Errorf("vacuum: %w", err)
	}
	return history.CountDay(ctx, pool, day)
}

// exportItemDay appends one item's day: a collection every minute at the item's own second,
// a snapshot at the first and whenever the market moved or an hour passed, and its sales.
func exportItemDay(id string, i int, changes, sales float64, day time.Time, s *history.SnapshotRows, sr *history.SaleRows) {
	rng := rand.New(rand.NewPCG(histDaySeed, uint64(i)))
	pChange := 1 - math.Exp(-(changes+sales)/60)
	pSale := 1 - math.Exp(-sales/60)
	price := int64(1000 + rng.IntN(1_000_000))
	last := -60
	for minute := range 24 * 60 {
		at := day.Add(time.Duration(minute)*time.Minute + time.Duration(i%60)*time.Second)
		sold := rng.Float64() < pSale
		if sold {
			sr.ItemIDs = append(sr.ItemIDs, id)
			sr.At = append(sr.At, at)
			sr.Seq = append(sr.Seq, 0)
			sr.Qty = append(sr.Qty, 1)
			sr.Unit = append(sr.Unit, price)
			sr.Total = append(sr.Total, price)
		}
		changed := sold || rng.Float64() < pChange
		if !changed && minute-last < 60 {
			continue
		}
		if changed {
			price += int64(rng.IntN(201) - 100)
		}
		last = minute
		vwap := math.NaN()
		var sc int32
		var sq int64
		if sold {
			vwap, sc, sq = float64(price), 1, 1
		}
		s.ItemIDs = append(s.ItemIDs, id)
		s.ClaimTokens = append(s.ClaimTokens, fmt.Sprintf("%08x-0000-4000-8000-%012x", i, minute))
		s.Tiers = append(s.Tiers, "HOT_1M")
		s.At = append(s.At, at)
		s.Count = append(s.Count, int32(5+rng.IntN(50)))
		s.SalesCount = append(s.SalesCount, sc)
		s.Qty = append(s.Qty, int64(10+rng.IntN(500)))
		s.Lowest = append(s.Lowest, price)
		s.Median = append(s.Median, price+int64(rng.IntN(1000)))
		s.APIAverage = append(s.APIAverage, price+500)
		s.SalesQty = append(s.SalesQty, sq)
		s.Weighted = append(s.Weighted, float64(price)*1.01)
		s.SalesVWAP = append(s.SalesVWAP, vwap)
	}
}

// exportPartitions replaces the fresh database's history partitions with one for the day.
func exportPartitions(ctx context.Context, pool *pgxpool.Pool, day time.Time) error {
	for _, table := range []string{"auction_snapshots", "auction_sales"} {
		rows, err := pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass`, table)
		if err != nil {
			return err
		}
		parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return err
		}
		for _, p := range parts {
			if _, err := pool.Exec(ctx, `DROP TABLE `+pgx.Identifier{p}.Sanitize()); err != nil {
				return err
			}
		}
		if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
			pgx.Identifier{table + "_export_day"}.Sanitize(), table, day.Format(time.RFC3339), day.AddDate(0, 0, 1).Format(time.RFC3339))); err != nil {
			return fmt.Errorf("partition %s: %w", table, err)
		}
	}
	return nil
}
