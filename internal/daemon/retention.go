package daemon

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/retention"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testsignal"
)

// retentionConfig configures the retention service.
type retentionConfig struct {
	// Retention is the ages to keep, the statements' sizes and the pause between turns (zero
	// sizes take retention's defaults).
	Retention retention.Config
	// Pruned, when initialised (tests), hears every turn.
	Pruned *testsignal.Signal[retention.Result]
}

// retentionService is the one pruner (retention.Pruner) with the daemon's metrics: it deletes
// outbox rows, interest events and candles older than the configured ages (snapshots and sales
// are partitioned: partitionService drops them). It runs on every daemon, relay or not:
// published outbox rows need no relay here to be pruned.
type retentionService struct {
	cfg     retentionConfig
	pruner  *retention.Pruner
	metrics *telemetry.Metrics
	log     *zap.Logger
	writes  writeReports // hears this loop's refused writes
}

func newRetentionService(cfg retentionConfig, pool *pgxpool.Pool, m *telemetry.Metrics, log *zap.Logger) (*retentionService, error) {
	p, err := retention.New(pool, cfg.Retention)
	if err != nil {
		return nil, err
	}
	s := &retentionService{cfg: cfg, pruner: p, metrics: m, log: log}
	p.OnTurn = s.report
	return s, nil
}

// Start prunes until ctx ends (retention.Pruner.Start).
func (s *retentionService) Start(ctx context.Context) { s.pruner.Start(ctx) }

// report counts, logs and signals one turn.
// A turn that failed on one table still pruned the others (retention.Prune): what it
// deleted, unpublished events dropped among it, is counted and told all the same.
func (s *retentionService) report(res retention.Result, err error) {
	s.metrics.OutboxExpired.Add(float64(res.OutboxExpired))
	retention.LogTurn(s.log, s.pruner.Config(), res)
	if err != nil {
		s.writes.refused(err)
		if !errors.Is(err, context.Canceled) {
			s.metrics.LoopErrors.WithLabelValues("retention").Inc()
			s.log.Warn("pruning collected history failed; next run after the interval",
				zap.Duration("interval_seconds", s.pruner.Config().Interval), zap.Error(err))
		}
		return
	}
	s.cfg.Pruned.Signal(res)
}
