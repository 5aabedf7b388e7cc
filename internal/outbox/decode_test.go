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

// A run of whole entries of consecutive ids is read with one range scan (headSpans); the
// rows, their entries and whether each entry was read whole must be what reading entry by
// entry gives.
func TestRangeReadMatchesEntryRead(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	for range 4 {
		enqueue(t, pool, snapshotEvents(50, 1)) // entries of 50 consecutive ids
	}
	var entries []int64
	if err := pool.QueryRow(ctx, `SELECT array_agg(entry_id ORDER BY entry_id) FROM outbox_queue`).Scan(&entries); err != nil || len(entries) != 4 {
		t.Fatalf("entries %v (%v)", entries, err)
	}
	all := make([]int16, Lanes)
	for i := range all {
		all[i] = int16(i)
	}
	first, err := fetchEntries(ctx, pool, read{lanes: all, limit: 120, entries: 120})
	if err != nil || len(first) != 120 {
		t.Fatalf("%d rows (%v)", len(first), err)
	}
	cut := first[len(first)-1]
	for _, rd := range []read{
		{lanes: all, limit: 120, entries: 120},                                                         // two whole entries and part of a third
		{lanes: all, limit: 200, entries: 200, exclude: entries[:2], after: rowPos{cut.Entry, cut.ID}}, // the rest of the third, the fourth
		{lanes: all, limit: 1, entries: 1},
	} {
		spans, err := headSpans(ctx, pool, rd)
		if err != nil || len(spans) == 0 {
			t.Fatalf("read %+v: no range read (%v)", rd, err)
		}
		byRange, err := fetchPending(ctx, pool, rd)
		if err != nil {
			t.Fatal(err)
		}
		byEntry, err := fetchEntries(ctx, pool, rd)
		if err != nil {
			t.Fatal(err)
		}
		if len(byRange) != len(byEntry) || len(byRange) == 0 {
			t.Fatalf("read %+v: %d rows by range, %d by entry", rd, len(byRange), len(byEntry))
		}
		for i := range byRange {
			r, e := byRange[i], byEntry[i]
			if r.ID != e.ID || r.Entry != e.Entry || r.Whole != e.Whole || !slices.Equal(r.Payload, e.Payload) {
				t.Fatalf("read %+v, row %d: by range %d/%d/%v, by entry %d/%d/%v", rd, i, r.Entry, r.ID, r.Whole, e.Entry, e.ID, e.Whole)
			}
		}
	}
	// Lanes split between relays: entries are shared, read entry by entry.
	if spans, err := headSpans(ctx, pool, read{lanes: all[:8], limit: 120, entries: 120}); err != nil || len(spans) != 0 {
		t.Fatalf("half the lanes: spans %v (%v)", spans, err)
	}
}
