package catalog

import (
	"context"
	"fmt"
	"time"

	"github.com/duecollector/duecollector/internal/store"
)

// DeleteInterestOlderThan deletes up to limit interest events older than age by the database's
// clock, oldest first through the index on occurred_at, in one short statement, and returns how
// many went (retention.interest; internal/retention calls it).
func DeleteInterestOlderThan(ctx context.Context, db store.Execer, age time.Duration, limit int) (int64, error) {
	tag, err := db.Exec(ctx, `
		DELETE FROM item_interest WHERE id = ANY (ARRAY(
		    SELECT id FROM item_interest WHERE occurred_at < now() - $1::float8 * interval '1 second'
		    ORDER BY occurred_at LIMIT $2))`, age.Seconds(), limit)
	if err != nil {
		return 0, fmt.Errorf("delete item_interest older than %s: %w", age, err)
	}
	return tag.RowsAffected(), nil
}
