package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

// ItemsQuery filters ListItems.
type ItemsQuery struct {
	ItemID           string     // "" = every item
	Tier             tiers.Tier // "" = every tier
	Limit            int        // <= 0 = no limit
	IncludeSynthetic bool       // fixtures are hidden unless asked for
}

// ItemRow is one tracked item as `collector items` shows it.
type ItemRow struct {
	ItemID          string
	Name            string
	Tier            tiers.Tier
	Score           float64
	NextCollectAt   *time.Time
	LastCollectedAt *time.Time
	TierChangedAt   *time.Time
	TierReason      string
	PinnedTier      tiers.Tier // "" = not pinned
	// What collection has learnt (decayed over catalog.estimate_window).
	Observed       tierplan.Observations
	SalesPerHour   *float64 // nil before any observed interval
	ChangesPerHour *float64 // Cho & Garcia-Molina estimate; nil before any observed interval
	SalesGaps      int64    // collections that found sales lost since the previous one
	// Requests is what one collection costs at its tier as last planned (below 2: it shares
	// packed calls).
	Requests float64
	// Synthetic: a fixture (the schema's synthetic_item), which the read API does not serve.
	Synthetic bool
	// How its last collection ended ("" before any), the failures in a row up to it, and the
	// last failure's error: an item the provider no longer knows fails item_error at its
	// tier until it goes dormant (never, while pinned), and shows here.
	LastOutcome   string
	FailureStreak int32
	LastError     string
}

// ListItems returns tracked items, most popular first. Synthetic items are excluded unless
// q.IncludeSynthetic.
func ListItems(ctx context.Context, db Reader, q ItemsQuery) ([]ItemRow, error) {
	var limit *int
	if q.Limit > 0 {
		limit = &q.Limit
	}
	rows, err := db.Query(ctx, `
		SELECT `+itemColumns+`
		FROM tracked_items
		WHERE ($1 = '' OR collection_tier = $1)
		  AND ($2 OR NOT synthetic_item(item_id))
		  AND ($4 = '' OR item_id = $4)
		ORDER BY popularity_score DESC, item_id
		LIMIT $3`, string(q.Tier), q.IncludeSynthetic, limit, q.ItemID)
	if err != nil {
		return nil, fmt.Errorf("list tracked items: %w", err)
	}
	out, err := scanItems(rows)
	if err != nil {
		return nil, fmt.Errorf("list tracked items: %w", err)
	}
	return out, nil
}

// itemColumns are what scanItems reads, in its order.
const itemColumns = `item_id, item_name, collection_tier, popularity_score, next_collect_at, last_collected_at,
		       tier_changed_at, coalesce(tier_reason, ''), coalesce(pinned_tier, ''),
		       est_collections, est_changes, est_changed_seconds, est_unchanged_seconds, est_sales, sales_gaps,
		       requests_per_collection, synthetic_item(item_id),
		       coalesce(last_outcome, ''), failure_streak, coalesce(last_error, '')`

func scanItems(rows pgx.Rows) ([]ItemRow, error) {
	defer rows.Close()
	var out []ItemRow
	for rows.Next() {
		r, err := scanItem(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// scanItemsWith also reads the lower-cased name that follows itemColumns (a name cursor).
func scanItemsWith(rows pgx.Rows) ([]ItemRow, []string, error) {
	defer rows.Close()
	var out []ItemRow
	var names []string
	for rows.Next() {
		var name string
		r, err := scanItem(rows, &name)
		if err != nil {
			return nil, nil, err
		}
		out, names = append(out, r), append(names, name)
	}
	return out, names, rows.Err()
}

func scanItem(rows pgx.Rows, extra ...any) (ItemRow, error) {
	var r ItemRow
	var tier, pinned string
	var sales float64
	o := &r.Observed
	dst := append([]any{&r.ItemID, &r.Name, &tier, &r.Score, &r.NextCollectAt, &r.LastCollectedAt,
		&r.TierChangedAt, &r.TierReason, &pinned, &o.Accesses, &o.Changes, &o.ChangedSeconds, &o.UnchangedSeconds,
		&sales, &r.SalesGaps, &r.Requests, &r.Synthetic, &r.LastOutcome, &r.FailureStreak, &r.LastError}, extra...)
	if err := rows.Scan(dst...); err != nil {
		return r, err
	}
	r.Tier, r.PinnedTier = tiers.Tier(tier), tiers.Tier(pinned)
	if rate, ok := o.ChangeRate(); ok {
		perHour, sph := rate*3600, sales/(o.ChangedSeconds+o.UnchangedSeconds)*3600
		r.ChangesPerHour, r.SalesPerHour = &perHour, &sph
	}
	return r, nil
}
