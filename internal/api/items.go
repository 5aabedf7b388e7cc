package api

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/duecollector/duecollector/internal/catalog"
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
func (a *API) getItems(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	search := q.Get("q")
	if len(search) > 200 {
		badParam(w, "q", "q: at most 200 characters")
		return
	}
	limit := itemsPageDefault
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > itemsPageMax {
			badParam(w, "limit", fmt.Sprintf("limit %q: a whole number from 1 to %d", truncate(l, 20), itemsPageMax))
			return
		}
		limit = n
	}
	bq := catalog.BrowseQuery{Search: search, Filter: catalog.BrowseAll, Limit: limit}
	if c := q.Get("cursor"); c != "" {
		cur, err := catalog.DecodeCursor(c)
		if err != nil {
			badParam(w, "cursor", "cursor: "+err.Error()+"; pass next_cursor from the previous page as it is")
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
	b, err := jsonBody(ans, time.Time{})
	if err != nil {
		a.unavailable(w, r, "encode the items", err)
		return
	}
	serve(w, r, b)
}
