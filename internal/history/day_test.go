package history_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

// A day read in a transaction (an export's snapshot) comes through a cursor a batch at a time:
// while the reader is busy with, or frozen over, what it has, its session is idle in the
// transaction, where an idle bound ends it, not sending the rest of a day that fills the
// sockets (active, beyond every bound, holding the snapshot vacuum and the drops wait on). All
// of the day's rows still come, in order.
func TestADaysReadInATransactionLeavesTheSessionIdle(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	var day time.Time
	if err := pool.QueryRow(ctx, `SELECT date_bin('1 day', now(), '2000-01-01 00:00:00+00') - interval '1 day'`).Scan(&day); err != nil {
		t.Fatal(err)
	}
	const n = 200_000 // some tens of MB streamed: more than the sockets hold
	if _, err := pool.Exec(ctx, `
		INSERT INTO auction_sales (item_id, sold_at, seq, quantity, unit_price, total_price)
		SELECT 'item-' || lpad((g % 100)::text, 3, '0'), $1::timestamptz + g * interval '400 ms', 0, 1, g, g
		FROM generate_series(1, $2) g`, day, n); err != nil {
		t.Fatal(err)
	}
	tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var pid int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var seen int
	var state string
	var last history.SaleRow
	err = history.EachSaleOfDay(ctx, tx, day, func(s history.SaleRow) error {
		if seen == 0 {
			// The reader holds its first row: what is its session doing meanwhile? Sending the
			// rest of its fetch at first (a loaded machine may take a moment); without
			// batches it stays active, blocked on a full socket, for as long as the reader holds.
			testkit.Eventually(t, 10*time.Second, "the reader's session done sending", func() bool {
				if err := pool.QueryRow(ctx, `SELECT state FROM pg_stat_activity WHERE pid = $1`, pid).Scan(&state); err != nil {
					t.Fatal(err)
				}
				return state != "active"
			})
		}
		if seen > 0 && (s.ItemID < last.ItemID || s.ItemID == last.ItemID && !s.SoldAt.After(last.SoldAt)) {
			t.Fatalf("row %d (%s %s) after (%s %s): out of order", seen, s.ItemID, s.SoldAt, last.ItemID, last.SoldAt)
		}
		seen, last = seen+1, s
		return nil
	})
	if err != nil || seen != n {
		t.Fatalf("read %d of %d sales: %v", seen, n, err)
	}
	if state != "idle in transaction" {
		t.Fatalf("while the reader held its first row its session was %q, want idle in transaction", state)
	}
}

// An export's row types hold every column of their tables but the write-back's bookkeeping
// (claim_token, sales_value), in the tables' order: a column added to a table and not to its
// row type would be missing from every export without a word.
func TestExportRowsHoldEveryColumnOfTheirTables(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	for _, c := range []struct {
		table   string
		row     reflect.Type
		skipped []string
	}{
		{"auction_snapshots", reflect.TypeFor[history.SnapshotRow](), []string{"claim_token"}},
		{"auction_sales", reflect.TypeFor[history.SaleRow](), []string{}},
		{"price_candles", reflect.TypeFor[history.CandleRow](), []string{"sales_value"}},
	} {
		rows, _ := pool.Query(context.Background(), `SELECT column_name::text FROM information_schema.columns
			WHERE table_schema = current_schema() AND table_name = $1 AND NOT column_name = ANY ($2::text[])
			ORDER BY ordinal_position`, c.table, c.skipped)
		want, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || len(want) == 0 {
			t.Fatalf("columns of %s: %v (%d)", c.table, err, len(want))
		}
		var got []string
		for f := range c.row.Fields() {
			name, _, _ := strings.Cut(f.Tag.Get("parquet"), ",")
			got = append(got, name)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s exports %v, the table has %v", c.row.Name(), got, want)
		}
	}
}
