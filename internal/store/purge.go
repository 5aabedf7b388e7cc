package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Execer runs statements: a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Purged is how many rows a purge deleted from one table.
type Purged struct {
	Table   string
	Deleted int64
}

// ItemPurge deletes some items' rows from one item-keyed table: IDs finds the item ids in one
// scan, Delete deletes a batch of their rows through the item_id index ($1 the ids, $2 the
// batch size), so each statement holds its locks briefly however many rows go.
type ItemPurge struct{ Table, IDs, Delete string }

// Purge runs each purge in order, batch rows per statement, and returns every table's count,
// those done before a failure included.
func Purge(ctx context.Context, db Execer, batch int, purges ...ItemPurge) ([]Purged, error) {
	var out []Purged
	for _, p := range purges {
		n, err := p.run(ctx, db, batch)
		out = append(out, Purged{Table: p.Table, Deleted: n})
		if err != nil {
			return out, fmt.Errorf("%s: %w", p.Table, err)
		}
	}
	return out, nil
}

func (p ItemPurge) run(ctx context.Context, db Execer, batch int) (int64, error) {
	rows, _ := db.Query(ctx, p.IDs)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	var total int64
	for {
		tag, err := db.Exec(ctx, p.Delete, ids, batch)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batch) {
			return total, nil
		}
	}
}
