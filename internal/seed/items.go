package seed

import (
	"context"
	"fmt"
	"time"

	"github.com/duecollector/duecollector/internal/tiers"
)

// ItemsQuery filters ListItems.
type ItemsQuery struct {
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
}

// ListItems returns tracked items, most popular first. Synthetic items are excluded unless
// q.IncludeSynthetic.
func ListItems(ctx context.Context, db DB, q ItemsQuery) ([]ItemRow, error) {
	var limit *int
	if q.Limit > 0 {
		limit = &q.Limit
	}
	rows, err := db.Query(ctx, `
		SELECT item_id, item_name, collection_tier, popularity_score, next_collect_at, last_collected_at,
		       tier_changed_at, coalesce(tier_reason, '')
		FROM tracked_items
		WHERE ($1 = '' OR collection_tier = $1)
		  AND ($2 OR NOT `+SyntheticSQL("item_id")+`)
		ORDER BY popularity_score DESC, item_id
		LIMIT $3`, string(q.Tier), q.IncludeSynthetic, limit)
	if err != nil {
		return nil, fmt.Errorf("list tracked items: %w", err)
	}
	defer rows.Close()
	var out []ItemRow
	for rows.Next() {
		var r ItemRow
		var tier string
		if err := rows.Scan(&r.ItemID, &r.Name, &tier, &r.Score, &r.NextCollectAt, &r.LastCollectedAt,
			&r.TierChangedAt, &r.TierReason); err != nil {
			return nil, fmt.Errorf("list tracked items: %w", err)
		}
		r.Tier = tiers.Tier(tier)
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list tracked items: %w", err)
	}
	return out, nil
}
