package history

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/store"
)

// The rows of one UTC day, as exports publish them: every stored column a consumer can use
// (claim tokens and sales_value, bookkeeping of the write-back, are left out). Tags name the
// Parquet columns; timestamps are microseconds in UTC, as PostgreSQL stores them.

// SnapshotRow is one row of auction_snapshots.
type SnapshotRow struct {
	SnapshotID        int64      `parquet:"snapshot_id"`
	ItemID            string     `parquet:"item_id"`
	CollectedAt       time.Time  `parquet:"collected_at,timestamp(microsecond)"`
	Tier              string     `parquet:"tier"`
	Reason            string     `parquet:"reason"`
	ListingCount      int64      `parquet:"listing_count"`
	ListingQuantity   int64      `parquet:"listing_quantity"`
	LowestUnitPrice   *int64     `parquet:"lowest_unit_price,optional"`
	MedianUnitPrice   *int64     `parquet:"median_unit_price,optional"`
	WeightedUnitPrice *float64   `parquet:"weighted_unit_price,optional"`
	APIAveragePrice   *int64     `parquet:"api_average_price,optional"`
	SalesCount        int64      `parquet:"sales_count"`
	SalesQuantity     int64      `parquet:"sales_quantity"`
	SalesVWAP         *float64   `parquet:"sales_vwap,optional"`
	ListingsTruncated bool       `parquet:"listings_truncated"`
	Packed            bool       `parquet:"packed"`
	PreviousSeenAt    *time.Time `parquet:"previous_seen_at,optional,timestamp(microsecond)"`
}

// SaleRow is one row of auction_sales.
type SaleRow struct {
	ItemID      string    `parquet:"item_id"`
	SoldAt      time.Time `parquet:"sold_at,timestamp(microsecond)"`
	Seq         int64     `parquet:"seq"`
	Quantity    int64     `parquet:"quantity"`
	UnitPrice   int64     `parquet:"unit_price"`
	TotalPrice  int64     `parquet:"total_price"`
	FirstSeenAt time.Time `parquet:"first_seen_at,timestamp(microsecond)"`
}

// CandleRow is one row of price_candles.
type CandleRow struct {
	ItemID        string     `parquet:"item_id"`
	Resolution    string     `parquet:"resolution"`
	Bucket        time.Time  `parquet:"bucket,timestamp(microsecond)"`
	Snapshots     int64      `parquet:"snapshots"`
	OpenAt        *time.Time `parquet:"open_at,optional,timestamp(microsecond)"`
	OpenPrice     *int64     `parquet:"open_price,optional"`
	HighPrice     *int64     `parquet:"high_price,optional"`
	LowPrice      *int64     `parquet:"low_price,optional"`
	CloseAt       *time.Time `parquet:"close_at,optional,timestamp(microsecond)"`
	ClosePrice    *int64     `parquet:"close_price,optional"`
	ListingsMin   *int64     `parquet:"listings_min,optional"`
	ListingsMax   *int64     `parquet:"listings_max,optional"`
	SalesCount    int64      `parquet:"sales_count"`
	SalesQuantity int64      `parquet:"sales_quantity"`
	SalesVWAP     *float64   `parquet:"sales_vwap,optional"`
}

// Day's statements: one ordered range over the day's partitions each, in key order, so a
// re-read yields the same rows in the same order and pgx streams them rather than the day
// being held in memory. $1 is the day's start, $2 the next day's. Synthetic fixtures are
// left out (the schema's synthetic_item), from the counts too: exports are for consumers, and
// a manifest counts what its files hold. Each selects its row type's columns (dayColumns), so a
// column added to a row type is read and exported with nothing else to change.
var (
	daySnapshots = `SELECT ` + dayColumns[SnapshotRow]() + `
		FROM auction_snapshots WHERE collected_at >= $1 AND collected_at < $2 AND NOT synthetic_item(item_id)
		ORDER BY item_id, collected_at, snapshot_id`
	daySales = `SELECT ` + dayColumns[SaleRow]() + `
		FROM auction_sales WHERE sold_at >= $1 AND sold_at < $2 AND NOT synthetic_item(item_id)
		ORDER BY item_id, sold_at, seq`
	// A day's candles are its 24 hours and the day itself.
	dayCandles = `SELECT ` + dayColumns[CandleRow]() + `
		FROM price_candles WHERE bucket >= $1 AND bucket < $2 AND NOT synthetic_item(item_id)
		ORDER BY item_id, resolution, bucket`
)

const dayCounts = `
		SELECT (SELECT count(*) FROM auction_snapshots WHERE collected_at >= $1 AND collected_at < $2 AND NOT synthetic_item(item_id)),
		       (SELECT count(*) FROM auction_sales WHERE sold_at >= $1 AND sold_at < $2 AND NOT synthetic_item(item_id)),
		       (SELECT count(*) FROM price_candles WHERE bucket >= $1 AND bucket < $2 AND NOT synthetic_item(item_id))`

// dayColumns is R's columns in field order: each field's Parquet name, which is its column's.
func dayColumns[R any]() string {
	var cols []string
	for f := range reflect.TypeFor[R]().Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("parquet"), ",")
		cols = append(cols, name)
	}
	return strings.Join(cols, ", ")
}

// scanDay scans a row of dayColumns[R] into its fields, in order.
func scanDay[R any](r pgx.Rows, out *R) (err error) {
	*out, err = pgx.RowToStructByPos[R](r)
	return err
}

// DayCounts is how many rows each history table holds for one UTC day, fixtures left out.
type DayCounts struct {
	Snapshots, Sales, Candles int64
}

// CountDay counts the rows of the UTC day starting at day that an export holds.
func CountDay(ctx context.Context, db Reader, day time.Time) (DayCounts, error) {
	var c DayCounts
	if err := db.QueryRow(ctx, dayCounts, day, day.AddDate(0, 0, 1)).Scan(&c.Snapshots, &c.Sales, &c.Candles); err != nil {
		return c, fmt.Errorf("count the rows of %s: %w", day.Format(time.DateOnly), err)
	}
	return c, nil
}

// EachSnapshotOfDay calls fn with every snapshot collected in the UTC day starting at day, by
// item, then time.
func EachSnapshotOfDay(ctx context.Context, db Reader, day time.Time, fn func(SnapshotRow) error) error {
	return eachOfDay(ctx, db, "snapshots", daySnapshots, day, fn, scanDay[SnapshotRow])
}

// EachSaleOfDay calls fn with every sale sold in the UTC day starting at day, by item, then
// time and position.
func EachSaleOfDay(ctx context.Context, db Reader, day time.Time, fn func(SaleRow) error) error {
	return eachOfDay(ctx, db, "sales", daySales, day, fn, scanDay[SaleRow])
}

// EachCandleOfDay calls fn with the UTC day's hourly candles and its daily one, by item,
// resolution and bucket.
func EachCandleOfDay(ctx context.Context, db Reader, day time.Time, fn func(CandleRow) error) error {
	return eachOfDay(ctx, db, "candles", dayCandles, day, fn, scanDay[CandleRow])
}

func eachOfDay[R any](ctx context.Context, db Reader, what, sql string, day time.Time, fn func(R) error,
	scan func(pgx.Rows, *R) error) error {
	if tx, ok := db.(pgx.Tx); ok {
		return eachOfDayInBatches(ctx, tx, what, sql, day, fn, scan)
	}
	rows, err := db.Query(ctx, sql, day, day.AddDate(0, 0, 1))
	if err != nil {
		return fmt.Errorf("read the %s of %s: %w", what, day.Format(time.DateOnly), err)
	}
	defer rows.Close()
	for rows.Next() {
		var r R
		if err := scan(rows, &r); err != nil {
			return fmt.Errorf("read the %s of %s: %w", what, day.Format(time.DateOnly), err)
		}
		if err := fn(r); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("read the %s of %s: %w", what, day.Format(time.DateOnly), err)
	}
	return nil
}

// eachOfDayInBatches is eachOfDay through a cursor (store.EachRow): a reader frozen mid-day
// (SIGSTOP, a paused VM) leaves its session idle in the transaction, where the export's idle
// bound ends it and its snapshot, rather than blocked in a send that no bound reaches while
// vacuum and the retention drops wait behind it. The day's bounds are written into the
// cursor's query as literals (times this package formats, nothing else). One cursor per table:
// each query's FETCH needs its own name.
func eachOfDayInBatches[R any](ctx context.Context, tx pgx.Tx, what, sql string, day time.Time, fn func(R) error,
	scan func(pgx.Rows, *R) error) error {
	lit := func(t time.Time) string { return "'" + t.UTC().Format(time.RFC3339Nano) + "'::timestamptz" }
	query := strings.NewReplacer("$1", lit(day), "$2", lit(day.AddDate(0, 0, 1))).Replace(sql)
	fnFailed := false // fn's own error comes back as it was; the rest say what was read
	err := store.EachRow(ctx, tx, "day_"+what, query, nil, func(rows pgx.Rows) error {
		var r R
		if err := scan(rows, &r); err != nil {
			return err
		}
		err := fn(r)
		fnFailed = err != nil
		return err
	})
	if err != nil && !fnFailed {
		return fmt.Errorf("read the %s of %s: %w", what, day.Format(time.DateOnly), err)
	}
	return err
}
