package outbox

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Backlog is what waits to be published: for collector status and the metrics.
type Backlog struct {
	Pending int64         // rows not yet published
	Oldest  time.Duration // age of the oldest of them; 0 when none
	Failed  int64         // rows given up on (collector outbox retry sends them again)
}

const backlogSQL = `
WITH pending AS (SELECT count(*) AS n, min(id) AS oldest FROM outbox_pending)
SELECT pending.n,
       coalesce(extract(epoch FROM now() - (SELECT o.created_at FROM outbox o WHERE o.id = pending.oldest)), 0),
       (SELECT count(*) FROM outbox WHERE failed_at IS NOT NULL)
FROM pending`

// ReadBacklog reads the outbox's backlog in one statement.
func ReadBacklog(ctx context.Context, pool *pgxpool.Pool) (Backlog, error) {
	var b Backlog
	var oldest float64
	if err := pool.QueryRow(ctx, backlogSQL).Scan(&b.Pending, &oldest, &b.Failed); err != nil {
		return b, fmt.Errorf("outbox backlog: %w", err)
	}
	b.Oldest = time.Duration(oldest * float64(time.Second))
	return b, nil
}
