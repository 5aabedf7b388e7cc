package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
)

// Windows of /timeseries: the default span when since is absent, and the longest allowed, per
// interval, so an answer stays a bounded walk of one index range and of a bounded size (it is
// held whole while encoded): at most about 10,000 points, whether a week of raw snapshots of
// an item collected every minute (HOT_1M, the most often) or a year of hourly candles.
var (
	defaultSpan = map[string]time.Duration{"raw": 24 * time.Hour, history.Hourly: 30 * 24 * time.Hour, history.Daily: 365 * 24 * time.Hour}
	maxSpan     = map[string]time.Duration{"raw": 7 * 24 * time.Hour, history.Hourly: 366 * 24 * time.Hour, history.Daily: 10 * 366 * 24 * time.Hour}
)

// defaultAlign rounds the default since down to whole buckets (minutes for raw).
var defaultAlign = map[string]time.Duration{"raw": time.Minute, history.Hourly: time.Hour, history.Daily: 24 * time.Hour}

func (a *API) getTimeseries(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !idPattern.MatchString(id) {
		badParam(w, "id", fmt.Sprintf("item id %q: 1 to 128 letters, digits, '-', '_', '.' or ':'", provider.Clean(id, 40)))
		return
	}
	q, ok := params(w, r, "interval", "since", "until")
	if !ok {
		return
	}
	interval := q.Get("interval")
	if interval == "" {
		interval = history.Hourly
	}
	if _, ok := defaultSpan[interval]; !ok {
		badParam(w, "interval", fmt.Sprintf("interval %q: allowed raw, 1h, 1d", provider.Clean(interval, 20)))
		return
	}
	since, err := parseTime(q.Get("since"))
	if err != nil {
		badParam(w, "since", "since: "+err.Error())
		return
	}
	until, err := parseTime(q.Get("until"))
	if err != nil {
		badParam(w, "until", "until: "+err.Error())
		return
	}
	if until.IsZero() && !since.IsZero() {
		// A window that ends now is judged against this host's clock first, with a margin for
		// its skew from the database's: one that can never be served gets its 400 without a
		// read, not a 503 "try again" while the database is busy or away.
		if local := time.Now(); since.After(local.Add(clockMargin)) {
			badParam(w, "since", fmt.Sprintf("since %s is not before until (now)", since.Format(time.RFC3339)))
			return
		} else if local.Sub(since) > maxSpan[interval]+clockMargin {
			badParam(w, "since", fmt.Sprintf("the window since %s until now is longer than %s, the most one %s request may span; page by until",
				since.Format(time.RFC3339), days(maxSpan[interval]), interval))
			return
		}
	}
	end := until
	if end.IsZero() || since.IsZero() {
		now, err := store.Now(r.Context(), a.db)
		if err != nil {
			a.unavailable(w, r, "read the database clock", err)
			return
		}
		if end.IsZero() {
			end = now
		}
	}
	if since.IsZero() {
		// Whole buckets, so a poll that repeats the default window gets the same answer (and
		// its 304) until the data changes or a new bucket starts.
		since = end.Add(-defaultSpan[interval]).Truncate(defaultAlign[interval])
	}
	switch {
	case !since.Before(end):
		badParam(w, "since", fmt.Sprintf("since %s is not before until %s", since.Format(time.RFC3339), end.Format(time.RFC3339)))
		return
	case end.Sub(since) > maxSpan[interval]:
		badParam(w, "since", fmt.Sprintf("the window since %s until %s is longer than %s, the most one %s request may span; page by until",
			since.Format(time.RFC3339), end.Format(time.RFC3339), days(maxSpan[interval]), interval))
		return
	}
	s, err := catalog.ReadPublicSeries(r.Context(), a.db, id, interval, since, until)
	if errors.Is(err, catalog.ErrNotTracked) && a.primary != nil && fromReplica(r.Context()) {
		// The replica trails the primary by up to seconds: an item added since is not on it
		// yet. The answer is then the primary's alone, and Read-Source says so.
		store.ServedFrom(r.Context()).Reset()
		s, err = catalog.ReadPublicSeries(r.Context(), a.primary, id, interval, since, until)
	}
	if errors.Is(err, catalog.ErrNotTracked) {
		writeProblem(w, http.StatusNotFound, probNotFound, fmt.Sprintf("no tracked item has id %q", id), "id")
		return
	}
	if err != nil {
		a.unavailable(w, r, "read the series", err)
		return
	}
	// The same document `collector history -o json` prints. No Last-Modified: the answer
	// changes while the item's last collection stays put (the default window slides, retention
	// deletes rows), so If-Modified-Since would be answered 304 for a changed series. The ETag,
	// a hash of the answer, is exact.
	a.answer(w, r, s.Document(interval, since, until), "encode the series")
}

// fromReplica is whether any of the request's reads so far was answered by the read replica.
func fromReplica(ctx context.Context) bool {
	s := store.ServedFrom(ctx)
	return s != nil && strings.HasPrefix(s.String(), string(store.SourceReplica))
}

// clockMargin is how far this host's clock may be from the database's before a window that
// ends now is refused on it rather than on the database's clock.
const clockMargin = time.Minute

func days(d time.Duration) string { return fmt.Sprintf("%d days", int(d/(24*time.Hour))) }

// parseTime reads RFC 3339 ("2026-12-01T10:00:00Z") or a UTC date ("2026-12-01"); "" is zero
// (absent). A time before 1970 is refused: the zero time would read as absent, and no market
// data is that old. So is one after 9999 in UTC (9999-12-31T23:00:00-23:00 is in 10000), which
// the answer could not hold: JSON times have four-digit years.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		// An unescaped "+09:00" in a query string arrives as " 09:00".
		t, err = time.Parse(time.RFC3339Nano, strings.Replace(s, " ", "+", 1))
	}
	if err != nil {
		t, err = time.Parse(time.DateOnly, s)
	}
	switch {
	case err != nil:
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (2026-12-01T10:00:00Z) or a date (2026-12-01)", provider.Clean(s, 40))
	case t.UTC().Year() < 1970:
		return time.Time{}, fmt.Errorf("%q is before 1970; leave the parameter out for its default", provider.Clean(s, 40))
	case t.UTC().Year() > 9999:
		return time.Time{}, fmt.Errorf("%q is after the year 9999 in UTC", provider.Clean(s, 40))
	}
	return t, nil
}
