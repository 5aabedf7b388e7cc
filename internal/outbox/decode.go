package outbox

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// pendingColumns are the outbox columns scanPending reads, in this order.
// The query puts the entry first and, last, whether the entry was read whole.
const pendingColumns = `o.id, o.event_id, o.event_type, o.item_id, o.payload::text, o.created_at, o.lane`

// scanPending reads the rows of a pendingColumns query. The relay reads tens of thousands of
// rows a second, and decoding them competes for the CPU with the publishing it feeds, so the
// usual binary forms are decoded here straight from the wire into one arena of bytes per
// batch: a few allocations per batch instead of four per row, and less for the collector to
// scan. Anything unexpected (another format) goes through pgx's Scan.
//
// expect sizes the batch: the size of the relay's last read, since a backlog is read in full
// reads one after another, and a following relay mostly reads a row or none (a batch sized
// for a full read would clear half a megabyte each time). Past it the batch grows as rows
// arrive.
func scanPending(rows pgx.Rows, expect int) ([]pendingRow, error) {
	defer rows.Close()
	out := make([]pendingRow, 0, max(expect, 16))
	fds := rows.FieldDescriptions()
	fast := len(fds) == 9
	for _, i := range []int{0, 1, 2, 6, 7, 8} { // the fixed-size binary columns
		fast = fast && fds[i].Format == pgx.BinaryFormatCode
	}
	var a arena
	for rows.Next() {
		var p pendingRow
		if !fast {
			if err := rows.Scan(&p.Entry, &p.ID, &p.EventID, &p.EventType, &p.ItemID, &p.Payload, &p.CreatedAt, &p.Lane, &p.Whole); err != nil {
				return nil, err
			}
			out = append(out, p)
			continue
		}
		v := rows.RawValues()
		if len(v[0]) != 8 || len(v[1]) != 8 || len(v[2]) != 16 || len(v[6]) != 8 || len(v[7]) != 2 || len(v[8]) != 1 || v[3] == nil || v[4] == nil || v[5] == nil {
			return nil, fmt.Errorf("outbox row: unexpected column sizes %d/%d/%d/%d/%d/%d", len(v[0]), len(v[1]), len(v[2]), len(v[6]), len(v[7]), len(v[8]))
		}
		p.Entry = int64(binary.BigEndian.Uint64(v[0]))
		p.ID = int64(binary.BigEndian.Uint64(v[1]))
		copy(p.EventID[:], v[2])
		p.EventType = a.copy(v[3])
		p.ItemID = a.copy(v[4])
		p.Payload = a.copy(v[5])
		p.CreatedAt = time.UnixMicro(pgEpochMicros + int64(binary.BigEndian.Uint64(v[6])))
		p.Lane = int16(binary.BigEndian.Uint16(v[7]))
		p.Whole = v[8][0] != 0
		out = append(out, p)
	}
	return out, rows.Err()
}

// pgEpochMicros is 2000-01-01 00:00:00 UTC, where PostgreSQL's binary timestamps count from.
const pgEpochMicros = 946684800 * 1_000_000

// arena hands out copies of byte slices from large shared blocks. A copy stays valid as long
// as anything refers to it (the garbage collector keeps its block).
type arena struct{ block []byte }

func (a *arena) copy(b []byte) []byte {
	if cap(a.block)-len(a.block) < len(b) {
		// Blocks double from 4 KiB to 256 KiB: a following relay reading one row at a time
		// must not pay for a large block per read.
		a.block = make([]byte, 0, max(min(2*cap(a.block), 256<<10), 4<<10, len(b)))
	}
	n := len(a.block)
	a.block = append(a.block, b...)
	return a.block[n:len(a.block):len(a.block)]
}
