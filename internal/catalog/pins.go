package catalog

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/tiers"
)

// ErrNotPinnable is a pin to a tier that has no interval (DORMANT): a caller's bad input.
var ErrNotPinnable = errors.New("cannot be pinned (allowed: " + tiers.ScheduledNames() + ")")

// PinItem fixes an item's tier (`collector items pin`): recalculation never moves it and the
// budget policy counts its demand against the budget. The item moves to the tier at once, on
// the tier's phase; a promotion never delays its next collection.
func PinItem(ctx context.Context, db DB, itemID string, t tiers.Tier) (TierChange, error) {
	if _, ok := t.Interval(); !ok {
		return TierChange{}, fmt.Errorf("pin item %s: tier %q: %w", itemID, t, ErrNotPinnable)
	}
	c := TierChange{ItemID: itemID, To: t, Reason: "pinned by an operator"}
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var from string
		var now time.Time
		var fixture bool
		err := tx.QueryRow(ctx, `SELECT collection_tier, now(), synthetic_item(item_id) FROM tracked_items WHERE item_id = $1 FOR NO KEY UPDATE`,
			itemID).Scan(&from, &now, &fixture)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("pin item %s: %w", itemID, ErrNotTracked)
		}
		if err != nil {
			return err
		}
		if fixture {
			return fmt.Errorf("pin item %s: %w", itemID, ErrFixture)
		}
		c.From = tiers.Tier(from)
		next, _ := tiers.NextDue(itemID, t, now)
		return tx.QueryRow(ctx, `
			UPDATE tracked_items SET pinned_tier = $2, collection_tier = $2,
			       next_collect_at = CASE WHEN collection_tier = $2 THEN next_collect_at
			                              WHEN $4 AND NOT coalesce(lease_expires_at > now(), false) THEN LEAST(next_collect_at, $3)
			                              ELSE $3 END,
			       tier_changed_at = CASE WHEN collection_tier = $2 THEN tier_changed_at ELSE now() END,
			       tier_reason = CASE WHEN collection_tier = $2 THEN tier_reason ELSE $5 END,
			       updated_at = now()
			WHERE item_id = $1
			RETURNING next_collect_at`, itemID, string(t), next, tiers.IsPromotion(c.From, t), c.Reason).Scan(&c.NextCollectAt)
	})
	if err != nil {
		return TierChange{}, fmt.Errorf("pin item %s to %s: %w", itemID, t, err)
	}
	return c, nil
}

// UnpinItem hands an item back to the policy; its tier stays until the next recalculation.
func UnpinItem(ctx context.Context, db DB, itemID string) error {
	tag, err := db.Exec(ctx, `UPDATE tracked_items SET pinned_tier = NULL, updated_at = now() WHERE item_id = $1`, itemID)
	if err != nil {
		return fmt.Errorf("unpin item %s: %w", itemID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("unpin item %s: %w", itemID, ErrNotTracked)
	}
	return nil
}

// UntrackItem stops tracking an item: its row goes (its search copy with it), so it is never
// collected again and the read API no longer lists it. Its history stays until retention drops
// it; import-items tracks it again as a new item. A collection of it under way writes nothing:
// its write-back is fenced by the row that is gone.
func UntrackItem(ctx context.Context, db DB, itemID string) error {
	tag, err := db.Exec(ctx, `DELETE FROM tracked_items WHERE item_id = $1`, itemID)
	if err != nil {
		return fmt.Errorf("untrack item %s: %w", itemID, err)
	}
	if tag.RowsAffected() == 0 {
		return fmt.Errorf("untrack item %s: %w", itemID, ErrNotTracked)
	}
	return nil
}
