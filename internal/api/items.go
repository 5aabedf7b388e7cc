package api

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/provider"
)

// Page sizes of /items.
const (
	itemsPageDefault = 50
	itemsPageMax     = 200
)

type itemsAnswer struct {
	Items []itemRef `json:"items"`
	// Next is the URL of the next page; absent on the last.
	Next       string `json:"next,omitempty"`
	NextCursor string `json:"next_cursor,omitempty"`
}

type itemRef struct {
	ItemID     string  `json:"item_id"`
	Name       string  `json:"name"`
	Tier       string  `json:"tier"`
	Popularity float64 `json:"popularity"`
	Latest     string  `json:"latest"`
	Timeseries string  `json:"timeseries"`
}

// getItems searches by name prefix (case-insensitive; an exact id first) or, without q, lists
// every item most popular first; pages follow by keyset, so page N costs what page 1 does.
// checkText refuses what PostgreSQL would refuse (invalid UTF-8, NUL) and text over max
// characters, so neither reaches a statement.
func checkText(s string, max int) error {
	switch {
	case !utf8.ValidString(s):
		return errors.New("not valid UTF-8")
	case strings.ContainsRune(s, 0):
		return errors.New("contains a NUL character")
	case utf8.RuneCountInString(s) > max:
		return fmt.Errorf("at most %d characters", max)
	}
	return nil
}

func (a *API) getItems(w http.ResponseWriter, r *http.Request) {
	q, ok := params(w, r, "q", "limit", "cursor")
	if !ok {
		return
	}
	search := q.Get("q")
	if err := checkText(search, 200); err != nil {
		badParam(w, "q", "q: "+err.Error())
		return
	}
	limit := itemsPageDefault
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > itemsPageMax {
			badParam(w, "limit", fmt.Sprintf("limit %q: a whole number from 1 to %d", provider.Clean(l, 20), itemsPageMax))
			return
		}
		limit = n
	}
	bq := catalog.BrowseQuery{Search: search, Filter: catalog.BrowseAll, Limit: limit, Public: true}
	if c := q.Get("cursor"); c != "" {
		cur, err := catalog.DecodeCursor(c)
		// A cursor is only ever one this endpoint wrote: an id it would accept, a name key for
		// a search's pages and none for the list's (keysets of two orders do not mix).
		if err == nil && (!idPattern.MatchString(cur.ID) || checkText(cur.Name, 400) != nil || (cur.Name != "") != (search != "")) {
			err = errors.New("not a cursor of this query")
		}
		if err != nil {
			badParam(w, "cursor", "cursor: "+err.Error()+"; pass next_cursor from the previous page of the same q as it is")
			return
		}
		bq.After = cur
	}
	rows, next, err := catalog.BrowseItems(r.Context(), a.db, bq)
	if err != nil {
		a.unavailable(w, r, "search the items", err)
		return
	}
	ans := itemsAnswer{Items: make([]itemRef, len(rows))}
	for i, it := range rows {
		esc := url.PathEscape(it.ItemID)
		ans.Items[i] = itemRef{ItemID: it.ItemID, Name: it.Name, Tier: string(it.Tier), Popularity: it.Score,
			Latest: Prefix + "latest?ids=" + url.QueryEscape(it.ItemID), Timeseries: Prefix + "items/" + esc + "/timeseries"}
	}
	if next != nil {
		ans.NextCursor = next.Encode()
		nq := url.Values{"cursor": {ans.NextCursor}}
		if search != "" {
			nq.Set("q", search)
		}
		if limit != itemsPageDefault {
			nq.Set("limit", strconv.Itoa(limit))
		}
		ans.Next = Prefix + "items?" + nq.Encode()
	}
	a.answer(w, r, ans, "encode the items")
}
