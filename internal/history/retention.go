package history

import (
	"context"
	"fmt"
	"time"

	"github.com/duecollector/duecollector/internal/store"
)

// DeleteCandlesOlderThan deletes up to limit price_candles of the resolution (Hourly, Daily) whose bucket is
// older than age by the database's clock, in one short statement, and returns how many went
// (retention.candles_hourly, retention.candles_daily; internal/retention calls it).
func DeleteCandlesOlderThan(ctx context.Context, db store.Execer, resolution string, age time.Duration, limit int) (int64, error) {
	tag, err := db.Exec(ctx, `
		DELETE FROM price_candles WHERE ctid = ANY (ARRAY(
		    SELECT ctid FROM price_candles WHERE resolution = $3 AND bucket < now() - $1::float8 * interval '1 second'
		    LIMIT $2))`, age.Seconds(), limit, resolution)
	if err != nil {
		return 0, fmt.Errorf("delete %s price_candles older than %s: %w", resolution, age, err)
	}
	return tag.RowsAffected(), nil
}
