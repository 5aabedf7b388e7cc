package outbox

import (
	"context"
	"slices"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The relay decodes its rows from pgx's binary values itself; the text forms (which pgx's
// simple protocol returns) go through pgx's Scan. Both must give the same rows.
func TestScanPendingDecodesLikePgx(t *testing.T) {
	pool := newDB(t)
	enqueue(t, pool, snapshotEvents(3, 2))
	ctx := context.Background()
	query := `SELECT 7::bigint, ` + pendingColumns + `, true FROM outbox o ORDER BY o.id`
	read := func(mode pgx.QueryExecMode) []pendingRow {
		t.Helper()
		rows, err := pool.Query(ctx, query, mode)
		if err != nil {
			t.Fatal(err)
		}
		out, err := scanPending(rows, 0)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	fast, scanned := read(pgx.QueryExecModeCacheStatement), read(pgx.QueryExecModeSimpleProtocol)
	if len(fast) != 6 || len(scanned) != 6 {
		t.Fatalf("read %d and %d rows, want 6", len(fast), len(scanned))
	}
	for i := range fast {
		f, s := fast[i], scanned[i]
		if f.Entry != 7 || !f.Whole || !s.Whole || f.ID != s.ID || f.EventID != s.EventID || f.Lane != s.Lane || !f.CreatedAt.Equal(s.CreatedAt) ||
			!slices.Equal(f.EventType, s.EventType) || !slices.Equal(f.ItemID, s.ItemID) || !slices.Equal(f.Payload, s.Payload) {
			t.Errorf("row %d: decoded %+v, pgx scanned %+v", i, f, s)
		}
		if f.EventID == ([16]byte{}) || len(f.Payload) == 0 || f.CreatedAt.IsZero() {
			t.Errorf("row %d: empty fields: %+v", i, f)
		}
	}
}
