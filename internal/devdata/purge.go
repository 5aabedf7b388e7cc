package devdata

import (
	"context"
	"fmt"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/store"
)

// PurgeCount is how many rows purge:synthetic deleted from one table.
type PurgeCount = store.Purged

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

// PurgeSynthetic deletes every row of every synthetic item id (the schema's synthetic_item)
// from every table, batchSize rows per statement (default 5000) so locks stay short and a big
// purge does not stall collection. Each owner purges its own tables: the outbox first, then
// history's, then the catalog's, tracked_items last, so that an interrupted purge can simply
// be run again.
func PurgeSynthetic(ctx context.Context, db store.Execer, batchSize int) (PurgeResult, error) {
	if batchSize <= 0 {
		batchSize = 5000
	}
	n, err := outbox.PurgeSynthetic(ctx, db, batchSize)
	res := PurgeResult{{Table: "outbox", Deleted: n}}
	if err != nil {
		return res, fmt.Errorf("purge:synthetic %w", err)
	}
	for _, purge := range []func(context.Context, store.Execer, int) ([]store.Purged, error){
		history.PurgeSynthetic, catalog.PurgeSynthetic,
	} {
		counts, err := purge(ctx, db, batchSize)
		res = append(res, counts...)
		if err != nil {
			return res, fmt.Errorf("purge:synthetic %w", err)
		}
	}
	return res, nil
}
