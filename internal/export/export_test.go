package export_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/export"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// The first snapshot of yesterday in key order (item "a", at midnight plus a microsecond
// fraction), whose figures must come back exactly.
const (
	firstLowest   = int64(9_007_199_254_740_993) // past float64's exact integers
	firstWeighted = 1234.5678901234567
)

// bundle is a database holding rows on the day before yesterday, yesterday and today.
type bundle struct {
	pool      *pgxpool.Pool
	today     time.Time
	yesterday time.Time
	firstAt   time.Time
}

func setup(t *testing.T) bundle {
	t.Helper()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	today := storetest.PartitionDays(t, pool, -3, 2, "auction_snapshots", "auction_sales").UTC()
	b := bundle{pool: pool, today: today, yesterday: today.AddDate(0, 0, -1), firstAt: today.AddDate(0, 0, -1).Add(123456 * time.Microsecond)}
	storetest.Items(t, pool, storetest.Item{ID: "a"}, storetest.Item{ID: "b"}, storetest.Item{ID: "c"})
	var s history.SnapshotRows
	add := func(id string, at time.Time, lowest int64, weighted, vwap float64) {
		s.ItemIDs = append(s.ItemIDs, id)
		s.ClaimTokens = append(s.ClaimTokens, fmt.Sprintf("00000000-0000-0000-0000-%012d", len(s.ItemIDs)))
		s.Tiers = append(s.Tiers, "HOT_1M")
		s.At = append(s.At, at)
		s.Count = append(s.Count, 3)
		s.SalesCount = append(s.SalesCount, 0)
		s.Qty = append(s.Qty, 7)
		s.Lowest = append(s.Lowest, lowest)
		s.Median = append(s.Median, lowest+1)
		s.APIAverage = append(s.APIAverage, lowest)
		s.SalesQty = append(s.SalesQty, 0)
		s.Weighted = append(s.Weighted, weighted)
		s.SalesVWAP = append(s.SalesVWAP, vwap)
	}
	y := b.yesterday
	add("a", b.firstAt, firstLowest, firstWeighted, math.NaN())
	add("a", y.Add(10*time.Hour+30*time.Minute), 120, 121.5, 119.25)
	add("a", y.Add(24*time.Hour-time.Microsecond), 130, 130, math.NaN())
	add("b", y.Add(12*time.Hour), 50, 50.5, math.NaN())
	add("c", y.Add(-time.Hour), 10, 10, math.NaN())           // the day before: not exported
	add("c", today.Add(time.Microsecond), 11, 11, math.NaN()) // today: not exported
	sales := history.SaleRows{
		ItemIDs: []string{"a", "a", "b", "c"},
		At:      []time.Time{y.Add(10 * time.Hour), y.Add(10 * time.Hour), y.Add(23 * time.Hour), today},
		Seq:     []int32{0, 1, 0, 0},
		Qty:     []int64{1, 2, 3, 4},
		Unit:    []int64{100, 101, 50, 9},
		Total:   []int64{100, 202, 150, 36},
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := history.InsertSnapshotRows(ctx, tx, s); err != nil {
			return err
		}
		if _, err := history.InsertSaleRows(ctx, tx, sales); err != nil {
			return err
		}
		return history.RebuildCandles(ctx, tx, []string{"a", "b", "c"})
	}); err != nil {
		t.Fatal(err)
	}
	return b
}

// settleAtOnce makes yesterday complete as soon as today began: the tests run at any hour, and in
// the hour after midnight SettleDefault would still refuse yesterday as in progress.
const settleAtOnce = time.Nanosecond

func (b bundle) export(t *testing.T, dir, format string) export.Result {
	t.Helper()
	res, err := export.Run(context.Background(), b.pool, export.Options{Day: b.yesterday, Dir: dir, Format: format, Version: "test", Settle: settleAtOnce})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// What DuckDB reads from a day's export, in either format, is what the database holds for
// that day: the row count of every table, the day's boundaries (a row at midnight is the day's,
// one a microsecond before the next midnight too), prices past float64's exact integers, a
// double's every digit, timestamps to the microsecond, and standard column types.
func TestExportReadBackByDuckDB(t *testing.T) {
	b := setup(t)
	counts, err := history.CountDay(context.Background(), b.pool, b.yesterday)
	if err != nil {
		t.Fatal(err)
	}
	if counts.Snapshots != 4 || counts.Sales != 3 || counts.Candles == 0 {
		t.Fatalf("the fixture's day holds %+v; want 4 snapshots, 3 sales and candles", counts)
	}
	for _, format := range export.Formats {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			res := b.export(t, dir, format)
			if res.Skipped || !res.Manifest.Complete || res.Manifest.SchemaVersion < 1 || res.Manifest.CollectorVersion != "test" {
				t.Fatalf("manifest: %+v", res.Manifest)
			}
			got := duckdbRead(t, dir, format)
			want := map[string]int64{"auction_snapshots": counts.Snapshots, "auction_sales": counts.Sales, "price_candles": counts.Candles}
			for _, f := range res.Manifest.Tables {
				if f.Rows != want[f.Table] || got[f.Table]["rows"] != strconv.FormatInt(want[f.Table], 10) {
					t.Errorf("%s: manifest %d rows, DuckDB read %v; the database holds %d", f.Table, f.Rows, got[f.Table]["rows"], want[f.Table])
				}
			}
			snap := got["auction_snapshots"]
			if snap["first_item"] != "a" || snap["first_at"] != strconv.FormatInt(b.firstAt.UnixMicro(), 10) ||
				snap["first_lowest"] != strconv.FormatInt(firstLowest, 10) || snap["with_vwap"] != "1" {
				t.Errorf("snapshots read back: %v; want a at %d µs, lowest %d, one vwap", snap, b.firstAt.UnixMicro(), firstLowest)
			}
			if w, ok := snap["first_weighted"].(float64); !ok || w != firstWeighted {
				t.Errorf("weighted price read back %v (%T), want %v exactly", snap["first_weighted"], snap["first_weighted"], firstWeighted)
			}
			if snap["sum_lowest"] != strconv.FormatInt(firstLowest+120+130+50, 10) {
				t.Errorf("sum of lowest prices read back %v", snap["sum_lowest"])
			}
			sales := got["auction_sales"]
			if sales["sum_unit"] != "251" || sales["last_at"] != strconv.FormatInt(b.yesterday.Add(23*time.Hour).UnixMicro(), 10) {
				t.Errorf("sales read back: %v", sales)
			}
			if got["price_candles"]["daily"] != "2" {
				t.Errorf("daily candles read back: %v; want a and b's", got["price_candles"])
			}
			if format == "parquet" {
				for col, typ := range map[string]string{"type_collected_at": "TIMESTAMP WITH TIME ZONE", "type_lowest_unit_price": "BIGINT",
					"type_weighted_unit_price": "DOUBLE", "type_item_id": "VARCHAR", "type_listings_truncated": "BOOLEAN"} {
					if snap[col] != typ {
						t.Errorf("parquet %s: DuckDB reads %v, want %s", col, snap[col], typ)
					}
				}
			}
		})
	}
}

func checksums(t *testing.T, dir string) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == export.LockName { // no data: what one export at a time locks
			continue
		}
		body, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out[e.Name()] = body
	}
	return out
}

// A re-run over a complete day skips it while its manifest matches the database; without the
// manifest (an interrupted run) it writes the same bytes again, manifest included; once the
// day's rows change it writes them anew. No temporary file is left behind.
func TestExportRerunSkipsOrWritesTheSameBytes(t *testing.T) {
	b := setup(t)
	for _, format := range export.Formats {
		t.Run(format, func(t *testing.T) {
			dir := t.TempDir()
			b.export(t, dir, format)
			first := checksums(t, dir)
			if len(first) != 4 {
				t.Fatalf("the export wrote %d files, want 3 tables and the manifest: %v", len(first), slices.Sorted(maps.Keys(first)))
			}
			if res := b.export(t, dir, format); !res.Skipped {
				t.Fatal("a complete day matching the database was written again, not skipped")
			}
			if err := os.Remove(filepath.Join(dir, export.ManifestName)); err != nil {
				t.Fatal(err)
			}
			if res := b.export(t, dir, format); res.Skipped {
				t.Fatal("a day without its manifest was skipped")
			}
			again := checksums(t, dir)
			for name, body := range first {
				if string(again[name]) != string(body) {
					t.Errorf("%s: the re-run wrote different bytes", name)
				}
			}
			if len(again) != len(first) {
				t.Errorf("the re-run left %d files, want %d", len(again), len(first))
			}
		})
	}
	dir := t.TempDir()
	b.export(t, dir, "csv")
	storetest.Sales(t, b.pool, storetest.Sale{ItemID: "b", SoldAt: storetest.At(b.yesterday.Add(time.Hour)), UnitPrice: 7})
	res := b.export(t, dir, "csv")
	if res.Skipped || res.Manifest.Tables[1].Rows != 4 {
		t.Fatalf("after a new sale the day was %+v; want it written with 4 sales", res)
	}
}

// A rewrite of a complete day (late sales) that fails part-way, here stopped after its first
// table, leaves the day's export as it was: its manifest, its files, no temporary file.
// Consumers keep a complete day; the next run writes the new one.
func TestARewriteThatFailsKeepsTheDay(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	b.export(t, dir, "csv")
	before := checksums(t, dir)
	storetest.Sales(t, b.pool, storetest.Sale{ItemID: "b", SoldAt: storetest.At(b.yesterday.Add(time.Hour)), UnitPrice: 7})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	opts := export.AfterTable(export.Options{Day: b.yesterday, Dir: dir, Format: "csv", Version: "test", Settle: settleAtOnce}, cancel)
	if _, err := export.Run(ctx, b.pool, opts); err == nil {
		t.Fatal("a rewrite stopped after its first table succeeded")
	}
	after := checksums(t, dir)
	if !maps.EqualFunc(before, after, bytes.Equal) {
		t.Fatalf("a failed rewrite changed the day: before %v, after %v", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
	if res := b.export(t, dir, "csv"); res.Skipped || res.Manifest.Tables[1].Rows != 4 {
		t.Fatalf("the next run: %+v; want the day written with 4 sales", res)
	}
}

// A run that judged the day before another wrote it judges it again once it holds the lock:
// it finds the other's complete export of the same rows and keeps it, writing nothing.
func TestARunJudgesTheDayAgainUnderTheLock(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	var other export.Result
	opts := export.BeforeLock(export.Options{Day: b.yesterday, Dir: dir, Format: "csv", Version: "test", Settle: settleAtOnce}, func() {
		other = b.export(t, dir, "csv") // finishes between this run's judgement and its lock
	})
	res, err := export.Run(context.Background(), b.pool, opts)
	if err != nil {
		t.Fatal(err)
	}
	if other.Skipped || !other.Manifest.Complete || !res.Skipped {
		t.Fatalf("the other run %+v, this one %+v; want the other's export kept, this one skipped", other, res)
	}
}

// One export writes a day at a time: a run that finds the day's directory locked by another
// (replicas sharing a volume, collector export beside the daemon) writes and removes nothing,
// says so, and leaves the day to it; once that one lets go, however it ends, a run writes.
func TestOneExportWritesADayAtATime(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	other, err := os.OpenFile(filepath.Join(dir, export.LockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if err := syscall.Flock(int(other.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	temp := filepath.Join(dir, ".auction_sales.csv.tmp-1") // the other's file in progress
	if err := os.WriteFile(temp, []byte("item_id\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := b.export(t, dir, "csv")
	if !res.Busy || res.Manifest.Day != "" || len(checksums(t, dir)) != 1 {
		t.Fatalf("with the day locked by another export: %+v, files %v; want nothing written and the other's file left", res, slices.Sorted(maps.Keys(checksums(t, dir))))
	}
	other.Close() // as its process ending would
	res = b.export(t, dir, "csv")
	if res.Busy || !res.Manifest.Complete {
		t.Fatalf("once the other let go: %+v, want the day written", res)
	}
	if _, err := os.Stat(temp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the killed run's temporary file: %v, want it removed by the next run", err)
	}
}

// Today is refused until it settles, naming --partial; with Partial it is written and its
// manifest says it is not complete, so a later run does not skip it.
func TestExportRefusesADayInProgress(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	_, err := export.Run(context.Background(), b.pool, export.Options{Day: b.today, Dir: dir, Format: "parquet"})
	if !errors.Is(err, export.ErrInProgress) || !containsAll(err.Error(), "in progress", "--partial") {
		t.Fatalf("exporting today: %v; want a refusal naming --partial", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused export wrote %d files", len(entries))
	}
	res, err := export.Run(context.Background(), b.pool, export.Options{Day: b.today, Dir: dir, Format: "parquet", Partial: true})
	if err != nil || res.Manifest.Complete || res.Manifest.Tables[0].Rows != 1 {
		t.Fatalf("a partial export of today: %+v, %v; want one snapshot, complete false", res.Manifest, err)
	}
	if res, err := export.Run(context.Background(), b.pool, export.Options{Day: b.today, Dir: dir, Format: "parquet", Partial: true}); err != nil || res.Skipped {
		t.Fatalf("a partial day was skipped on a re-run (%v)", err)
	}
}

// A day that began longer ago than a retention age may have lost rows to retention: its export
// is refused, naming the key, before anything is written; --partial writes what is left,
// marked incomplete. With every age 0 (keep) or shorter than the day's age, it is complete.
func TestExportRefusesADayPastRetention(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	dayBefore := b.yesterday.AddDate(0, 0, -1) // began 48h to 72h ago
	opts := export.Options{Day: dayBefore, Dir: dir, Format: "csv", Settle: settleAtOnce,
		Retention: config.RetentionConfig{Snapshots: 30 * 24 * time.Hour, CandlesHourly: 48 * time.Hour}}
	_, err := export.Run(context.Background(), b.pool, opts)
	if !errors.Is(err, export.ErrPastRetention) || !containsAll(err.Error(), "retention.candles_hourly (48h0m0s)", "--partial") ||
		strings.Contains(err.Error(), "retention.snapshots") {
		t.Fatalf("exporting a day past retention.candles_hourly: %v; want a refusal naming that key alone and --partial", err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("a refused export wrote %d files", len(entries))
	}
	opts.Partial = true
	res, err := export.Run(context.Background(), b.pool, opts)
	if err != nil || res.Manifest.Complete || len(res.Manifest.Tables) != 3 {
		t.Fatalf("a partial export of a day past retention: %+v, %v; want it written, complete false", res.Manifest, err)
	}
	opts.Partial, opts.Retention.CandlesHourly = false, 0
	if res, err := export.Run(context.Background(), b.pool, opts); err != nil || !res.Manifest.Complete {
		t.Fatalf("with the hourly candles kept: %+v, %v; want the day complete", res.Manifest, err)
	}
}

// The counts and every file come from one snapshot of the database: rows of the day committed
// while the export runs are in neither, so each file holds the rows its manifest counts; the
// next run finds the counts changed and writes the day again with them.
func TestAnExportReadsOneSnapshotOfTheDay(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	dir := t.TempDir()
	late := func() {
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := history.InsertSaleRows(ctx, tx, history.SaleRows{ItemIDs: []string{"b"}, At: []time.Time{b.yesterday.Add(15 * time.Hour)},
				Seq: []int32{0}, Qty: []int64{1}, Unit: []int64{70}, Total: []int64{70}})
			return err
		})
		if err != nil {
			t.Error(err)
		}
	}
	opts := export.Options{Day: b.yesterday, Dir: dir, Format: "csv", Version: "test", Settle: settleAtOnce}
	res, err := export.Run(ctx, b.pool, export.AfterCount(opts, late))
	if err != nil {
		t.Fatal(err)
	}
	lines := func(file string) int64 {
		body, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		return int64(strings.Count(string(body), "\n")) - 1 // the header
	}
	for _, f := range res.Manifest.Tables {
		if got := lines(f.File); got != f.Rows {
			t.Errorf("%s holds %d rows, its manifest says %d", f.File, got, f.Rows)
		}
	}
	if sales := res.Manifest.Tables[1]; sales.Table != "auction_sales" || sales.Rows != 3 {
		t.Fatalf("sales in the export: %+v; want the 3 committed before it began", sales)
	}
	again, err := export.Run(ctx, b.pool, opts)
	if err != nil || again.Skipped || again.Manifest.Tables[1].Rows != 4 || lines("auction_sales.csv") != 4 {
		t.Fatalf("the next run: %+v, %v; want the day written again with the late sale", again.Manifest, err)
	}
}

// One day the exporter cannot write does not hold back the others: the turn exports the days
// after it and returns the failing day's error, naming it.
func TestExporterGoesOnPastAFailingDay(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	dayBefore := b.yesterday.AddDate(0, 0, -1)
	// A file where the oldest day's directory goes.
	if err := os.WriteFile(filepath.Join(dir, dayBefore.AddDate(0, 0, -1).Format(time.DateOnly)), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(context.Background(), b.pool, func(tx pgx.Tx) error {
		_, err := history.InsertSaleRows(context.Background(), tx, history.SaleRows{ItemIDs: []string{"a"},
			At: []time.Time{dayBefore.Add(-time.Hour)}, Seq: []int32{0}, Qty: []int64{1}, Unit: []int64{5}, Total: []int64{5}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	e, err := export.NewExporter(b.pool, export.Config{Dir: dir, Format: "csv", Version: "test", Settle: settleAtOnce})
	if err != nil {
		t.Fatal(err)
	}
	turn, err := e.RunOnce(context.Background())
	oldest := dayBefore.AddDate(0, 0, -1).Format(time.DateOnly)
	if err == nil || !containsAll(err.Error(), oldest, "out directory") {
		t.Fatalf("turn error %v; want the oldest day's, naming it", err)
	}
	want := []string{dayBefore.Format(time.DateOnly), b.yesterday.Format(time.DateOnly)}
	if !slices.Equal(turn.Exported, want) {
		t.Fatalf("exported %v past the failing day, want %v", turn.Exported, want)
	}
}

// An out directory that cannot be written fails before anything is removed: a complete export
// already there stays as it was.
func TestExportToAnUnwritableDirectoryLosesNothing(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	b.export(t, dir, "parquet")
	before := checksums(t, dir)
	blocker := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(blocker, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := export.Run(context.Background(), b.pool, export.Options{Day: b.yesterday, Dir: filepath.Join(blocker, "day"), Format: "parquet", Settle: settleAtOnce})
	if err == nil || !containsAll(err.Error(), "out directory") {
		t.Fatalf("an out directory under a file: %v; want an error naming the out directory", err)
	}
	if _, err := export.Run(context.Background(), b.pool, export.Options{Day: b.yesterday, Dir: dir, Format: "xlsx", Settle: settleAtOnce}); err == nil {
		t.Fatal("format xlsx was accepted")
	}
	after := checksums(t, dir)
	if len(after) != len(before) {
		t.Fatalf("failed exports changed the day's files: %d before, %d after", len(before), len(after))
	}
	for name, body := range before {
		if string(after[name]) != string(body) {
			t.Errorf("%s changed", name)
		}
	}
}

// The daemon's exporter writes each settled day holding rows into its own directory, skips
// them on the next turn, and leaves today and days without rows alone.
func TestExporterCatchesUpMissedDays(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	e, err := export.NewExporter(b.pool, export.Config{Dir: dir, Format: "csv", Version: "test"})
	if err != nil {
		t.Fatal(err)
	}
	// Before 01:00 UTC yesterday has not settled yet; the day before always has.
	var settled bool
	if err := b.pool.QueryRow(context.Background(), `SELECT now() >= $1`, b.today.Add(export.SettleDefault)).Scan(&settled); err != nil {
		t.Fatal(err)
	}
	want := []string{b.yesterday.AddDate(0, 0, -1).Format(time.DateOnly)}
	if settled {
		want = append(want, b.yesterday.Format(time.DateOnly))
	}
	turn, err := e.RunOnce(context.Background())
	if err != nil || !slices.Equal(turn.Exported, want) || len(turn.Skipped) != 0 {
		t.Fatalf("first turn: %+v, %v; want %v exported", turn, err, want)
	}
	turn, err = e.RunOnce(context.Background())
	if err != nil || len(turn.Exported) != 0 || !slices.Equal(turn.Skipped, want) {
		t.Fatalf("second turn: %+v, %v; want %v skipped", turn, err, want)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != len(want) {
		t.Fatalf("the exporter made %d day directories, want %d", len(entries), len(want))
	}
	if _, err := export.NewExporter(b.pool, export.Config{Dir: dir, Format: "xml"}); err == nil {
		t.Fatal("an exporter with format xml was built")
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// Retention dropping a day's snapshots after it was exported leaves the export as it was: the
// catch-up and a re-run keep it (saying why) instead of rewriting it with fewer rows, even when
// asked for the other format.
func TestAnExportOutlivesRetention(t *testing.T) {
	b := setup(t)
	dayBefore := b.yesterday.AddDate(0, 0, -1)
	dir := t.TempDir()
	opts := export.Options{Day: dayBefore, Dir: dir, Format: "csv", Version: "test", Settle: settleAtOnce}
	first, err := export.Run(context.Background(), b.pool, opts)
	if err != nil || first.Manifest.Tables[0].Rows != 1 {
		t.Fatalf("exporting the day before yesterday: %+v, %v; want its one snapshot", first.Manifest, err)
	}
	before := checksums(t, dir)
	p, err := partition.New(b.pool, nil, partition.Config{Interval: 24 * time.Hour, Ahead: 48 * time.Hour,
		Tables: []partition.Table{{Name: partition.Snapshots, Retention: 24 * time.Hour}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c, err := history.CountDay(context.Background(), b.pool, dayBefore); err != nil || c.Snapshots != 0 || c.Candles == 0 {
		t.Fatalf("after retention the day holds %+v (%v); want no snapshots and its candles", c, err)
	}
	for _, format := range []string{"csv", "parquet"} {
		opts.Format = format
		res, err := export.Run(context.Background(), b.pool, opts)
		if err != nil || !res.Skipped || !containsAll(res.Kept, "auction_snapshots 0 of 1 rows", "retention") {
			t.Fatalf("%s after retention: %+v, %v; want the export kept, saying retention dropped the snapshots", format, res, err)
		}
	}
	after := checksums(t, dir)
	if !maps.EqualFunc(before, after, func(a, b []byte) bool { return string(a) == string(b) }) {
		t.Fatalf("the export changed after retention: files before %v, after %v", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
	// A file of the export gone too (moved to cold storage): still not rewritten with fewer
	// rows, and the reason says what to do.
	if err := os.Remove(filepath.Join(dir, "price_candles.csv")); err != nil {
		t.Fatal(err)
	}
	opts.Format = "csv"
	res, err := export.Run(context.Background(), b.pool, opts)
	if err != nil || !res.Skipped || !containsAll(res.Kept, "auction_snapshots 0 of 1 rows", "missing or changed", export.ManifestName) {
		t.Fatalf("after retention, with a file missing: %+v, %v; want the export kept, naming what to do", res, err)
	}
	if body, err := os.ReadFile(filepath.Join(dir, "auction_snapshots.csv")); err != nil || string(body) != string(before["auction_snapshots.csv"]) {
		t.Fatalf("the snapshots file changed (%v)", err)
	}
}

// Switching the format rewrites the day in the new format and removes the old format's files
// (a reader globbing the directory reads each table once), also when the switch's first run
// was killed after removing the manifest; temporary files a killed run left are removed.
func TestAnExportInTheOtherFormatReplacesTheFiles(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	b.export(t, dir, "parquet")
	left := filepath.Join(dir, ".auction_sales.csv.tmp-123")
	if err := os.WriteFile(left, []byte("half"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := b.export(t, dir, "csv"); res.Skipped {
		t.Fatal("the day was skipped though another format was asked for")
	}
	want := []string{"auction_sales.csv", "auction_snapshots.csv", export.ManifestName, "price_candles.csv"}
	if got := slices.Sorted(maps.Keys(checksums(t, dir))); !slices.Equal(got, want) {
		t.Fatalf("files after switching to csv: %v, want %v", got, want)
	}
	// Back to parquet, the first run killed once the manifest was gone: the next run removes
	// the csv files although no manifest names them.
	if err := os.Remove(filepath.Join(dir, export.ManifestName)); err != nil {
		t.Fatal(err)
	}
	b.export(t, dir, "parquet")
	want = []string{"auction_sales.parquet", "auction_snapshots.parquet", export.ManifestName, "price_candles.parquet"}
	if got := slices.Sorted(maps.Keys(checksums(t, dir))); !slices.Equal(got, want) {
		t.Fatalf("files after switching back without a manifest: %v, want %v", got, want)
	}
	// Killed after its manifest but before removing the old format's files: the next run
	// finds the day complete and skips it, and removes them all the same.
	if err := os.WriteFile(filepath.Join(dir, "auction_sales.csv"), []byte("stale"), 0o644); err != nil {
		t.Fatal(err)
	}
	if res := b.export(t, dir, "parquet"); !res.Skipped {
		t.Fatal("a complete day in the same format was written again")
	}
	if got := slices.Sorted(maps.Keys(checksums(t, dir))); !slices.Equal(got, want) {
		t.Fatalf("files after a skipped run over a stale csv file: %v, want %v", got, want)
	}
}

// A partial run never replaces a complete export: once replaced, nothing would stop a later
// partial run from writing the day with fewer rows.
func TestAPartialRunKeepsACompleteExport(t *testing.T) {
	b := setup(t)
	dir := t.TempDir()
	b.export(t, dir, "parquet")
	before := checksums(t, dir)
	// Past a retention age, the day can only be written partial.
	res, err := export.Run(context.Background(), b.pool, export.Options{Day: b.yesterday, Dir: dir, Format: "csv", Version: "test",
		Settle: settleAtOnce, Partial: true, Retention: config.RetentionConfig{Snapshots: time.Hour}})
	if err != nil || !res.Skipped || !res.Manifest.Complete || !strings.Contains(res.Kept, "a complete export of the day is kept") {
		t.Fatalf("partial run over a complete export: %+v, %v; want it kept, saying why", res, err)
	}
	if after := checksums(t, dir); !maps.EqualFunc(before, after, bytes.Equal) {
		t.Fatalf("the complete export's files changed: %v → %v", before, after)
	}
}

// Synthetic fixtures' rows (seed:synthetic's, integration tests') never reach an export: the
// day's counts leave them out as its files do, so each file holds the rows its manifest counts.
func TestAnExportLeavesFixturesOut(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	want, err := history.CountDay(ctx, b.pool, b.yesterday)
	if err != nil {
		t.Fatal(err)
	}
	fixtures := []string{"seed-0001", "integration-item-1"}
	storetest.Items(t, b.pool, storetest.Item{ID: fixtures[0]}, storetest.Item{ID: fixtures[1]})
	for _, id := range fixtures {
		storetest.Snapshots(t, b.pool, storetest.Snapshot{ItemID: id, CollectedAt: storetest.At(b.yesterday.Add(6 * time.Hour))})
		storetest.Sales(t, b.pool, storetest.Sale{ItemID: id, SoldAt: storetest.At(b.yesterday.Add(7 * time.Hour)), UnitPrice: 5})
	}
	if err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error { return history.RebuildCandles(ctx, tx, fixtures) }); err != nil {
		t.Fatal(err)
	}
	var stored int64
	if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM price_candles WHERE item_id = ANY($1) AND bucket >= $2 AND bucket < $3`,
		fixtures, b.yesterday, b.today).Scan(&stored); err != nil || stored == 0 {
		t.Fatalf("the fixtures have %d candles in the day (%v); the test needs some", stored, err)
	}
	if got, err := history.CountDay(ctx, b.pool, b.yesterday); err != nil || got != want {
		t.Fatalf("with fixtures the day counts %+v (%v); want %+v, as without them", got, err, want)
	}
	dir := t.TempDir()
	res := b.export(t, dir, "csv")
	for _, f := range res.Manifest.Tables {
		body, err := os.ReadFile(filepath.Join(dir, f.File))
		if err != nil {
			t.Fatal(err)
		}
		if lines := int64(strings.Count(string(body), "\n")) - 1; lines != f.Rows {
			t.Errorf("%s holds %d rows, its manifest says %d", f.File, lines, f.Rows)
		}
		for _, id := range fixtures {
			if strings.Contains(string(body), id) {
				t.Errorf("%s holds the fixture %s", f.File, id)
			}
		}
	}
}

// A day is complete only once collection has caught up past its end: an item tracked during
// the day and not collected since (a provider pause across midnight, a backlog) may still
// bring sales of the day, which its next collection stores. Until then the day is in
// progress, the exporter waits without an error, and --partial marks it incomplete.
func TestADayWaitsForCollectionToCatchUp(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	if _, err := b.pool.Exec(ctx, `UPDATE tracked_items SET created_at = $1, last_attempt_at = $2`,
		b.yesterday.Add(-time.Hour), b.today.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	opts := export.Options{Day: b.yesterday, Dir: dir, Format: "csv", Version: "test", Settle: settleAtOnce}
	_, err := export.Run(ctx, b.pool, opts)
	if !errors.Is(err, export.ErrInProgress) || !containsAll(err.Error(), "3 tracked items have not been collected since the day ended", "--partial") {
		t.Fatalf("export with every item last tried before midnight: %v; want in progress, naming the items", err)
	}
	partial := opts
	partial.Partial = true
	if res, err := export.Run(ctx, b.pool, partial); err != nil || res.Manifest.Complete {
		t.Fatalf("--partial: %+v, %v; want an incomplete manifest", res.Manifest, err)
	}
	e, err := export.NewExporter(b.pool, export.Config{Dir: t.TempDir(), Format: "csv", Version: "test", Settle: settleAtOnce})
	if err != nil {
		t.Fatal(err)
	}
	if turn, err := e.RunOnce(ctx); err != nil || !slices.Contains(turn.Waiting, b.yesterday.Format(time.DateOnly)) ||
		!turn.Newest.Equal(b.yesterday.AddDate(0, 0, -1)) {
		t.Fatalf("exporter turn: %+v, %v; want yesterday waiting, no error, complete up to the day before (no rows)", turn, err)
	}
	// Tried after midnight, one of them failing (it may fail for good: it is not waited for),
	// the day is complete; tried within export.CaughtUpAfter of midnight, the collection may
	// have left the day's last seconds of sales for the next one, so it is not yet.
	tried := func(at time.Time) {
		t.Helper()
		if _, err := b.pool.Exec(ctx, `UPDATE tracked_items SET last_attempt_at = $1,
			last_outcome = CASE item_id WHEN 'a' THEN 'transient' ELSE 'ok' END,
			failure_streak = CASE item_id WHEN 'a' THEN 1 ELSE 0 END`, at); err != nil {
			t.Fatal(err)
		}
	}
	tried(b.today.Add(history.SalesSettle))
	if _, err := export.Run(ctx, b.pool, opts); !errors.Is(err, export.ErrInProgress) {
		t.Fatalf("every item tried %s after midnight: %v; want in progress (its last seconds' sales may be held back)", history.SalesSettle, err)
	}
	tried(b.today.Add(export.CaughtUpAfter))
	// A DORMANT item is never collected: it holds no day back.
	dormant := func(on bool) {
		t.Helper()
		if _, err := b.pool.Exec(ctx, `UPDATE tracked_items SET collection_tier = CASE WHEN $1 THEN 'DORMANT' ELSE 'ACTIVE_3M' END,
			next_collect_at = CASE WHEN $1 THEN NULL ELSE now() END, last_attempt_at = CASE WHEN $1 THEN NULL ELSE $2::timestamptz END
			WHERE item_id = 'c'`, on, b.today.Add(export.CaughtUpAfter)); err != nil {
			t.Fatal(err)
		}
	}
	dormant(true)
	if res, err := export.Run(ctx, b.pool, opts); err != nil || !res.Manifest.Complete || res.Behind != 0 {
		t.Fatalf("after every item was tried since midnight but a DORMANT one: %+v, %v; want complete", res.Manifest, err)
	}
	dormant(false)
	if turn, err := e.RunOnce(ctx); err != nil || !turn.Newest.Equal(b.yesterday) {
		t.Fatalf("exporter turn once caught up: %+v, %v; want complete up to yesterday", turn, err)
	}
	// The wait is bounded: a day that ended more than export.CatchUpWaitDefault ago is complete
	// although no item was tried since (collection stopped for good), and says how many were not.
	if _, err := b.pool.Exec(ctx, `UPDATE tracked_items SET created_at = $1, last_attempt_at = NULL`, b.yesterday.Add(-48*time.Hour)); err != nil {
		t.Fatal(err)
	}
	old := opts
	old.Day, old.Dir = b.yesterday.AddDate(0, 0, -1), t.TempDir()
	if res, err := export.Run(ctx, b.pool, old); err != nil || !res.Manifest.Complete || res.Behind != 3 {
		t.Fatalf("a day past the wait: %+v (behind %d), %v; want complete with 3 items behind", res.Manifest, res.Behind, err)
	}
}
