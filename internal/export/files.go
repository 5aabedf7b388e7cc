package export

import (
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/parquet-go/parquet-go"

	"github.com/duecollector/duecollector/internal/history"
)

// table is one exported table: its name and how to write its day in a format.
type table struct {
	name  string
	write func(ctx context.Context, db DB, day time.Time, format string, w io.Writer) (int64, error)
}

var tables = []table{
	{"auction_snapshots", writer(history.EachSnapshotOfDay)},
	{"auction_sales", writer(history.EachSaleOfDay)},
	{"price_candles", writer(history.EachCandleOfDay)},
}

// each is a history day read: it calls fn with every row of the day, in key order.
type each[R any] func(ctx context.Context, db history.Reader, day time.Time, fn func(R) error) error

// parquetBatch is the rows handed to the Parquet writer at once.
const parquetBatch = 1024

// parquetRowGroup bounds a row group: the writer holds one in memory until it is flushed, and
// readers (DuckDB, Spark) split work by row group.
const parquetRowGroup = 1 << 20

func writer[R any](read each[R]) func(context.Context, DB, time.Time, string, io.Writer) (int64, error) {
	return func(ctx context.Context, db DB, day time.Time, format string, w io.Writer) (int64, error) {
		if format == "csv" {
			return writeCSV(ctx, db, day, read, w)
		}
		return writeParquet(ctx, db, day, read, w)
	}
}

func writeParquet[R any](ctx context.Context, db DB, day time.Time, read each[R], w io.Writer) (int64, error) {
	pw := parquet.NewGenericWriter[R](w, parquet.Compression(&parquet.Zstd), parquet.MaxRowsPerRowGroup(parquetRowGroup))
	var n int64
	batch := make([]R, 0, parquetBatch)
	flush := func() error {
		_, err := pw.Write(batch)
		batch = batch[:0]
		return err
	}
	err := read(ctx, db, day, func(r R) error {
		n++
		if batch = append(batch, r); len(batch) == cap(batch) {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	if cerr := pw.Close(); err == nil {
		err = cerr
	}
	return n, err
}

// writeCSV writes RFC 4180 CSV: a header of the Parquet column names, CRLF line ends, empty
// fields for NULL, timestamps in RFC 3339 UTC with microseconds, floats in the shortest form
// that reads back exactly.
func writeCSV[R any](ctx context.Context, db DB, day time.Time, read each[R], w io.Writer) (int64, error) {
	cw := csv.NewWriter(w)
	cw.UseCRLF = true
	typ := reflect.TypeFor[R]()
	record := make([]string, typ.NumField())
	for i := range record {
		record[i], _, _ = strings.Cut(typ.Field(i).Tag.Get("parquet"), ",")
	}
	if err := cw.Write(record); err != nil {
		return 0, err
	}
	var n int64
	err := read(ctx, db, day, func(r R) error {
		n++
		v := reflect.ValueOf(r)
		for i := range record {
			record[i] = csvField(v.Field(i))
		}
		return cw.Write(record)
	})
	cw.Flush()
	if err == nil {
		err = cw.Error()
	}
	return n, err
}

func csvField(v reflect.Value) string {
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	switch x := v.Interface().(type) {
	case time.Time:
		return x.UTC().Format("2006-01-02T15:04:05.000000Z")
	case string:
		return x
	case int64:
		return strconv.FormatInt(x, 10)
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64)
	case bool:
		return strconv.FormatBool(x)
	}
	panic(fmt.Sprintf("export: no CSV form for %s", v.Type()))
}
