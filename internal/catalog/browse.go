package catalog

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/duecollector/duecollector/internal/tiers"
)

// Filters of BrowseItems. Each walks an index of its own in its own order, so a page costs
// its rows, never the catalog's size.
const (
	BrowseAll     = ""        // most popular first (item_browse_score_idx, or _tier_score_idx for one tier)
	BrowsePinned  = "pinned"  // pinned items, most popular first (tracked_items_pinned_idx)
	BrowseOverdue = "overdue" // claimable for longer than Overdue, longest waiting first (tracked_items_due_idx)
	BrowseGaps    = "gaps"    // items that lost sales between collections, most gaps first (tracked_items_gaps_idx)
)

// BrowseFilters lists the filters in the order a console offers them.
var BrowseFilters = []string{BrowseAll, BrowsePinned, BrowseOverdue, BrowseGaps}

// BrowseQuery is one page of the console's item list.
type BrowseQuery struct {
	// Search, when set, lists the items whose name starts with it (case-insensitive), in name
	// order, after the item whose id is exactly Search (item_browse_name_idx); Filter is
	// then ignored.
	Search string
	Filter string
	Tier   tiers.Tier // "" = every tier
	// Overdue is how long a claimable item waits before it counts as overdue (daemon.OverdueAfter).
	Overdue time.Duration
	After   *Cursor // nil = the first page
	Limit   int
	// Public leaves synthetic fixtures out of the exact-id match too (the read API); the
	// console finds them by id.
	Public bool
}

// Cursor is where a page ended: the sort key of its last row. Only the fields of the page's
// order are set.
type Cursor struct {
	Score float64    `json:"s,omitempty"`
	Due   *time.Time `json:"d,omitempty"`
	Gaps  int64      `json:"g,omitempty"`
	Name  string     `json:"n,omitempty"`
	ID    string     `json:"i"`
}

// Encode is the cursor as an opaque URL-safe token.
func (c *Cursor) Encode() string {
	b, _ := json.Marshal(c)
	return base64.RawURLEncoding.EncodeToString(b)
}

// DecodeCursor reads a token Encode wrote; anything else is an error naming no internals.
func DecodeCursor(s string) (*Cursor, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("not a page cursor")
	}
	var c Cursor
	// JSON may carry a NUL (\u0000) that Encode never writes and PostgreSQL cannot compare.
	if err := json.Unmarshal(b, &c); err != nil || c.ID == "" || strings.ContainsRune(c.ID+c.Name, 0) {
		return nil, errors.New("not a page cursor")
	}
	return &c, nil
}

// BrowseItems returns one page of items and the cursor of the next page (nil on the last).
// Keyset pagination: page N costs what page 1 does. Synthetic fixtures are left out.
func BrowseItems(ctx context.Context, db Reader, q BrowseQuery) ([]ItemRow, *Cursor, error) {
	if q.Limit <= 0 {
		q.Limit = 50
	}
	// The statement holds only the predicates this page has, so each one is an index bound
	// of the plan PostgreSQL caches for it ("$1 = '' OR …" would be a filter on every row).
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return fmt.Sprintf("$%d", len(args))
	}
	where := []string{"NOT synthetic_item(t.item_id)"}
	// The orders every item takes part in walk item_browse's indexes (the schema says why they
	// are not on tracked_items); the others walk partial indexes of tracked_items.
	from, tierCol := "tracked_items t", "t.collection_tier"
	if q.Search != "" || q.Filter == BrowseAll {
		from, tierCol = "tracked_items t JOIN item_browse b USING (item_id)", "b.tier"
	}
	if q.Tier != "" && q.Filter != BrowseOverdue {
		where = append(where, tierCol+" = "+arg(string(q.Tier)))
	}
	c := q.After
	var order string
	switch {
	case q.Search != "":
		// name_key is lower(item_name) in the "C" collation: the LIKE prefix, the order and the
		// keyset all use item_browse_name_idx. The exact id comes first, on the first page only.
		// The pattern is lowered by the same lower() as name_key (the database's locale), not
		// by Go's: under LC_CTYPE C lower() leaves "É" as it is, and Go's "é" matched nothing.
		where = append(where, `b.name_key LIKE lower(`+arg(escapeLike(q.Search)+"%")+`)`,
			"b.item_id <> "+arg(q.Search))
		if c != nil {
			where = append(where, `(b.name_key, b.item_id) > (`+arg(c.Name)+", "+arg(c.ID)+")")
		}
		order = `b.name_key, b.item_id`
	case q.Filter == BrowseAll:
		if c != nil {
			where = append(where, "(b.score, b.item_id) < ("+arg(c.Score)+", "+arg(c.ID)+")")
		}
		order = `b.score DESC, b.item_id DESC`
	case q.Filter == BrowsePinned:
		where = append(where, "t.pinned_tier IS NOT NULL")
		if c != nil {
			where = append(where, "(t.popularity_score, t.item_id) < ("+arg(c.Score)+", "+arg(c.ID)+")")
		}
		order = `t.popularity_score DESC, t.item_id DESC`
	case q.Filter == BrowseOverdue:
		// Claimable as DueByTier counts it: due and not held by a live lease.
		where = append(where, "t.next_collect_at <= now() - "+arg(q.Overdue.Milliseconds())+" * interval '1 millisecond'",
			"(t.lease_expires_at IS NULL OR t.lease_expires_at <= now())")
		if c != nil {
			where = append(where, "(t.next_collect_at, t.item_id) > ("+arg(c.Due)+", "+arg(c.ID)+")")
		}
		order = `t.next_collect_at, t.item_id`
		// The due index leads with the tier: the page is the first rows of each tier's range,
		// merged, instead of a sort of every overdue item.
		tiers := tierOrder
		if q.Tier != "" {
			tiers = []string{string(q.Tier)}
		}
		from = `unnest(` + arg(tiers) + `::text[]) AS o(tier) CROSS JOIN LATERAL (
			SELECT * FROM tracked_items t
			WHERE t.collection_tier = o.tier AND ` + strings.Join(where, " AND ") + `
			ORDER BY ` + order + ` LIMIT ` + arg(q.Limit+1) + `) t`
		where = []string{"true"}
	case q.Filter == BrowseGaps:
		where = append(where, "t.sales_gaps > 0")
		if c != nil {
			where = append(where, "(t.sales_gaps, t.item_id) < ("+arg(c.Gaps)+", "+arg(c.ID)+")")
		}
		order = `t.sales_gaps DESC, t.item_id DESC`
	default:
		return nil, nil, fmt.Errorf("browse items: filter %q: allowed %q, %q, %q or none", q.Filter, BrowsePinned, BrowseOverdue, BrowseGaps)
	}
	// One more row than asked says whether another page follows.
	rows, err := db.Query(ctx, `
		SELECT `+itemColumns+`, lower(item_name)
		FROM `+from+`
		WHERE `+strings.Join(where, " AND ")+`
		ORDER BY `+order+`
		LIMIT `+arg(q.Limit+1), args...)
	if err != nil {
		return nil, nil, fmt.Errorf("browse items: %w", err)
	}
	out, lowerNames, err := scanItemsWith(rows)
	if err != nil {
		return nil, nil, fmt.Errorf("browse items: %w", err)
	}
	var next *Cursor
	if len(out) > q.Limit {
		out, lowerNames = out[:q.Limit], lowerNames[:q.Limit]
		last := out[len(out)-1]
		next = &Cursor{ID: last.ItemID}
		switch {
		case q.Search != "":
			next.Name = lowerNames[len(lowerNames)-1]
		case q.Filter == BrowseOverdue:
			next.Due = last.NextCollectAt
		case q.Filter == BrowseGaps:
			next.Gaps = last.SalesGaps
		default:
			next.Score = last.Score
		}
	}
	if q.Search != "" && q.After == nil {
		// An exact id comes first (and only there): ids are what logs and events name.
		exact, err := ListItems(ctx, db, ItemsQuery{ItemID: q.Search, IncludeSynthetic: !q.Public})
		if err != nil {
			return nil, nil, err
		}
		if len(exact) == 1 && (q.Tier == "" || exact[0].Tier == q.Tier) {
			out = append(exact, out...)
		}
	}
	return out, next, nil
}

// escapeLike makes s match itself in a LIKE pattern (the default escape is a backslash).
func escapeLike(s string) string {
	return strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(s)
}
