package daemon

import (
	"context"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testsignal"
)

// partitionConfig configures the partition service.
type partitionConfig struct {
	// Interval (> 0) is how often partitions are created ahead and those past retention
	// dropped (partition.KeepIntervalDefault).
	Interval time.Duration
	// Maintained, when initialised (tests), hears every pass.
	Maintained *testsignal.Signal[[]partition.TableState]
}

// partitionService keeps the history tables partitioned: at start, then every interval.
type partitionService struct {
	cfg     partitionConfig
	parts   *partition.Partitions
	metrics *telemetry.Metrics
	log     *zap.Logger
	writes  writeReports // hears this loop's refused writes
}

func newPartitionService(cfg partitionConfig, parts *partition.Partitions, m *telemetry.Metrics, log *zap.Logger) (*partitionService, error) {
	if cfg.Interval <= 0 {
		return nil, fmt.Errorf("partitions: interval %s must be > 0", cfg.Interval)
	}
	pc := parts.Config()
	m.PartitionInterval.Set(pc.Interval.Seconds())
	for _, t := range pc.Tables {
		if t.Retention > 0 {
			m.Retention.WithLabelValues(t.Name).Set(t.Retention.Seconds())
		}
	}
	return &partitionService{cfg: cfg, parts: parts, metrics: m, log: log}, nil
}

// Start keeps the partitions until ctx ends; a failed pass is retried at the next interval,
// long before the partitions ahead run out.
func (s *partitionService) Start(ctx context.Context) {
	for {
		if _, err := s.runOnce(ctx); err != nil && ctx.Err() == nil {
			s.metrics.LoopErrors.WithLabelValues("partitions").Inc()
			s.log.Warn("history partition upkeep failed; next try after the interval", zap.Duration("interval_seconds", s.cfg.Interval), zap.Error(err))
		}
		t := time.NewTimer(s.cfg.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// runOnce creates the partitions ahead, drops those past retention and exports how far ahead
// each table reaches and how old its oldest partition is, also when a drop failed: that age
// growing past the retention is what tells (CollectorHistoryRetentionBehind).
func (s *partitionService) runOnce(ctx context.Context) ([]partition.TableState, error) {
	states, err := s.parts.RunOnce(ctx)
	s.writes.refused(err)
	for _, st := range states {
		if !st.Described {
			continue // a pass that could not read the table keeps the last figures it read
		}
		s.metrics.PartitionsAhead.Set(st.Table, st.Ahead)
		if !st.Oldest.IsZero() {
			s.metrics.OldestPartition.Set(st.Table, st.Now.Sub(st.Oldest))
		}
		if len(st.Created) > 0 || len(st.Dropped) > 0 {
			s.log.Info("history partitions kept", zap.String("table", st.Table), zap.Strings("created", st.Created),
				zap.Strings("dropped", st.Dropped), zap.Duration("ahead_seconds", st.Ahead))
		}
	}
	if err != nil {
		return states, err
	}
	s.cfg.Maintained.Signal(states)
	return states, nil
}
