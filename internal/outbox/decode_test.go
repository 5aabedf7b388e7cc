package outbox

import (
	"bytes"
	"context"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/segmentio/kafka-go"
)

// The relay decodes its rows from pgx's binary values itself; the text forms (which pgx's
// simple protocol returns) go through pgx's Scan. Both must give the same rows, with the
// entry columns of an entry-by-entry read and without them (a range read).
func TestScanPendingDecodesLikePgx(t *testing.T) {
	pool := newDB(t)
	enqueue(t, pool, snapshotEvents(3, 2))
	ctx := context.Background()
	for _, withEntry := range []bool{true, false} {
		query := `SELECT ` + pendingColumns + ` FROM outbox o ORDER BY o.id`
		if withEntry {
			query = `SELECT 7::bigint, ` + pendingColumns + `, true FROM outbox o ORDER BY o.id`
		}
		read := func(mode pgx.QueryExecMode) []pendingRow {
			t.Helper()
			rows, err := pool.Query(ctx, query, mode)
			if err != nil {
				t.Fatal(err)
			}
			out, err := scanPending(rows, 0, &batchMem{})
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
			if f.ID != s.ID || f.EventID != s.EventID || f.Lane != s.Lane || !f.CreatedAt.Equal(s.CreatedAt) ||
				!slices.Equal(f.EventType, s.EventType) || !slices.Equal(f.ItemID, s.ItemID) || !slices.Equal(f.Payload, s.Payload) {
				t.Errorf("row %d: decoded %+v, pgx scanned %+v", i, f, s)
			}
			if withEntry && (f.Entry != 7 || s.Entry != 7 || !f.Whole || !s.Whole) || !withEntry && (f.Entry != 0 || f.Whole) {
				t.Errorf("row %d (entry columns %v): entry %d/%d, whole %v/%v", i, withEntry, f.Entry, s.Entry, f.Whole, s.Whole)
			}
			if f.EventID == ([16]byte{}) || len(f.Payload) == 0 || f.CreatedAt.IsZero() || f.ID == 0 {
				t.Errorf("row %d: empty fields: %+v", i, f)
			}
		}
	}
	rows, err := pool.Query(ctx, `SELECT o.id, o.payload FROM outbox o`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := scanPending(rows, 0, &batchMem{}); err == nil || !strings.Contains(err.Error(), "2 columns") {
		t.Errorf("a read of 2 columns: %v, want an error naming the count", err)
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
	var entries int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM outbox_queue`).Scan(&entries); err != nil || entries != 4 {
		t.Fatalf("%d entries (%v)", entries, err)
	}
	all := allLanes()
	first, err := fetchEntries(ctx, pool, read{lanes: all, limit: 120, entries: 120})
	if err != nil || len(first) != 120 {
		t.Fatalf("%d rows (%v)", len(first), err)
	}
	for _, rd := range []read{
		{lanes: all, limit: 120, entries: 120},                            // two whole entries and part of a third
		{lanes: all, limit: 200, entries: 200, inFlight: inFlight(first)}, // the rest of the third, the fourth
		{lanes: all, limit: 1, entries: 1},
	} {
		spans, drained, err := headSpans(ctx, pool, rd)
		if err != nil || len(spans) == 0 || drained {
			t.Fatalf("read %+v: no range read (drained %v, %v)", rd, drained, err)
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
	if spans, drained, err := headSpans(ctx, pool, read{lanes: all[:8], limit: 120, entries: 120}); err != nil || len(spans) != 0 || drained {
		t.Fatalf("half the lanes: spans %v, drained %v (%v)", spans, drained, err)
	}
}

// At the end of a pass the listing alone says there is nothing to read (every entry on its
// way, or none), so the costlier entry-by-entry read is not run just to find nothing; with
// more entries than the listing may hold, or one still to read, it is not drained.
func TestListingSaysWhenLanesAreDrained(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	all := allLanes()
	drained := func(rd read) bool {
		t.Helper()
		spans, drained, err := headSpans(ctx, pool, rd)
		if err != nil || drained && len(spans) > 0 {
			t.Fatalf("read %+v: spans %v, drained (%v)", rd, spans, err)
		}
		return drained
	}
	if !drained(read{lanes: all, limit: 100, entries: 10}) {
		t.Error("an empty queue is not drained")
	}
	for range 3 {
		enqueue(t, pool, snapshotEvents(50, 1))
	}
	rows, err := fetchPending(ctx, pool, read{lanes: all, limit: 150, entries: 10})
	if err != nil || len(rows) != 150 {
		t.Fatalf("%d rows (%v)", len(rows), err)
	}
	firstTwo := inFlight(rows[:100])
	for _, c := range []struct {
		rd   read
		want bool
	}{
		{read{lanes: all, limit: 100, entries: 10, inFlight: inFlight(rows)}, true},
		{read{lanes: all, limit: 100, entries: 10, inFlight: inFlight(rows[:149])}, false}, // one row left
		{read{lanes: all, limit: 100, entries: 10, inFlight: firstTwo}, false},
	} {
		if got := drained(c.rd); got != c.want {
			t.Errorf("read %+v: drained %v, want %v", c.rd, got, c.want)
		}
		got, err := fetchPending(ctx, pool, c.rd)
		if err != nil || len(got) == 0 != c.want {
			t.Errorf("read %+v: %d rows (%v)", c.rd, len(got), err)
		}
	}
	// A listing cut by its limit may have left entries out: a fourth entry, past the three in
	// flight that fill the listing, is still read.
	enqueue(t, pool, snapshotEvents(50, 1))
	rd := read{lanes: all, limit: 100, inFlight: inFlight(rows)} // a listing of 0 + 3 entries
	if drained(rd) {
		t.Errorf("read %+v: drained with an entry past the listing", rd)
	}
	if got, err := fetchPending(ctx, pool, rd); err != nil || len(got) != 50 || got[0].ID != 151 {
		t.Errorf("read %+v: %d rows (%v), want the fourth entry's 50", rd, len(got), err)
	}
}

// An entry read in part stays first in line for the rest of its rows, even when the next
// batch in flight is made of a statement that committed late (so sits ahead of it in the
// queue): the read after that must go on in the entry read in part, not skip to later
// entries, which hold later events of the same items.
func TestReadGoesOnInAnEntryReadInPart(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	all := allLanes()
	late, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer late.Rollback(ctx)                                                   //nolint:errcheck
	if err := EnqueueSnapshots(ctx, late, snapshotEvents(20, 1)); err != nil { // queued first, committed last
		t.Fatal(err)
	}
	enqueue(t, pool, snapshotEvents(50, 2)) // entry a: two events of each of 50 items
	enqueue(t, pool, snapshotEvents(50, 1)) // entry b: a third event of each

	k, err := fetchPending(ctx, pool, read{lanes: all, limit: 30, entries: 30}) // part of entry a
	if err != nil {
		t.Fatal(err)
	}
	if err := late.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	k1, err := fetchPending(ctx, pool, read{lanes: all, limit: 20, entries: 20, inFlight: inFlight(k)}) // the late statement
	if err != nil {
		t.Fatal(err)
	}
	if len(k) != 30 || len(k1) != 20 || k1[0].Entry >= k[0].Entry {
		t.Fatalf("batches of %d and %d rows, entries %d then %d; want the late statement second", len(k), len(k1), k[0].Entry, k1[0].Entry)
	}
	next := read{lanes: all, limit: 200, entries: 200, inFlight: inFlight(k, k1)}
	for _, fetch := range []func(context.Context, *pgxpool.Pool, read) ([]pendingRow, error){fetchPending, fetchEntries} {
		k2, err := fetch(ctx, pool, next)
		if err != nil {
			t.Fatal(err)
		}
		if len(k2) != 70+50 || k2[0].Entry != k[0].Entry || k2[0].ID != k[len(k)-1].ID+1 || k2[70].Entry == k[0].Entry {
			t.Fatalf("next read starts at entry %d row %d (%d rows); want entry %d from row %d, then the next entry",
				k2[0].Entry, k2[0].ID, len(k2), k[0].Entry, k[len(k)-1].ID+1)
		}
	}
}

// A read into the memory of a batch the relay is done with allocates next to nothing per
// row (decoding 2,000 rows into new memory took about 1.4 KB a row, which the collector had
// to clear and scan on the cores the publishing needs), and gives the same messages.
func TestReadIntoRecycledMemory(t *testing.T) {
	pool := newDB(t)
	ctx := context.Background()
	enqueue(t, pool, snapshotEvents(50, 40))
	all := allLanes()
	rd := read{lanes: all, limit: 2000, mem: &batchMem{}}
	readRows := func() []pendingRow {
		rows, err := fetchPending(ctx, pool, rd)
		if err != nil || len(rows) != 2000 {
			t.Fatalf("read %d rows: %v", len(rows), err)
		}
		prepare(rows, "src", rd.mem)
		return rows
	}
	messages := func(rows []pendingRow) []kafka.Message {
		out := make([]kafka.Message, len(rows))
		for i := range rows {
			out[i] = rows[i].msg()
		}
		return out
	}
	deepCopy := func(msgs []kafka.Message) []kafka.Message {
		out := slices.Clone(msgs)
		for i, m := range out {
			out[i].Key, out[i].Value = bytes.Clone(m.Key), bytes.Clone(m.Value)
			out[i].Headers = slices.Clone(m.Headers)
			for j, h := range out[i].Headers {
				out[i].Headers[j].Value = bytes.Clone(h.Value)
			}
		}
		return out
	}

	want := deepCopy(messages(readRows()))
	rd.mem.reset()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	rows := readRows()
	runtime.ReadMemStats(&after)
	got := messages(rows)
	perRow := (after.TotalAlloc - before.TotalAlloc) / 2000
	t.Logf("%d bytes a row", perRow)
	if perRow > 100 {
		t.Errorf("reading into recycled memory allocated %d bytes a row, want next to none", perRow)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("messages read into recycled memory differ from the first read's")
	}
}

// Copies stay intact until the arena is reset; after it, the same amount of copying reuses
// its blocks instead of allocating.
func TestArenaReusesBlocksAfterReset(t *testing.T) {
	src := make([][]byte, 3000)
	for i := range src {
		src[i] = bytes.Repeat([]byte{byte(i), byte(i >> 8)}, 150)
	}
	var a arena
	copies := make([][]byte, len(src))
	fill := func() {
		for i, b := range src {
			copies[i] = a.copy(b)
		}
	}
	fill()
	first := slices.Clone(copies)
	fill()
	for i, c := range first {
		if !bytes.Equal(c, src[i]) {
			t.Fatalf("copy %d changed before the reset", i)
		}
	}
	if allocs := testing.AllocsPerRun(5, func() { a.reset(); fill() }); allocs != 0 {
		t.Errorf("%v allocations refilling a reset arena, want none", allocs)
	}
	for i, c := range copies {
		if !bytes.Equal(c, src[i]) {
			t.Fatalf("copy %d into reused blocks is wrong", i)
		}
	}
}
