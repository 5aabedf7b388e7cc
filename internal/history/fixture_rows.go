package history

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/store"
)

// SnapshotRows are snapshots written other than by a collection (seed:synthetic's fixtures),
// column by column. A NaN SalesVWAP is a snapshot without sales.
type SnapshotRows struct {
	ItemIDs, ClaimTokens, Tiers               []string
	At                                        []time.Time
	Count, SalesCount                         []int32
	Qty, Lowest, Median, APIAverage, SalesQty []int64
	Weighted, SalesVWAP                       []float64
}

// SaleRows are sales written other than by a collection, column by column.
type SaleRows struct {
	ItemIDs          []string
	At               []time.Time
	Seq              []int32
	Qty, Unit, Total []int64
}

// rowsChunk bounds each statement's arrays.
const rowsChunk = 5000

// InsertSnapshotRows writes snapshots a re-run may repeat (one per claim token and time) and
// returns how many were new. Candles are the caller's: RebuildCandles once the rows are in.
func InsertSnapshotRows(ctx context.Context, tx pgx.Tx, s SnapshotRows) (int64, error) {
	var n int64
	for lo := 0; lo < len(s.ItemIDs); lo += rowsChunk {
		hi := min(lo+rowsChunk, len(s.ItemIDs))
		tag, err := tx.Exec(ctx, `
			INSERT INTO auction_snapshots (item_id, claim_token, collected_at, tier, listing_count, listing_quantity,
			       lowest_unit_price, median_unit_price, weighted_unit_price, api_average_price,
			       sales_count, sales_quantity, sales_vwap)
			SELECT u.id, u.token::uuid, u.at, u.tier, u.cnt, u.qty, u.lowest, u.median, u.weighted, u.avg,
			       u.scount, u.sqty, CASE WHEN u.vwap = 'NaN' THEN NULL ELSE u.vwap END
			FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::text[], $5::int[], $6::bigint[], $7::bigint[],
			            $8::bigint[], $9::float8[], $10::bigint[], $11::int[], $12::bigint[], $13::float8[])
			     AS u(id, token, at, tier, cnt, qty, lowest, median, weighted, avg, scount, sqty, vwap)
			ON CONFLICT (claim_token, collected_at) DO NOTHING`,
			s.ItemIDs[lo:hi], s.ClaimTokens[lo:hi], s.At[lo:hi], s.Tiers[lo:hi], s.Count[lo:hi], s.Qty[lo:hi], s.Lowest[lo:hi],
			s.Median[lo:hi], s.Weighted[lo:hi], s.APIAverage[lo:hi], s.SalesCount[lo:hi], s.SalesQty[lo:hi], s.SalesVWAP[lo:hi])
		if err != nil {
			return n, fmt.Errorf("insert snapshots: %w", err)
		}
		n += tag.RowsAffected()
	}
	return n, nil
}

// InsertSaleRows writes sales a re-run may repeat (one per item, time and seq) and returns how
// many were new; each is first seen when it was sold.
func InsertSaleRows(ctx context.Context, tx pgx.Tx, s SaleRows) (int64, error) {
	var n int64
	for lo := 0; lo < len(s.ItemIDs); lo += rowsChunk {
		hi := min(lo+rowsChunk, len(s.ItemIDs))
		tag, err := tx.Exec(ctx, `
			INSERT INTO auction_sales (item_id, sold_at, seq, quantity, unit_price, total_price, first_seen_at)
			SELECT u.id, u.at, u.seq, u.qty, u.unit, u.total, u.at
			FROM unnest($1::text[], $2::timestamptz[], $3::int[], $4::bigint[], $5::bigint[], $6::bigint[])
			     AS u(id, at, seq, qty, unit, total)
			ON CONFLICT (item_id, sold_at, seq) DO NOTHING`,
			s.ItemIDs[lo:hi], s.At[lo:hi], s.Seq[lo:hi], s.Qty[lo:hi], s.Unit[lo:hi], s.Total[lo:hi])
		if err != nil {
			return n, fmt.Errorf("insert sales: %w", err)
		}
		n += tag.RowsAffected()
	}
	return n, nil
}

// syntheticPurges are this package's item-keyed tables; a ctid is unique only within one
// partition, so the partitioned tables name rows by (tableoid, ctid).
var syntheticPurges = []store.ItemPurge{
	{Table: "auction_snapshots",
		IDs: `SELECT DISTINCT item_id FROM auction_snapshots WHERE synthetic_item(item_id)`,
		Delete: `DELETE FROM auction_snapshots WHERE (tableoid, ctid) IN (
		     SELECT tableoid, ctid FROM auction_snapshots WHERE item_id = ANY ($1) AND synthetic_item(item_id) LIMIT $2)`},
	{Table: "auction_sales",
		IDs: `SELECT DISTINCT item_id FROM auction_sales WHERE synthetic_item(item_id)`,
		Delete: `DELETE FROM auction_sales WHERE (tableoid, ctid) IN (
		     SELECT tableoid, ctid FROM auction_sales WHERE item_id = ANY ($1) AND synthetic_item(item_id) LIMIT $2)`},
	{Table: "price_candles",
		IDs: `SELECT DISTINCT item_id FROM price_candles WHERE synthetic_item(item_id)`,
		Delete: `DELETE FROM price_candles WHERE ctid = ANY (ARRAY(
		     SELECT ctid FROM price_candles WHERE item_id = ANY ($1) AND synthetic_item(item_id) LIMIT $2))`},
}

// PurgeSynthetic deletes every snapshot, sale and candle of a synthetic item, batch rows per
// statement.
func PurgeSynthetic(ctx context.Context, db store.Execer, batch int) ([]store.Purged, error) {
	return store.Purge(ctx, db, batch, syntheticPurges...)
}
