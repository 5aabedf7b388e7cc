package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/history"
)

// latestCache is the /latest answer kept in memory: every item's JSON encoded once, the whole
// body and its gzip built once per refresh, so a poll costs a lookup, and a poll that changed
// nothing a comparison of ETags. A refresh is one read of the items' rows, never of history.
type latestCache struct {
	db     DB
	maxAge time.Duration
	now    func() time.Time

	refreshed prometheus.Observer // each read's seconds

	mu       sync.Mutex // one refresh at a time
	cur      atomic.Pointer[latestCopy]
	lastPoll atomic.Int64 // unix ns of the last request
}

// latestCopy is one read of the items' current markets.
type latestCopy struct {
	readAt time.Time // this process's clock when the read began
	ids    map[string]int
	items  []latestItem
	all    *body
}

type latestItem struct {
	state history.Latest
	json  []byte
}

func newLatestCache(db DB, maxAge time.Duration, now func() time.Time) *latestCache {
	return &latestCache{db: db, maxAge: maxAge, now: now}
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
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), refreshTimeout)
	defer cancel()
	if err := c.refresh(rctx, false); err != nil {
		return nil, err
	}
	return c.cur.Load(), nil
}

// refreshTimeout bounds one read of every item's market.
const refreshTimeout = 10 * time.Second

func (c *latestCache) fresh(cp *latestCopy) bool {
	return cp != nil && c.now().Sub(cp.readAt) <= c.maxAge
}

// refresh reads every item's market and rebuilds what changed. Concurrent callers wait for
// the one read in flight: a poll (force false) uses whatever copy is fresh by then, the
// background refresh (force true) one read after it asked.
func (c *latestCache) refresh(ctx context.Context, force bool) error {
	asked := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	prev := c.cur.Load()
	if prev != nil && (!prev.readAt.Before(asked) || !force && c.fresh(prev)) {
		return nil
	}
	start := c.now()
	t0 := time.Now()
	states, dbNow, err := history.LatestStates(ctx, c.db)
	if err != nil {
		return err
	}
	c.refreshed.Observe(time.Since(t0).Seconds())
	next := &latestCopy{readAt: start, ids: make(map[string]int, len(states)), items: make([]latestItem, len(states))}
	changed := prev == nil || len(prev.items) != len(states)
	size := 16
	for i, s := range states {
		next.ids[s.ItemID] = i
		if prev != nil {
			if j, ok := prev.ids[s.ItemID]; ok && sameLatest(prev.items[j].state, s) {
				next.items[i] = prev.items[j]
				if j != i {
					changed = true
				}
				size += len(next.items[i].json) + 1
				continue
			}
		}
		changed = true
		next.items[i] = latestItem{state: s, json: appendLatest(nil, s)}
		size += len(next.items[i].json) + 1
	}
	switch {
	case !changed && prev.all.ambiguous && dbNow.Truncate(time.Second).After(prev.all.modified.Truncate(time.Second)):
		// Still the same answer a second later: stamped with this second, it answers
		// If-Modified-Since again (see body.ambiguous).
		restamped := *prev.all
		restamped.modified, restamped.ambiguous = dbNow, false
		next.all = &restamped
	case !changed:
		next.all = prev.all
	default:
		raw := make([]byte, 0, size)
		raw = append(raw, `{"items":[`...)
		for i, it := range next.items {
			if i > 0 {
				raw = append(raw, ',')
			}
			raw = append(raw, it.json...)
		}
		raw = append(raw, "]}"...)
		// Last-Modified is when this read found the change (the database's clock), not only the
		// newest collection in it: an item leaving the catalog changes the answer too, and a
		// client asking If-Modified-Since must not get 304 for that.
		modified := newestSeen(next.items)
		if prev != nil && dbNow.After(modified) {
			modified = dbNow
		}
		next.all = newBody(raw, modified)
		next.all.ambiguous = prev != nil && modified.Truncate(time.Second).Equal(prev.all.modified.Truncate(time.Second))
		next.all.gz = compress(raw)
	}
	c.cur.Store(next)
	return nil
}

// newestSeen is the last time any of items was collected: when the answer last changed.
func newestSeen(items []latestItem) time.Time {
	var t time.Time
	for _, it := range items {
		for _, at := range []*time.Time{it.state.SeenAt, it.state.SnapshotAt} {
			if at != nil && at.After(t) {
				t = *at
			}
		}
	}
	return t
}

func sameLatest(a, b history.Latest) bool {
	return a.ItemID == b.ItemID && a.Name == b.Name && a.Tier == b.Tier && eqTime(a.SnapshotAt, b.SnapshotAt) &&
		eqTime(a.SeenAt, b.SeenAt) && eq(a.Lowest, b.Lowest) && eq(a.Median, b.Median) && eq(a.Weighted, b.Weighted) &&
		eq(a.APIAverage, b.APIAverage) && eq(a.ListingCount, b.ListingCount) && eq(a.Quantity, b.Quantity) &&
		eq(a.Truncated, b.Truncated)
}

func eq[T comparable](a, b *T) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }

func eqTime(a, b *time.Time) bool { return (a == nil) == (b == nil) && (a == nil || a.Equal(*b)) }

// timeLayout is RFC 3339 in UTC with microseconds, PostgreSQL's resolution.
const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

// appendLatest encodes one item by hand: at 20,000 items per refresh encoding/json's
// reflection would be the refresh's largest cost. Absent figures are left out.
func appendLatest(b []byte, s history.Latest) []byte {
	b = append(b, `{"item_id":`...)
	b = appendString(b, s.ItemID)
	b = append(b, `,"name":`...)
	b = appendString(b, s.Name)
	b = append(b, `,"tier":`...)
	b = appendString(b, s.Tier)
	ts := func(name string, t *time.Time) {
		if t != nil {
			b = append(b, `,"`+name+`":"`...)
			b = t.UTC().AppendFormat(b, timeLayout)
			b = append(b, '"')
		}
	}
	ts("collected_at", s.SnapshotAt)
	ts("seen_at", s.SeenAt)
	for _, f := range []struct {
		name string
		v    *int64
	}{{"lowest_unit_price", s.Lowest}, {"median_unit_price", s.Median}, {"api_average_price", s.APIAverage}, {"listing_quantity", s.Quantity}} {
		if f.v != nil {
			b = append(b, `,"`+f.name+`":`...)
			b = strconv.AppendInt(b, *f.v, 10)
		}
	}
	if s.Weighted != nil {
		b = append(b, `,"weighted_unit_price":`...)
		b = strconv.AppendFloat(b, *s.Weighted, 'f', -1, 64)
	}
	if s.ListingCount != nil {
		b = append(b, `,"listing_count":`...)
		b = strconv.AppendInt(b, int64(*s.ListingCount), 10)
	}
	if s.Truncated != nil {
		b = append(b, `,"listings_truncated":`...)
		b = strconv.AppendBool(b, *s.Truncated)
	}
	return append(b, '}')
}

func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c == '"' || c == '\\' || c >= 0x7f {
			q, _ := json.Marshal(s)
			return append(b, q...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// MaxIDs is how many ids one /latest?ids= may name.
const MaxIDs = 100

// idPattern is what an item id may hold: Neople's are 32 hex digits; operators' own ids are
// letters, digits, '-', '_', '.' and ':' up to 128 long.
var idPattern = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,128}$`)

func (a *API) getLatest(w http.ResponseWriter, r *http.Request) {
	ids, err := parseIDs(r.URL.Query()["ids"])
	if err != nil {
		badParam(w, "ids", err.Error())
		return
	}
	cp, err := a.latest.current(r.Context())
	if err != nil {
		a.unavailable(w, r, "read the latest markets", err)
		return
	}
	if ids == nil {
		serve(w, r, cp.all)
		return
	}
	var items []latestItem
	var unknown []string
	for _, id := range ids {
		if i, ok := cp.ids[id]; ok {
			items = append(items, cp.items[i])
		} else {
			unknown = append(unknown, id)
		}
	}
	raw := []byte(`{"items":[`)
	for i, it := range items {
		if i > 0 {
			raw = append(raw, ',')
		}
		raw = append(raw, it.json...)
	}
	raw = append(raw, ']')
	if len(unknown) > 0 {
		u, _ := json.Marshal(unknown)
		raw = append(append(raw, `,"unknown_ids":`...), u...)
	}
	raw = append(raw, '}')
	// Dated like the whole answer: a rename or an id leaving changes this one too, and neither
	// moves its items' collection times.
	b := newBody(raw, cp.all.modified)
	b.ambiguous = cp.all.ambiguous
	serve(w, r, b)
}

// parseIDs reads ids=a,b,c (the parameter may repeat): nil when absent, each id checked, in
// the order given without repeats.
func parseIDs(params []string) ([]string, error) {
	if params == nil {
		return nil, nil
	}
	seen := map[string]bool{}
	out := []string{}
	for _, p := range params {
		for id := range strings.SplitSeq(p, ",") {
			id = strings.TrimSpace(id)
			if !idPattern.MatchString(id) {
				return nil, fmt.Errorf("item id %q: ids are 1 to 128 letters, digits, '-', '_', '.' or ':', separated by commas", truncate(id, 40))
			}
			if !seen[id] {
				seen[id] = true
				out = append(out, id)
			}
			if len(out) > MaxIDs {
				return nil, fmt.Errorf("more than %d ids: at most %d per request (omit ids for every item)", MaxIDs, MaxIDs)
			}
		}
	}
	return out, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// warnEvery is the least time between two logged read failures.
const warnEvery = 10 * time.Second

// warn logs a read failure, one line per warnEvery: a database outage must not log every poll
// of every client.
func (a *API) warn(what string, fields ...zap.Field) {
	now := a.cfg.Now()
	if last := a.warned.Load(); now.Sub(time.Unix(0, last)) < warnEvery || !a.warned.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	a.log.Warn("api: cannot "+what+" (further failures within "+warnEvery.String()+" are not logged)", fields...)
}

// unavailable answers 503 when the database cannot be read: a stale copy is never passed off
// as current. The cause is logged; the client learns only that reading failed.
func (a *API) unavailable(w http.ResponseWriter, r *http.Request, what string, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return
	}
	a.warn(what, zap.String("path", r.URL.Path), zap.Error(err))
	w.Header().Set("Retry-After", "1")
	writeProblem(w, http.StatusServiceUnavailable, probUnavailable, "cannot "+what+" now: the database did not answer; try again", "")
}
