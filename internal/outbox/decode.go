package outbox

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/segmentio/kafka-go"
)

// pendingColumns are the outbox columns scanPending reads, in this order.
// An entry-by-entry read puts the entry first and, last, whether the entry was read whole;
// a range read leaves both out (fetchSpans knows them from the spans it read), since every
// column costs PostgreSQL a send function call per row. The payload is
// read as json, whose binary form is its text: a cast to text went through json's output
// and text's input functions, about 0.2 µs of PostgreSQL's CPU a row here.
const pendingColumns = `o.id, o.event_id, o.event_type, o.item_id, o.payload, o.created_at, o.lane`

// scanPending reads the rows of a pendingColumns query. The relay reads tens of thousands of
// rows a second, and decoding them competes for the CPU with the publishing it feeds, so the
// usual binary forms are decoded here straight from the wire into one arena of bytes per
// batch: a few allocations per batch instead of four per row, and less for the collector to
// scan. Anything unexpected (another format) goes through pgx's Scan.
//
// The rows go into mem (a new one when nil), whose memory an earlier batch may have left
// (Relay.recycle). When it has none, expect sizes the batch: the size of the relay's last
// read, since a backlog is read in full reads one after another, and a following relay
// mostly reads a row or none (a batch sized for a full read would clear half a megabyte each
// time). Past it the batch grows as rows arrive.
func scanPending(rows pgx.Rows, expect int, mem *batchMem) ([]pendingRow, error) {
	defer rows.Close()
	if mem == nil {
		mem = &batchMem{}
	}
	out := mem.rows[:0]
	if cap(out) == 0 {
		out = make([]pendingRow, 0, max(expect, 16))
	}
	defer func() { mem.rows = out[:0] }()
	fds := rows.FieldDescriptions()
	entries := len(fds) == 9 // else the 7 pendingColumns alone
	if !entries && len(fds) != 7 {
		return nil, fmt.Errorf("outbox rows: %d columns, want 7 or 9", len(fds))
	}
	c := 0 // where pendingColumns start
	if entries {
		c = 1
	}
	fast := true
	for _, i := range []int{c, c + 1, c + 5, c + 6} { // the fixed-size binary columns
		fast = fast && fds[i].Format == pgx.BinaryFormatCode
	}
	if entries {
		fast = fast && fds[0].Format == pgx.BinaryFormatCode && fds[8].Format == pgx.BinaryFormatCode
	}
	a := &mem.arena
	for rows.Next() {
		// Decoded in place: a local row would escape through Scan's pointers and cost an
		// allocation per row.
		out = append(out, pendingRow{})
		p := &out[len(out)-1]
		if !fast {
			cols := []any{&p.ID, &p.EventID, &p.EventType, &p.ItemID, &p.Payload, &p.CreatedAt, &p.Lane}
			if entries {
				cols = append(append([]any{&p.Entry}, cols...), &p.Whole)
			}
			if err := rows.Scan(cols...); err != nil {
				return nil, err
			}
			continue
		}
		v := rows.RawValues()
		if entries {
			if len(v[0]) != 8 || len(v[8]) != 1 {
				return nil, fmt.Errorf("outbox row: unexpected entry column sizes %d/%d", len(v[0]), len(v[8]))
			}
			p.Entry = int64(binary.BigEndian.Uint64(v[0]))
			p.Whole = v[8][0] != 0
			v = v[1:8]
		}
		if len(v[0]) != 8 || len(v[1]) != 16 || len(v[5]) != 8 || len(v[6]) != 2 || v[2] == nil || v[3] == nil || v[4] == nil {
			return nil, fmt.Errorf("outbox row: unexpected column sizes %d/%d/%d/%d", len(v[0]), len(v[1]), len(v[5]), len(v[6]))
		}
		p.ID = int64(binary.BigEndian.Uint64(v[0]))
		copy(p.EventID[:], v[1])
		p.EventType = a.copy(v[2])
		p.ItemID = a.copy(v[3])
		p.Payload = a.copy(v[4])
		p.CreatedAt = time.UnixMicro(pgEpochMicros + int64(binary.BigEndian.Uint64(v[5])))
		p.Lane = int16(binary.BigEndian.Uint16(v[6]))
	}
	return out, rows.Err()
}

// pgEpochMicros is 2000-01-01 00:00:00 UTC, where PostgreSQL's binary timestamps count from.
const pgEpochMicros = 946684800 * 1_000_000

// batchMem is the memory a batch of rows is decoded into: the rows, the Kafka headers and
// their values (prepare), and the bytes of the rows' text columns. Decoding 2,000 rows took
// nearly 3 MB, which the collector then had to clear, scan and free, on the same two cores
// the publishing needs; a relay hands the memory of a batch it has marked to a later read.
type batchMem struct {
	rows    []pendingRow
	headers []kafka.Header
	text    []byte
	arena   arena
}

// reset makes the memory reusable; nothing may refer to what it held.
func (m *batchMem) reset() {
	m.rows = m.rows[:0]
	m.headers = m.headers[:0]
	m.text = m.text[:0]
	m.arena.reset()
}

// arena hands out copies of byte slices from large shared blocks. A copy stays valid as long
// as anything refers to it (the garbage collector keeps its block) or until reset, which
// hands the blocks out again.
type arena struct {
	block []byte   // being filled
	full  [][]byte // filled since the last reset
	spare [][]byte // free again after a reset
}

func (a *arena) copy(b []byte) []byte {
	if cap(a.block)-len(a.block) < len(b) {
		a.next(len(b))
	}
	n := len(a.block)
	a.block = append(a.block, b...)
	return a.block[n:len(a.block):len(a.block)]
}

// next starts a block with room for n bytes: a spare one, or a new one. New blocks double
// from 4 KiB to 256 KiB: a following relay reading one row at a time must not pay for a
// large block per read.
func (a *arena) next(n int) {
	grow := max(min(2*cap(a.block), 256<<10), 4<<10, n)
	if a.block != nil {
		a.full = append(a.full, a.block)
	}
	for len(a.spare) > 0 {
		b := a.spare[len(a.spare)-1]
		a.spare = a.spare[:len(a.spare)-1]
		if cap(b) >= n {
			a.block = b[:0]
			return
		}
	}
	a.block = make([]byte, 0, grow)
}

func (a *arena) reset() {
	if a.block != nil {
		a.full = append(a.full, a.block)
		a.block = nil
	}
	// The largest blocks were filled last; they are handed out first.
	a.spare = append(a.spare, a.full...)
	clear(a.full)
	a.full = a.full[:0]
}
