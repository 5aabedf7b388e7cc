package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/tiers"
)

// Interest kinds accepted by item_interest.kind.
const (
	KindView  = "view"
	KindWatch = "watch"
	KindTouch = "touch"
)

// ErrNotTracked: the item id is not in tracked_items.
var ErrNotTracked = errors.New("item is not tracked (add it to the targets file and run import-items)")

// ErrFixture: the item is a synthetic fixture, which is never scheduled: a pin or an interest
// event would put it on the schedule, to be collected (and fail) at its tier for good.
var ErrFixture = errors.New("is a synthetic fixture (seed:synthetic): fixtures are never collected or scheduled")

// InterestEvent is one row for item_interest.
type InterestEvent struct {
	ItemID string
	Kind   string  // view, watch or touch
	Weight float64 // 0 means 1
	Source string  // who recorded it, e.g. "cli" or a service name
}

// Reactivation says what an interest event did to its item.
type Reactivation struct {
	Reactivated   bool
	From, To      tiers.Tier
	NextCollectAt *time.Time // after the event; nil for an item that stayed DORMANT (never)
}

// MaxInterestWeight is the schema's cap on item_interest.weight: well below where the scoring's
// sums and products leave double precision.
const MaxInterestWeight = 1e9

// RecordInterest stores an interest event and, when the item is DORMANT or COLD_10M,
// promotes it to reactivateTo and makes it due now (or keeps an earlier due time), in one
// transaction. Other tiers are already collected often enough: the event only counts toward
// the next popularity score. Leases are not touched: an item being collected right now is served
// by that collection, and its next one is on the new tier's phase (its write-back keeps it).
func RecordInterest(ctx context.Context, db DB, ev InterestEvent, reactivateTo tiers.Tier) (Reactivation, error) {
	switch ev.Kind {
	case KindView, KindWatch, KindTouch:
	default:
		return Reactivation{}, fmt.Errorf("interest kind %q: allowed view, watch, touch", ev.Kind)
	}
	if ev.Weight == 0 {
		ev.Weight = 1
	}
	if ev.Weight < 0 || ev.Weight > MaxInterestWeight || math.IsNaN(ev.Weight) {
		return Reactivation{}, fmt.Errorf("interest weight %v must be > 0 and at most %g", ev.Weight, MaxInterestWeight)
	}
	if reactivateTo.Rank() >= tiers.Cold.Rank() {
		return Reactivation{}, fmt.Errorf("reactivation tier %q must be collected more often than COLD_10M", reactivateTo)
	}
	var r Reactivation
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		var tier string
		var fixture bool
		var now time.Time
		// The row lock orders this against a concurrent recalculation of the same item.
		err := tx.QueryRow(ctx, `SELECT collection_tier, next_collect_at, synthetic_item(item_id), now() FROM tracked_items WHERE item_id = $1 FOR NO KEY UPDATE`,
			ev.ItemID).Scan(&tier, &r.NextCollectAt, &fixture, &now)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("item %s: %w", ev.ItemID, ErrNotTracked)
		}
		if err != nil {
			return err
		}
		if fixture {
			return fmt.Errorf("item %s %w", ev.ItemID, ErrFixture)
		}
		r.From, r.To = tiers.Tier(tier), tiers.Tier(tier)
		if _, err := tx.Exec(ctx, `INSERT INTO item_interest (item_id, kind, weight, source) VALUES ($1, $2, $3, $4)`,
			ev.ItemID, ev.Kind, ev.Weight, ev.Source); err != nil {
			return err
		}
		if r.From != tiers.Dormant && r.From != tiers.Cold {
			return nil
		}
		reason := fmt.Sprintf("%s event", ev.Kind)
		if ev.Source != "" {
			reason += " from " + ev.Source
		}
		reason += ": reactivated from " + tier
		// tier_changed_at = now() = this event's occurred_at, so recalculation sees the event
		// as already acted on and does not reactivate the item a second time.
		// An item being collected right now is served by that collection: its next one is on
		// the new tier's phase, not due again the moment its write-back keeps this schedule.
		next, _ := tiers.NextDue(ev.ItemID, reactivateTo, now)
		err = tx.QueryRow(ctx, `
			UPDATE tracked_items SET collection_tier = $2,
			       next_collect_at = CASE WHEN coalesce(lease_expires_at > now(), false) THEN $4 ELSE LEAST(next_collect_at, now()) END,
			       tier_changed_at = now(), tier_reason = $3, updated_at = now()
			WHERE item_id = $1
			RETURNING next_collect_at`, ev.ItemID, string(reactivateTo), reason, next).Scan(&r.NextCollectAt)
		if err != nil {
			return err
		}
		r.Reactivated, r.To = true, reactivateTo
		return nil
	})
	if err != nil {
		return Reactivation{}, fmt.Errorf("record %s interest for item %s: %w", ev.Kind, ev.ItemID, err)
	}
	return r, nil
}
