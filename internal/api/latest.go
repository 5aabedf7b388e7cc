package api

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/provider"
)

func sameLatest(a, b catalog.Latest) bool {
	return a.ItemID == b.ItemID && a.Name == b.Name && a.Tier == b.Tier && eqTime(a.SeenAt, b.SeenAt) &&
		(a.Market == nil) == (b.Market == nil) &&
		(a.Market == nil || a.Market.At.Equal(b.Market.At) && a.Market.State.Equal(b.Market.State))
}

func eqTime(a, b *time.Time) bool { return (a == nil) == (b == nil) && (a == nil || a.Equal(*b)) }

// timeLayout is RFC 3339 in UTC with microseconds, PostgreSQL's resolution.
const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

// appendLatest encodes one item by hand: at 20,000 items per refresh encoding/json's
// reflection would be the refresh's largest cost. Absent figures are left out.
func appendLatest(b []byte, s catalog.Latest) []byte {
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
	m := s.Market
	if m != nil {
		ts("collected_at", &m.At)
	}
	ts("seen_at", s.SeenAt)
	if m == nil {
		return append(b, '}')
	}
	for _, f := range []struct {
		name string
		v    *int64
	}{{"lowest_unit_price", m.State.Lowest}, {"median_unit_price", m.State.Median}, {"api_average_price", m.State.APIAverage}, {"listing_quantity", &m.State.Quantity}} {
		if f.v != nil {
			b = append(b, `,"`+f.name+`":`...)
			b = strconv.AppendInt(b, *f.v, 10)
		}
	}
	if m.State.Weighted != nil {
		b = append(b, `,"weighted_unit_price":`...)
		b = strconv.AppendFloat(b, *m.State.Weighted, 'f', -1, 64)
	}
	b = append(b, `,"listing_count":`...)
	b = strconv.AppendInt(b, int64(m.State.Count), 10)
	b = append(b, `,"listings_truncated":`...)
	b = strconv.AppendBool(b, m.State.Truncated)
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
	q, ok := params(w, r, "ids")
	if !ok {
		return
	}
	ids, err := parseIDs(q["ids"])
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
	items := make([]*latestItem, 0, len(ids))
	var unknown []string
	for _, id := range ids {
		if i, ok := cp.ids[id]; ok {
			items = append(items, cp.items[i])
		} else {
			unknown = append(unknown, id)
		}
	}
	// Dated like the whole answer: a rename or an id leaving changes this one too, and neither
	// moves its items' collection times. The ETag is hashed as the answer is written, so a
	// poll answered 304 copies nothing.
	b := &body{modified: cp.all.modified, ambiguous: cp.all.ambiguous}
	h := sha256.New()
	size := writeSome(h, items, unknown)
	b.etag = weakETag(h.Sum(nil))
	if !notModified(r, b) {
		buf := bytes.NewBuffer(make([]byte, 0, size))
		writeSome(buf, items, unknown)
		b.raw = buf.Bytes()
	}
	serve(w, r, b)
}

// writeSome writes the answer naming items and unknown and returns its size.
func writeSome(w io.Writer, items []*latestItem, unknown []string) int {
	n, _ := io.WriteString(w, `{"items":[`)
	for i, it := range items {
		if i > 0 {
			w.Write(comma)
			n++
		}
		w.Write(it.json)
		n += len(it.json)
	}
	w.Write(closeBracket)
	n++
	if len(unknown) > 0 {
		u, _ := json.Marshal(unknown)
		m, _ := io.WriteString(w, `,"unknown_ids":`)
		w.Write(u)
		n += m + len(u)
	}
	w.Write(closeBrace)
	return n + 1
}

var comma, closeBracket, closeBrace = []byte{','}, []byte{']'}, []byte{'}'}

// parseIDs reads ids=a,b,c (the parameter may repeat): nil when absent, each id checked, in
// the order given without repeats.
func parseIDs(params []string) ([]string, error) {
	if params == nil {
		return nil, nil
	}
	out := []string{}
	given := 0
	for _, p := range params {
		for id := range strings.SplitSeq(p, ",") {
			// Repeats are allowed, but not thousands of them: each is checked against the rest.
			if given++; given > 2*MaxIDs {
				return nil, fmt.Errorf("more than %d ids given, repeats counted: at most %d per request (omit ids for every item)", 2*MaxIDs, MaxIDs)
			}
			id = strings.TrimSpace(id)
			if !idPattern.MatchString(id) {
				return nil, fmt.Errorf("item id %q: ids are 1 to 128 letters, digits, '-', '_', '.' or ':', separated by commas", provider.Clean(id, 40))
			}
			// At most MaxIDs ids: a scan costs less than a map made for each poll.
			if !slices.Contains(out, id) {
				out = append(out, id)
			}
			if len(out) > MaxIDs {
				return nil, fmt.Errorf("more than %d ids: at most %d per request (omit ids for every item)", MaxIDs, MaxIDs)
			}
		}
	}
	return out, nil
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

// answer encodes v and serves it. An answer that cannot be encoded is a fault of the server
// that the same request repeats: 500 without Retry-After, never unavailable's 503, which
// tells clients to retry.
func (a *API) answer(w http.ResponseWriter, r *http.Request, v any, what string) {
	b, err := jsonBody(v, time.Time{})
	if err != nil {
		a.warn(what, zap.String("path", r.URL.Path), zap.Error(err))
		writeProblem(w, http.StatusInternalServerError, probInternal, "cannot "+what+": a fault of the server, which retrying will not mend", "")
		return
	}
	serve(w, r, b)
}

// unavailable answers 503 when the database cannot be read: a stale copy is never passed off
// as current. The cause is logged; the client learns only that reading failed.
func (a *API) unavailable(w http.ResponseWriter, r *http.Request, what string, err error) {
	if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
		return
	}
	a.warn(what, zap.String("path", r.URL.Path), zap.Error(err))
	w.Header().Set("Retry-After", "1")
	why := "the database did not answer"
	if errors.Is(err, errSlotsBusy) {
		why = "the server's database reads are all busy"
	}
	writeProblem(w, http.StatusServiceUnavailable, probUnavailable, "cannot "+what+" now: "+why+"; try again", "")
}
