package dispatcher

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/tiers"
)

// result is one claimed item after its provider calls.
type result struct {
	claim    Claim
	at       time.Time // database time when the fetch finished
	listings listingSummary
	sales    []saleRow
	packed   bool  // fetched in an itemIds call shared with other items
	err      error // nil = collected
	outcome  string
	salesGap bool          // sales were lost since the previous fetch (estimate.go)
	window   time.Duration // Config.EstimateWindow: how fast the change counts decay
}

type writeStats struct {
	applied   int      // items whose write-back matched their lease
	fenced    []string // items whose lease had passed to another worker: nothing written
	snapshots int
}

// writeBack stores a group of results in one short transaction: the fenced reschedule first
// (it locks the rows and tells which leases are still ours), then sales, snapshots and outbox
// rows for those items only. Success or failure, every item that is still ours is rescheduled
// by its tier, so nothing can stay due forever.
func writeBack(ctx context.Context, pool *pgxpool.Pool, results []result) (writeStats, error) {
	var ws writeStats
	n := len(results)
	ids := make([]string, n)
	tokens := make([]pgtype.UUID, n)
	tierNames := make([]string, n)
	nextAt := make([]pgtype.Timestamptz, n)
	attemptAt := make([]time.Time, n)
	oks := make([]bool, n)
	outcomes := make([]string, n)
	errTexts := make([]*string, n)
	lastSale := make([]*time.Time, n)
	for i, r := range results {
		for j := range r.sales {
			if lastSale[i] == nil || r.sales[j].SoldAt.After(*lastSale[i]) {
				lastSale[i] = &r.sales[j].SoldAt
			}
		}
		ids[i], tokens[i], tierNames[i], attemptAt[i] = r.claim.ItemID, r.claim.Token, string(r.claim.Tier), r.at
		if next, ok := tiers.NextDue(r.claim.ItemID, r.claim.Tier, r.at); ok {
			nextAt[i] = pgtype.Timestamptz{Time: next, Valid: true}
		}
		oks[i] = r.err == nil
		outcomes[i] = r.outcome
		if r.err != nil {
			s := provider.Clean(r.err.Error(), provider.MaxErrorRunes)
			errTexts[i] = &s
		}
	}

	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := observeChanges(ctx, tx, collectedOf(results)); err != nil {
			return err
		}
		rows, err := tx.Query(ctx, RescheduleSQL,
			ids, tokens, tierNames, nextAt, attemptAt, oks, outcomes, errTexts, lastSale)
		if err != nil {
			return fmt.Errorf("reschedule: %w", err)
		}
		live, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			return fmt.Errorf("reschedule: %w", err)
		}
		liveSet := make(map[string]bool, len(live))
		for _, id := range live {
			liveSet[id] = true
		}
		ws.applied = len(live)
		ws.fenced = ws.fenced[:0]
		var ok []result
		for _, r := range results {
			switch {
			case !liveSet[r.claim.ItemID]:
				ws.fenced = append(ws.fenced, r.claim.ItemID)
			case r.err == nil:
				ok = append(ok, r)
			}
		}
		if len(ok) == 0 {
			return nil
		}
		agg, err := insertSales(ctx, tx, ok)
		if err != nil {
			return err
		}
		events, err := insertSnapshots(ctx, tx, ok, agg)
		if err != nil {
			return err
		}
		ws.snapshots = len(events)
		return outbox.EnqueueSnapshots(ctx, tx, events)
	})
	if err != nil {
		return writeStats{}, fmt.Errorf("write back %d items: %w", n, err)
	}
	return ws, nil
}

func collectedOf(results []result) []result {
	var ok []result
	for _, r := range results {
		if r.err == nil {
			ok = append(ok, r)
		}
	}
	return ok
}

type salesAgg struct {
	count    int
	quantity int64
	value    float64
}

// insertSales stores sales not seen before; what the insert returns is exactly the new ones,
// which is what the snapshot reports.
func insertSales(ctx context.Context, tx pgx.Tx, ok []result) (map[string]*salesAgg, error) {
	var ids []string
	var soldAt []time.Time
	var seqs []int32
	var qty, unit, total []int64
	for _, r := range ok {
		for _, s := range r.sales {
			ids = append(ids, r.claim.ItemID)
			soldAt = append(soldAt, s.SoldAt)
			seqs = append(seqs, s.Seq)
			qty = append(qty, s.Quantity)
			unit = append(unit, s.UnitPrice)
			total = append(total, s.Total)
		}
	}
	agg := map[string]*salesAgg{}
	if len(ids) == 0 {
		return agg, nil
	}
	rows, err := tx.Query(ctx, `
		INSERT INTO auction_sales (item_id, sold_at, seq, quantity, unit_price, total_price)
		SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[])
		ON CONFLICT (item_id, sold_at, seq) DO NOTHING
		RETURNING item_id, quantity, unit_price`, ids, soldAt, seqs, qty, unit, total)
	if err != nil {
		return nil, fmt.Errorf("insert sales: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var q, u int64
		if err := rows.Scan(&id, &q, &u); err != nil {
			return nil, fmt.Errorf("insert sales: %w", err)
		}
		a := agg[id]
		if a == nil {
			a = &salesAgg{}
			agg[id] = a
		}
		a.count++
		a.quantity += q
		a.value += float64(q) * float64(u)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("insert sales: %w", err)
	}
	return agg, nil
}

func insertSnapshots(ctx context.Context, tx pgx.Tx, ok []result, agg map[string]*salesAgg) ([]outbox.SnapshotEvent, error) {
	n := len(ok)
	ids := make([]string, n)
	tokens := make([]pgtype.UUID, n)
	at := make([]time.Time, n)
	tierNames := make([]string, n)
	counts := make([]int32, n)
	quantities := make([]int64, n)
	lowest := make([]*int64, n)
	median := make([]*int64, n)
	weighted := make([]*float64, n)
	apiAvg := make([]*int64, n)
	salesCount := make([]int32, n)
	salesQty := make([]int64, n)
	vwap := make([]*float64, n)
	truncated := make([]bool, n)
	packed := make([]bool, n)
	events := make([]outbox.SnapshotEvent, n)
	byID := make(map[string]int, n)
	for i, r := range ok {
		l := r.listings
		ids[i], tokens[i], at[i], tierNames[i] = r.claim.ItemID, r.claim.Token, r.at, string(r.claim.Tier)
		counts[i], quantities[i] = int32(l.Count), l.Quantity
		lowest[i], median[i], weighted[i], apiAvg[i] = l.Lowest, l.Median, l.Weighted, l.APIAverage
		truncated[i], packed[i] = l.Truncated, r.packed
		ev := outbox.SnapshotEvent{
			ItemID: r.claim.ItemID, ItemName: r.claim.ItemName, Tier: string(r.claim.Tier),
			CollectedAt: r.at.UTC(), ListingCount: l.Count, ListingQuantity: l.Quantity,
			LowestUnitPrice: l.Lowest, MedianUnitPrice: l.Median, WeightedUnitPrice: l.Weighted,
			APIAveragePrice: l.APIAverage, ListingsTruncated: l.Truncated, Packed: r.packed,
			SalesGap: r.salesGap,
		}
		if a := agg[r.claim.ItemID]; a != nil && a.quantity > 0 {
			v := a.value / float64(a.quantity)
			salesCount[i], salesQty[i], vwap[i] = int32(a.count), a.quantity, &v
			ev.SalesCount, ev.SalesQuantity, ev.SalesVWAP = a.count, a.quantity, &v
		}
		events[i] = ev
		byID[r.claim.ItemID] = i
	}
	rows, err := tx.Query(ctx, SnapshotSQL,
		ids, tokens, at, tierNames, counts, quantities, lowest, median, weighted, apiAvg, salesCount, salesQty, vwap,
		truncated, packed)
	if err != nil {
		return nil, fmt.Errorf("insert snapshots: %w", err)
	}
	inserted, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.SnapshotEvent, error) {
		var id int64
		var item string
		if err := row.Scan(&id, &item); err != nil {
			return outbox.SnapshotEvent{}, err
		}
		ev := events[byID[item]]
		ev.SnapshotID = id
		return ev, nil
	})
	if err != nil {
		return nil, fmt.Errorf("insert snapshots: %w", err)
	}
	return inserted, nil
}

// RescheduleSQL is the fenced write-back of a batch: each item whose lease token still matches
// gets its next slot and outcome, and its lease is cleared; it returns the items it matched.
// If the tier changed while the item was leased, whoever changed it also set the new schedule;
// that is kept rather than the slot computed for the old tier. Exported for the benchmark's
// raw-SQL ceiling.
const RescheduleSQL = `
UPDATE tracked_items t
SET next_collect_at = CASE WHEN t.collection_tier = u.tier THEN u.next_at ELSE t.next_collect_at END,
    lease_expires_at = NULL, lease_token = NULL, leased_by = NULL,
    last_attempt_at = u.attempt_at,
    last_collected_at = CASE WHEN u.ok THEN u.attempt_at ELSE t.last_collected_at END,
    last_outcome = u.outcome,
    failure_streak = CASE WHEN u.ok THEN 0 ELSE t.failure_streak + 1 END,
    last_error = u.err,
    last_sale_at = greatest(t.last_sale_at, u.last_sale),
    updated_at = now()
FROM unnest($1::text[], $2::uuid[], $3::text[], $4::timestamptz[], $5::timestamptz[], $6::bool[], $7::text[], $8::text[], $9::timestamptz[])
     AS u(item_id, token, tier, next_at, attempt_at, ok, outcome, err, last_sale)
WHERE t.item_id = u.item_id AND t.lease_token = u.token
RETURNING t.item_id`

// SnapshotSQL stores a batch's snapshots, once per claim; it returns the new snapshot ids.
// Exported for the benchmark's raw-SQL ceiling.
const SnapshotSQL = `
INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, listing_count, listing_quantity,
	lowest_unit_price, median_unit_price, weighted_unit_price, api_average_price,
	sales_count, sales_quantity, sales_vwap, listings_truncated, packed)
SELECT * FROM unnest($1::text[], $2::uuid[], $3::timestamptz[], $4::text[], $5::int[], $6::bigint[],
	$7::bigint[], $8::bigint[], $9::float8[], $10::bigint[], $11::int[], $12::bigint[], $13::float8[],
	$14::bool[], $15::bool[])
ON CONFLICT (claim_token) DO NOTHING
RETURNING snapshot_id, item_id`
