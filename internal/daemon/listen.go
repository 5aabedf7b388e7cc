package daemon

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// listenNotifications turns tracked_items notifications into wake-ups on wake, reconnecting
// after errors, until ctx ends. Without a session for LISTEN (behind PgBouncer in transaction
// mode and no database.direct_url) it logs that once and leaves the wake-ups to the
// database-timed sleep.
func listenNotifications(ctx context.Context, pool *pgxpool.Pool, directURL string, wake chan<- struct{}, m *telemetry.Metrics, log *zap.Logger, maxSleep time.Duration) {
	if directURL == "" && pool.Config().ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeSimpleProtocol {
		log.Warn("no session for LISTEN; falling back to timed wake-ups",
			zap.String("reason", "the pool uses the simple protocol (a transaction-pooling PgBouncer) and database.direct_url is not set"),
			zap.Duration("max_sleep_seconds", maxSleep))
		return
	}
	cfg := store.ListenConfig{Pool: pool, DirectURL: directURL, Channel: "tracked_items_due", Retry: retryBackoff,
		Restored: func(failures int) {
			log.Info("tracked_items notifications restored", zap.Int("failed_attempts", failures))
		}}
	store.Listen(ctx, cfg, wake, func(err error, failures int) {
		m.LoopErrors.WithLabelValues("listen").Inc()
		if failures == 1 {
			log.Warn("tracked_items notifications interrupted; falling back to timed wake-ups until LISTEN works again", zap.Error(err))
		} else {
			log.Debug("LISTEN retry failed", zap.Int("failures", failures), zap.Error(err))
		}
	})
}
