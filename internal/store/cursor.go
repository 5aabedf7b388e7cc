package store

import (
	"context"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// CursorBatch is how many rows EachRow fetches at once: few enough that the server has sent
// them into the sockets' buffers by the time the reader takes them. 500 rows of the widest
// reads (about 230 bytes each) fit the smallest of those buffers, a Unix socket's (about
// 208 kB on Linux, sender's and receiver's together).
const CursorBatch = 500

// EachRow runs query with args in tx through a cursor named name and calls fn with each row,
// CursorBatch rows a fetch. A reader frozen mid-read (SIGSTOP, a paused VM) then leaves its
// session idle in the transaction, where the idle bound ends it and what it holds (its locks,
// its snapshot). One statement streaming every row would leave the session active, blocked in
// a send to the full sockets that no bound reaches, holding all of that for as long as the
// reader stays frozen. Each query needs a name of its own: pgx caches a statement's result
// shape by its text, and one FETCH text for queries of different columns would be read with
// another's shape. Errors come back as they were, fn's and the database's; the cursor is
// closed whenever the transaction can still run a statement.
func EachRow(ctx context.Context, tx pgx.Tx, name, query string, args []any, fn func(pgx.Rows) error) error {
	// Every row is read, so the query is planned for all of them, as one statement would be,
	// not for the first tenth (cursor_tuple_fraction's default).
	if _, err := tx.Exec(ctx, `SELECT set_config('cursor_tuple_fraction', '1', true)`); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "DECLARE "+name+" NO SCROLL CURSOR FOR "+query, args...); err != nil {
		return err
	}
	fetch := "FETCH " + strconv.Itoa(CursorBatch) + " FROM " + name
	for {
		rows, err := tx.Query(ctx, fetch)
		if err != nil {
			return err
		}
		n := 0
		for rows.Next() {
			n++
			if err := fn(rows); err != nil {
				rows.Close()
				if rows.Err() == nil {
					_, _ = tx.Exec(ctx, "CLOSE "+name)
				}
				return err
			}
		}
		if err := rows.Err(); err != nil {
			return err
		}
		if n < CursorBatch {
			break
		}
	}
	_, err := tx.Exec(ctx, "CLOSE "+name)
	return err
}
