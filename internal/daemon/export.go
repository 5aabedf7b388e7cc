package daemon

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/export"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// exportService is the daily exporter (export.Exporter) with the daemon's logs and metrics:
// once a day settles it writes the day's files, catching up the days it missed.
type exportService struct {
	exporter *export.Exporter
	metrics  *telemetry.Metrics
	log      *zap.Logger
}

func newExportService(cfg export.Config, pool *pgxpool.Pool, m *telemetry.Metrics, log *zap.Logger) (*exportService, error) {
	e, err := export.NewExporter(pool, cfg)
	if err != nil {
		return nil, err
	}
	s := &exportService{exporter: e, metrics: m, log: log}
	e.OnTurn = s.report
	return s, nil
}

// Start exports until ctx ends (export.Exporter.Start).
func (s *exportService) Start(ctx context.Context) { s.exporter.Start(ctx) }

func (s *exportService) report(t export.Turn, err error) {
	if !t.Newest.IsZero() { // also when another day failed: the gauge says how far the export is current
		s.metrics.ExportNewestDay.Set(float64(t.Newest.Unix()))
	}
	// The other days of a turn with a failed day are reported too: a day exported complete
	// behind a stopped collection must not go unsaid because another could not be written.
	if err != nil && !errors.Is(err, context.Canceled) {
		s.metrics.LoopErrors.WithLabelValues("export").Inc()
		s.log.Warn("exporting a past day failed; next try after the interval", zap.Error(err))
	}
	for _, day := range t.Exported {
		s.log.Info("exported a day of history", zap.String("day", day))
	}
	for _, day := range t.Behind {
		s.log.Warn("a past day was exported complete although collection has not caught up past it for a day: is collection stopped?", zap.String("day", day))
	}
	for _, day := range t.Waiting {
		s.log.Info("a past day waits for collection to catch up past its end before its export", zap.String("day", day))
	}
}
