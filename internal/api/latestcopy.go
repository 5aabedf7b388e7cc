package api

import (
	"bytes"
	"compress/flate"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"hash/crc32"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/duecollector/duecollector/internal/catalog"
)

// latestCache is the /latest answer kept in memory, so a poll costs a lookup and a poll that
// changed nothing a comparison of ETags. A refresh reads only the rows written since the last
// one (with an overlap) and re-encodes only the items that changed; the body's gzip is kept in
// chunks of chunkItems items, and only the chunks holding a changed item are compressed again.
// At 20,000 items collected every minute that is a few hundred items and a tenth of the body
// a refresh, instead of 20,000 rows decoded and 7 MB compressed.
type latestCache struct {
	db      DB
	maxAge  time.Duration
	now     func() time.Time
	overlap time.Duration // changeOverlap; tests shorten it

	refreshed prometheus.Observer // each read's seconds

	mu       sync.Mutex // one refresh at a time
	z        *deflater  // the refresh's, under mu
	cur      atomic.Pointer[latestCopy]
	lastPoll atomic.Int64 // unix ns of the last request

	// ended counts the reads that ended; failed is the last one's error (nil: it worked),
	// under mu. A poll that waited for a read that ended after it asked takes that read's
	// failure rather than trying again: behind a hung database, each of N waiting polls
	// would otherwise wait out a refreshTimeout of its own in turn, the last N of them.
	ended  atomic.Uint64
	failed error
	// timeout bounds one read: refreshTimeout (tests shorten it). waiting, when set, runs as
	// a refresh is about to wait for the one in flight (tests).
	timeout time.Duration
	waiting func()
}

// latestCopy is one read of the items' current markets.
type latestCopy struct {
	readAt time.Time // this process's clock when the read began
	dbNow  time.Time // the database's clock at the read
	// since is where the next refresh looks for written rows from: the read's horizon (its
	// oldest running transaction's start), less changeOverlap for sessions it cannot see.
	since  time.Time
	fullAt time.Time // readAt of the last read of every row
	ids    map[string]int
	items  []*latestItem // pointers: a refresh copies the slice, not 20,000 items
	chunks []*latestChunk
	all    *body
}

type latestItem struct {
	state catalog.Latest
	json  []byte
}

// latestChunk is items[k*chunkItems : (k+1)*chunkItems] of the body: their JSON (a comma
// before each but the body's first); that JSON deflated and flushed to a byte boundary with a
// fresh dictionary, so chunks concatenate into one valid deflate stream; and the JSON's hash,
// which the ETag is made of. Answers are served from the chunks as they are.
type latestChunk struct {
	raw      []byte
	deflated []byte
	sum      [sha256.Size]byte
}

const (
	// chunkItems is small enough that a refresh's changes (spread over the ids at random)
	// leave most chunks alone, large enough that each compresses well (about 10 KB of JSON).
	chunkItems = 32
	// changeOverlap is how far before the previous read's horizon a refresh looks for written
	// rows: the horizon covers every transaction the read could see running (catalog.Clock);
	// this covers writers of another role, whose sessions it cannot see. Write-backs take
	// milliseconds.
	changeOverlap = 5 * time.Second
	// fullEvery reads every row now and then whatever the overlap missed (a transaction held
	// open for longer, an item that left and another that came between two reads).
	fullEvery = 15 * time.Second
	// refreshTimeout bounds one read.
	refreshTimeout = 10 * time.Second
)

func newLatestCache(db DB, maxAge time.Duration, now func() time.Time) *latestCache {
	return &latestCache{db: db, maxAge: maxAge, now: now, z: newDeflater(), overlap: changeOverlap, timeout: refreshTimeout}
}

func (c *latestCache) polled(within time.Duration) bool {
	return c.now().Sub(time.Unix(0, c.lastPoll.Load())) < within
}

// current returns a copy no older than maxAge, reading one when the last is older.
func (c *latestCache) current(ctx context.Context) (*latestCopy, error) {
	c.lastPoll.Store(c.now().UnixNano())
	if cp := c.cur.Load(); c.fresh(cp) {
		return cp, nil
	}
	// The read serves every poll waiting on it: one client hanging up must not cancel it.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.timeout)
	defer cancel()
	if err := c.refresh(rctx, false); err != nil {
		return nil, err
	}
	return c.cur.Load(), nil
}

func (c *latestCache) fresh(cp *latestCopy) bool {
	return cp != nil && c.now().Sub(cp.readAt) <= c.maxAge
}

// refresh reads what changed and rebuilds what it touches. Concurrent callers wait for the one
// read in flight: a poll (force false) uses whatever copy is fresh by then, the background
// refresh (force true) one read after it asked.
func (c *latestCache) refresh(ctx context.Context, force bool) error {
	asked := c.now()
	ended := c.ended.Load()
	if c.waiting != nil {
		c.waiting()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.cur.Load()
	if prev != nil && (!prev.readAt.Before(asked) || !force && c.fresh(prev)) {
		return nil
	}
	if !force && c.failed != nil && c.ended.Load() > ended {
		return c.failed
	}
	start := c.now()
	t0 := time.Now()
	next, err := c.read(ctx, prev, start)
	c.failed = err
	c.ended.Add(1)
	if err != nil {
		return err
	}
	c.refreshed.Observe(time.Since(t0).Seconds())
	c.cur.Store(next)
	return nil
}

// read makes the next copy from prev: the changed rows patched in, or every row when there is
// no copy, when it is time, or when an item came or left.
func (c *latestCache) read(ctx context.Context, prev *latestCopy, start time.Time) (*latestCopy, error) {
	if prev != nil && start.Sub(prev.fullAt) < fullEvery {
		changed, clock, total, err := catalog.LatestChanged(ctx, c.db, prev.since)
		if err != nil {
			return nil, err
		}
		if next, ok := patch(c.z, prev, changed, total, clock.Now, start); ok {
			next.since = clock.Horizon.Add(-c.overlap)
			return next, nil
		}
	}
	states, clock, err := catalog.LatestStates(ctx, c.db)
	if err != nil {
		return nil, err
	}
	next := rebuild(c.z, prev, states, clock.Now, start)
	next.since = clock.Horizon.Add(-c.overlap)
	return next, nil
}

// patch applies changed rows to prev; false when the set of items differs (a full read then
// places them).
func patch(z *deflater, prev *latestCopy, changed []catalog.Latest, total int, dbNow, start time.Time) (*latestCopy, bool) {
	if total != len(prev.items) {
		return nil, false
	}
	next := &latestCopy{readAt: start, dbNow: dbNow, fullAt: prev.fullAt, ids: prev.ids, chunks: prev.chunks, items: prev.items}
	dirty := map[int]bool{}
	for _, s := range changed {
		i, ok := prev.ids[s.ItemID]
		if !ok {
			return nil, false
		}
		if sameLatest(prev.items[i].state, s) {
			continue
		}
		if len(dirty) == 0 { // copy on first write: prev stays as readers saw it
			next.items = append([]*latestItem(nil), prev.items...)
			next.chunks = append([]*latestChunk(nil), prev.chunks...)
		}
		next.items[i] = &latestItem{state: s, json: appendLatest(nil, s)}
		dirty[i/chunkItems] = true
	}
	for k := range dirty {
		next.chunks[k] = makeChunk(z, next.items, k)
	}
	next.finish(prev, len(dirty) > 0)
	return next, true
}

// rebuild makes a copy from every row, keeping prev's encodings where an item is unchanged and
// its chunks where the chunk's items are.
func rebuild(z *deflater, prev *latestCopy, states []catalog.Latest, dbNow, start time.Time) *latestCopy {
	next := &latestCopy{readAt: start, dbNow: dbNow, fullAt: start, ids: make(map[string]int, len(states)),
		items: make([]*latestItem, len(states))}
	same := prev != nil && len(prev.items) == len(states)
	dirty := map[int]bool{}
	for i, s := range states {
		next.ids[s.ItemID] = i
		if prev != nil {
			if j, ok := prev.ids[s.ItemID]; ok && j == i && sameLatest(prev.items[j].state, s) {
				next.items[i] = prev.items[j]
				continue
			}
		}
		next.items[i] = &latestItem{state: s, json: appendLatest(nil, s)}
		dirty[i/chunkItems] = true
		same = same && prev.ids[s.ItemID] == i && prev.items[i].state.ItemID == s.ItemID
	}
	next.chunks = make([]*latestChunk, (len(states)+chunkItems-1)/chunkItems)
	for k := range next.chunks {
		if same && !dirty[k] {
			next.chunks[k] = prev.chunks[k]
		} else {
			next.chunks[k] = makeChunk(z, next.items, k)
		}
	}
	next.finish(prev, !same || len(dirty) > 0)
	return next
}

func makeChunk(z *deflater, items []*latestItem, k int) *latestChunk {
	from, to := k*chunkItems, min(len(items), (k+1)*chunkItems)
	size := 0
	for _, it := range items[from:to] {
		size += len(it.json) + 1
	}
	raw := make([]byte, 0, size)
	for i := from; i < to; i++ {
		if i > 0 {
			raw = append(raw, ',')
		}
		raw = append(raw, items[i].json...)
	}
	return &latestChunk{raw: raw, deflated: z.flushed(raw), sum: sha256.Sum256(raw)}
}

// finish sets the answer: prev's when nothing changed (re-dated if it was ambiguous, see
// body.ambiguous), else one assembled from the chunks.
func (cp *latestCopy) finish(prev *latestCopy, changed bool) {
	if !changed {
		cp.all = prev.all
		if prev.all.ambiguous && cp.dbNow.Truncate(time.Second).After(prev.all.modified.Truncate(time.Second)) {
			restamped := *prev.all
			restamped.modified, restamped.ambiguous = cp.dbNow, false
			cp.all = &restamped
		}
		return
	}
	// The gzip member: header, the head's, chunks' and tail's deflate, a final block, and the
	// whole JSON's CRC and length (RFC 1952).
	b := &body{rawParts: make([][]byte, 0, len(cp.chunks)+2), gzParts: make([][]byte, 0, len(cp.chunks)+6)}
	b.rawParts = append(b.rawParts, latestHead)
	b.gzParts = append(b.gzParts, gzipHeader, deflatedHead)
	crc := crc32.ChecksumIEEE(latestHead)
	etag := sha256.New()
	for _, ch := range cp.chunks {
		b.rawParts = append(b.rawParts, ch.raw)
		b.gzParts = append(b.gzParts, ch.deflated)
		crc = crc32.Update(crc, crc32.IEEETable, ch.raw)
		etag.Write(ch.sum[:])
	}
	b.rawParts = append(b.rawParts, latestTail)
	crc = crc32.Update(crc, crc32.IEEETable, latestTail)
	for _, p := range b.rawParts {
		b.rawLen += len(p)
	}
	trailer := make([]byte, 8)
	binary.LittleEndian.PutUint32(trailer[:4], crc)
	binary.LittleEndian.PutUint32(trailer[4:], uint32(b.rawLen))
	b.gzParts = append(b.gzParts, deflatedTail, finalBlock, trailer)
	for _, p := range b.gzParts {
		b.gzLen += len(p)
	}

	// Last-Modified is when this read found the change (the database's clock), not only the
	// newest collection in it: an item leaving the catalog changes the answer too, and a
	// client asking If-Modified-Since must not get 304 for that. A process's first copy has
	// nothing to compare with (a client may hold another process's date, or this one's before
	// a restart), so it too is dated by its read.
	modified := newestSeen(cp.items)
	if cp.dbNow.After(modified) {
		modified = cp.dbNow
	}
	b.etag, b.modified = weakETag(etag.Sum(nil)), modified
	b.ambiguous = prev != nil && modified.Truncate(time.Second).Equal(prev.all.modified.Truncate(time.Second))
	cp.all = b
}

// newestSeen is the last time any of items was collected.
func newestSeen(items []*latestItem) time.Time {
	var t time.Time
	for _, it := range items {
		if at := it.state.SeenAt; at != nil && at.After(t) {
			t = *at
		}
		if m := it.state.Market; m != nil && m.At.After(t) {
			t = m.At
		}
	}
	return t
}

var (
	latestHead = []byte(`{"items":[`)
	latestTail = []byte(`]}`)
	// gzipHeader: no name, no time (so equal data gives equal bytes), OS unknown.
	gzipHeader   = []byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}
	deflatedHead = newDeflater().flushed(latestHead)
	deflatedTail = newDeflater().flushed(latestTail)
	finalBlock   = finalDeflateBlock()
)

// deflater compresses chunks with one writer kept for good: a pooled one would be dropped at
// every garbage collection and cost a megabyte of tables to make again.
type deflater struct {
	w   *flate.Writer
	buf bytes.Buffer
}

func newDeflater() *deflater {
	w, _ := flate.NewWriter(nil, flate.BestSpeed)
	return &deflater{w: w}
}

// flushed is raw deflated alone and flushed (not closed): byte-aligned blocks, none final,
// referring to nothing before them.
func (z *deflater) flushed(raw []byte) []byte {
	z.buf.Reset()
	z.w.Reset(&z.buf)
	_, _ = z.w.Write(raw)
	_ = z.w.Flush()
	return bytes.Clone(z.buf.Bytes())
}

// finalDeflateBlock is the empty final block that ends a stream of flushed chunks.
func finalDeflateBlock() []byte {
	var closed bytes.Buffer
	w, _ := flate.NewWriter(&closed, flate.BestSpeed)
	_ = w.Close()
	return closed.Bytes()
}
