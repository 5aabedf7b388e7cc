package outbox

import (
	"context"
	"fmt"

	"github.com/duecollector/duecollector/internal/store"
)

// PurgeSynthetic deletes the synthetic items' events and their pending entries, batch rows
// per statement. The outbox has no item_id index (enqueuing is on the write path), so the
// batches walk it once in id order.
func PurgeSynthetic(ctx context.Context, db store.Execer, batch int) (int64, error) {
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
			SELECT count(*), max(id) FROM d`, after, batch).Scan(&n, &last)
		if err != nil {
			return total, fmt.Errorf("outbox: %w", err)
		}
		total += n
		if n < int64(batch) || last == nil {
			return total, nil
		}
		after = *last
	}
}
