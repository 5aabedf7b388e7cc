package devdata

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/catalog"
)

// PurgeCount is how many rows purge:synthetic deleted from one table.
type PurgeCount struct {
	Table   string
	Deleted int64
}

// PurgeResult lists the tables in the order they were purged.
type PurgeResult []PurgeCount

// Total is the number of rows deleted across tables.
func (r PurgeResult) Total() int64 {
	var n int64
	for _, c := range r {
		n += c.Deleted
	}
	return n
}

// purgeTable is one item-keyed table: ids finds its synthetic item ids in one scan, del
// deletes a batch of their rows through the item_id index ($1 ids, $2 the batch size; the
// rule is checked again so a real row can never go).
type purgeTable struct{ name, ids, del string }

// purgeTables are every table keyed by item_id, tracked_items last so that an interrupted
// purge can simply be run again (item_browse goes with tracked_items: ON DELETE CASCADE). The
// outbox goes first, by purgeOutbox.
// A ctid is unique only within one partition, so the partitioned tables name rows by
// (tableoid, ctid).
var purgeTables = []purgeTable{
	{"auction_snapshots",
		`SELECT DISTINCT item_id FROM auction_snapshots WHERE synthetic_item(item_id)`,
		`DELETE FROM auction_snapshots WHERE (tableoid, ctid) IN (
		     SELECT tableoid, ctid FROM auction_snapshots WHERE item_id = ANY ($1) AND synthetic_item(item_id) LIMIT $2)`},
	{"auction_sales",
		`SELECT DISTINCT item_id FROM auction_sales WHERE synthetic_item(item_id)`,
		`DELETE FROM auction_sales WHERE (tableoid, ctid) IN (
		     SELECT tableoid, ctid FROM auction_sales WHERE item_id = ANY ($1) AND synthetic_item(item_id) LIMIT $2)`},
	{"price_candles",
		`SELECT DISTINCT item_id FROM price_candles WHERE synthetic_item(item_id)`,
		`DELETE FROM price_candles WHERE ctid = ANY (ARRAY(
		     SELECT ctid FROM price_candles WHERE item_id = ANY ($1) AND synthetic_item(item_id) LIMIT $2))`},
	{"item_interest",
		`SELECT DISTINCT item_id FROM item_interest WHERE synthetic_item(item_id)`,
		`DELETE FROM item_interest WHERE ctid = ANY (ARRAY(
		     SELECT ctid FROM item_interest WHERE item_id = ANY ($1) AND synthetic_item(item_id) LIMIT $2))`},
	{"tracked_items",
		`SELECT DISTINCT item_id FROM tracked_items WHERE synthetic_item(item_id)`,
		`DELETE FROM tracked_items WHERE ctid = ANY (ARRAY(
		     SELECT ctid FROM tracked_items WHERE item_id = ANY ($1) AND synthetic_item(item_id) LIMIT $2))`},
}

// PurgeSynthetic deletes every row of every synthetic item id (the schema's synthetic_item) from every
// table, batchSize rows per statement (default 5000) so locks stay short and a big purge
// does not stall collection. Each table is scanned once for its synthetic ids; batches then
// go through the item_id index.
func PurgeSynthetic(ctx context.Context, db catalog.DB, batchSize int) (PurgeResult, error) {
	if batchSize <= 0 {
		batchSize = 5000
	}
	n, err := purgeOutbox(ctx, db, batchSize)
	res := PurgeResult{{Table: "outbox", Deleted: n}}
	if err != nil {
		return res, fmt.Errorf("purge:synthetic outbox: %w", err)
	}
	for _, t := range purgeTables {
		n, err := t.purge(ctx, db, batchSize)
		res = append(res, PurgeCount{Table: t.name, Deleted: n})
		if err != nil {
			return res, fmt.Errorf("purge:synthetic %s: %w", t.name, err)
		}
	}
	return res, nil
}

func (t purgeTable) purge(ctx context.Context, db catalog.DB, batchSize int) (int64, error) {
	rows, _ := db.Query(ctx, t.ids)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	var total int64
	for {
		tag, err := db.Exec(ctx, t.del, ids, batchSize)
		if err != nil {
			return total, err
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < int64(batchSize) {
			return total, nil
		}
	}
}

// purgeOutbox deletes the synthetic items' events and their pending entries. The outbox has no
// item_id index (enqueuing is on the write path), so the batches walk it once in id order.
func purgeOutbox(ctx context.Context, db catalog.DB, batchSize int) (int64, error) {
	var total, after int64
	for {
		var n int64
		var last *int64
		err := db.QueryRow(ctx, `
			WITH d AS (
			    DELETE FROM outbox WHERE id IN (
			        SELECT id FROM outbox WHERE id > $1 AND synthetic_item(item_id) ORDER BY id LIMIT $2)
			    RETURNING id),
			p AS (DELETE FROM outbox_pending WHERE id IN (SELECT id FROM d))
			SELECT count(*), max(id) FROM d`, after, batchSize).Scan(&n, &last)
		if err != nil {
			return total, err
		}
		total += n
		if n < int64(batchSize) || last == nil {
			return total, nil
		}
		after = *last
	}
}
