package daemon

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/retention"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testkit"
)

// retentionStatements bounds one turn of pruning, so a large first backlog (retention turned
// on for an old database) is worked off in short turns a second apart rather than in one long
// run of deletes.
const retentionStatements = 20

// retentionBacklogWait is the pause between turns while a backlog is worked off.
const retentionBacklogWait = time.Second

// retentionConfig configures the retention service.
type retentionConfig struct {
	// Retention is the ages to keep and the turn's size; Interval (> 0) is the pause between
	// turns once nothing is left over.
	Retention retention.Config
	// Pruned, when initialised (tests), hears every turn.
	Pruned *testkit.Signal[retention.Result]
}

// retentionService deletes outbox rows, interest events and candles older than the configured
// ages (snapshots and sales are partitioned: partitionService drops them). It runs on every
// daemon, relay or not: published outbox rows need no relay here to be pruned.
type retentionService struct {
	cfg     retentionConfig
	pool    *pgxpool.Pool
	metrics *telemetry.Metrics
	log     *zap.Logger
	writes  writeReports // hears this loop's refused writes
}

func newRetentionService(cfg retentionConfig, pool *pgxpool.Pool, m *telemetry.Metrics, log *zap.Logger) (*retentionService, error) {
	if cfg.Retention.Interval <= 0 {
		return nil, fmt.Errorf("retention: retention.interval %s must be > 0", cfg.Retention.Interval)
	}
	return &retentionService{cfg: cfg, pool: pool, metrics: m, log: log}, nil
}

// Start prunes every retention.interval (a second apart while a backlog lasts) until ctx ends.
func (s *retentionService) Start(ctx context.Context) {
	wait := s.cfg.Retention.Interval
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		res, err := s.runOnce(ctx)
		wait = s.cfg.Retention.Interval
		switch {
		case err != nil && ctx.Err() == nil:
			s.metrics.LoopErrors.WithLabelValues("retention").Inc()
			s.log.Warn("pruning collected history failed; next run in retention.interval", zap.Error(err))
		case err == nil && res.More:
			wait = retentionBacklogWait
		}
	}
}

// runOnce prunes one turn.
func (s *retentionService) runOnce(ctx context.Context) (retention.Result, error) {
	res, err := retention.Prune(ctx, s.pool, s.cfg.Retention, retentionStatements)
	if err != nil {
		s.writes.refused(err)
		return res, err
	}
	if res.OutboxExpired > 0 {
		s.metrics.OutboxExpired.Add(float64(res.OutboxExpired))
		s.log.Warn("dropped unpublished outbox events past retention.outbox_unpublished; their snapshots stay in auction_snapshots",
			zap.Int64("expired", res.OutboxExpired), zap.Duration("older_than_seconds", s.cfg.Retention.OutboxUnpublished))
	}
	if res.Total() > 0 {
		s.log.Info("pruned collected history", zap.Int64("interest", res.Interest),
			zap.Int64("candles_hourly", res.CandlesHourly), zap.Int64("candles_daily", res.CandlesDaily),
			zap.Int64("outbox_published", res.OutboxPublished), zap.Int64("outbox_expired", res.OutboxExpired), zap.Bool("more", res.More))
	}
	s.cfg.Pruned.Signal(res)
	return res, nil
}
