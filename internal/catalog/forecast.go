package catalog

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

// TierForecast is what the last applied tier plan predicted for one scheduled tier
// (tier_forecast): predicted, not measured. Its Freshness is the share of time an item's stored
// copy matches the market, weighted by popularity (tierplan.PredictByTier); tierplan.Overall
// combines tiers.
type TierForecast struct {
	tierplan.TierForecast
	PlannedAt time.Time // the database clock of the recalculation that planned it
}

// writeForecast replaces the stored forecast by fs in one statement, as of the transaction's
// now(): tiers of fs are upserted, every other tier's row is removed.
func writeForecast(ctx context.Context, tx pgx.Tx, fs []tierplan.TierForecast) error {
	names := make([]string, len(fs))
	items := make([]int32, len(fs))
	demand := make([]float64, len(fs))
	fresh := make([]float64, len(fs))
	weight := make([]float64, len(fs))
	for i, f := range fs {
		names[i], items[i], demand[i], fresh[i], weight[i] = string(f.Tier), int32(f.Items), f.Demand, f.Freshness, f.Weight
	}
	// The DELETE sees the table as the statement began, so it never removes a row the INSERT
	// writes; the two touch different tiers.
	if _, err := tx.Exec(ctx, `
		WITH f AS (SELECT * FROM unnest($1::text[], $2::int[], $3::float8[], $4::float8[], $5::float8[])
		           AS f(tier, items, demand, freshness, weight)),
		gone AS (DELETE FROM tier_forecast t WHERE t.tier <> ALL($1::text[]))
		INSERT INTO tier_forecast (tier, items, demand, freshness, weight, planned_at)
		SELECT tier, items, demand, freshness, weight, now() FROM f
		ON CONFLICT (tier) DO UPDATE SET items = excluded.items, demand = excluded.demand,
			freshness = excluded.freshness, weight = excluded.weight, planned_at = excluded.planned_at`,
		names, items, demand, fresh, weight); err != nil {
		return fmt.Errorf("store the tier forecast: %w", err)
	}
	return nil
}

// ReadForecast reads the last applied plan's forecast, one row per scheduled tier it planned
// items in, fastest tier first; none before any plan was applied. At most four rows: cheap on
// any request path.
func ReadForecast(ctx context.Context, db DB) ([]TierForecast, error) {
	rows, err := db.Query(ctx, `SELECT tier, items, demand, freshness, weight, planned_at FROM tier_forecast`)
	if err != nil {
		return nil, fmt.Errorf("read the tier forecast: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TierForecast, error) {
		var f TierForecast
		var tier string
		err := r.Scan(&tier, &f.Items, &f.Demand, &f.Freshness, &f.Weight, &f.PlannedAt)
		f.Tier = tiers.Tier(tier)
		return f, err
	})
	if err != nil {
		return nil, fmt.Errorf("read the tier forecast: %w", err)
	}
	slices.SortFunc(out, func(a, b TierForecast) int { return a.Tier.Rank() - b.Tier.Rank() })
	return out, nil
}
