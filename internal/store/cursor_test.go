package store_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// EachRow hands every row over, in batches, and a callback's error comes back as it was with
// the cursor closed: the transaction can read through a cursor of that name again.
func TestEachRowReadsEveryRowAndClosesItsCursorOnAnError(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	n := 2*store.CursorBatch + 7
	read := func() ([]int, error) {
		var got []int
		err := store.EachRow(ctx, tx, "numbers", `SELECT g FROM generate_series(1, $1::int) g ORDER BY g`, []any{n}, func(r pgx.Rows) error {
			var v int
			if err := r.Scan(&v); err != nil {
				return err
			}
			got = append(got, v)
			return nil
		})
		return got, err
	}
	got, err := read()
	if err != nil || len(got) != n || got[0] != 1 || got[n-1] != n {
		t.Fatalf("read %d rows (%v), want 1 to %d", len(got), err, n)
	}
	stop := errors.New("enough")
	err = store.EachRow(ctx, tx, "numbers", `SELECT g FROM generate_series(1, $1::int) g`, []any{n}, func(pgx.Rows) error { return stop })
	if err != stop {
		t.Fatalf("a callback's error came back as %v, want it as it was", err)
	}
	if got, err := read(); err != nil || len(got) != n {
		t.Fatalf("read again after a callback's error: %d rows, %v; want every row (the cursor closed)", len(got), err)
	}
}
