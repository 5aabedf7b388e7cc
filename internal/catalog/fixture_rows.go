package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/duecollector/duecollector/internal/store"
)

// FixtureItems are tracked items written by seed:synthetic, column by column: never
// scheduled (there is no such item at the provider), with their tier and score as computed.
type FixtureItems struct {
	IDs, Names, Tiers, Reasons []string
	Scores                     []float64
	Created, LastCollected     []time.Time
}

// InsertFixtureItems writes the items not tracked yet and returns how many were new.
func InsertFixtureItems(ctx context.Context, db DB, it FixtureItems) (int64, error) {
	tag, err := db.Exec(ctx, `
		INSERT INTO tracked_items (item_id, item_name, collection_tier, next_collect_at, popularity_score,
		                           tier_changed_at, tier_reason, created_at, last_collected_at)
		SELECT u.id, u.name, u.tier, NULL, u.score, u.created, u.reason, u.created, u.last
		FROM unnest($1::text[], $2::text[], $3::text[], $4::float8[], $5::text[], $6::timestamptz[], $7::timestamptz[])
		     AS u(id, name, tier, score, reason, created, last)
		ON CONFLICT (item_id) DO NOTHING`,
		it.IDs, it.Names, it.Tiers, it.Scores, it.Reasons, it.Created, it.LastCollected)
	if err != nil {
		return 0, fmt.Errorf("insert fixture items: %w", err)
	}
	return tag.RowsAffected(), nil
}

// InsertViews records one view of each item at each time from source, unless that event is
// there already (item_interest has no natural key), and returns how many were new.
func InsertViews(ctx context.Context, db DB, ids []string, at []time.Time, source string) (int64, error) {
	tag, err := db.Exec(ctx, `
		INSERT INTO item_interest (item_id, kind, weight, occurred_at, source)
		SELECT u.id, 'view', 1, u.at, $3
		FROM unnest($1::text[], $2::timestamptz[]) AS u(id, at)
		WHERE NOT EXISTS (SELECT 1 FROM item_interest i
		                  WHERE i.item_id = u.id AND i.occurred_at = u.at AND i.source = $3)`,
		ids, at, source)
	if err != nil {
		return 0, fmt.Errorf("insert views: %w", err)
	}
	return tag.RowsAffected(), nil
}

// syntheticPurges: tracked_items last, so that an interrupted purge can simply be run again
// (item_browse goes with its item: ON DELETE CASCADE).
var syntheticPurges = []store.ItemPurge{
	{Table: "item_interest",
		IDs: `SELECT DISTINCT item_id FROM item_interest WHERE synthetic_item(item_id)`,
		Delete: `DELETE FROM item_interest WHERE ctid = ANY (ARRAY(
		     SELECT ctid FROM item_interest WHERE item_id = ANY ($1) AND synthetic_item(item_id) LIMIT $2))`},
	{Table: "tracked_items",
		IDs: `SELECT DISTINCT item_id FROM tracked_items WHERE synthetic_item(item_id)`,
		Delete: `DELETE FROM tracked_items WHERE ctid = ANY (ARRAY(
		     SELECT ctid FROM tracked_items WHERE item_id = ANY ($1) AND synthetic_item(item_id) LIMIT $2))`},
}

// PurgeSynthetic deletes every synthetic item and its interest events, batch rows per
// statement. Purge the tables that refer to the items first.
func PurgeSynthetic(ctx context.Context, db store.Execer, batch int) ([]store.Purged, error) {
	return store.Purge(ctx, db, batch, syntheticPurges...)
}
