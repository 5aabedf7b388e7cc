package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/export"
	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// With export.enabled the daemon starts the exporter among its maintenance jobs, and a turn
// writes a settled day holding rows into its directory; without it there is no exporter.
func TestDaemonExportsSettledDaysWhenEnabled(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	if d := e.build(t, testConfig(), nil); d.export != nil || slices.ContainsFunc(d.maintenance(), func(s service) bool { return s == d.export }) {
		t.Fatal("an exporter was built with export off")
	}
	today := storetest.PartitionDays(t, e.pool, -3, 1, partition.Snapshots, partition.Sales).UTC()
	day := today.AddDate(0, 0, -2)
	storetest.Snapshots(t, e.pool, storetest.Snapshot{ItemID: "x", CollectedAt: storetest.At(day.Add(time.Hour))})
	cfg := testConfig()
	dir := t.TempDir()
	cfg.Export = &export.Config{Dir: dir, Format: "parquet", Version: "test"}
	d := e.build(t, cfg, nil)
	if d.export == nil || !slices.ContainsFunc(d.maintenance(), func(s service) bool { return s == d.export }) {
		t.Fatal("export enabled, but the exporter is not among the maintenance jobs")
	}
	turn, err := d.export.exporter.RunOnce(context.Background())
	if err != nil || !slices.Contains(turn.Exported, day.Format(time.DateOnly)) {
		t.Fatalf("a turn: %+v, %v; want %s exported", turn, err, day.Format(time.DateOnly))
	}
	if _, err := os.Stat(filepath.Join(dir, day.Format(time.DateOnly), export.ManifestName)); err != nil {
		t.Fatalf("no manifest for the exported day: %v", err)
	}
	// Exported on this instance alone, the newest complete day's start: yesterday (no rows) or
	// the day written, whichever the turn could finish.
	if got := testutil.ToFloat64(d.Metrics().ExportNewestDay); got != float64(turn.Newest.Unix()) || turn.Newest.Before(day) {
		t.Fatalf("collector_export_newest_day_timestamp_seconds %v; want the turn's newest complete day, %s or later", got, day.Format(time.DateOnly))
	}
	families, err := d.Metrics().Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(families, func(f *dto.MetricFamily) bool { return f.GetName() == "collector_export_newest_day_timestamp_seconds" }) {
		t.Fatal("an exporting instance does not export collector_export_newest_day_timestamp_seconds")
	}
}

// A turn in which one day failed still says what happened to the others: a day exported
// complete behind a stopped collection is the warning an operator needs most, and one
// unwritable day hid it.
func TestAFailedExportDayHidesNoOtherDaysReport(t *testing.T) {
	core, logs := zapobserver.New(zapcore.InfoLevel)
	s := &exportService{metrics: telemetry.NewMetrics(), log: zap.New(core)}
	s.report(export.Turn{Exported: []string{"2026-12-01"}, Behind: []string{"2026-12-01 (3 items)"}, Waiting: []string{"2026-12-03"}},
		errors.New("export of 2026-12-02: permission denied"))
	for _, msg := range []string{
		"exporting a past day failed; next try after the interval",
		"exported a day of history",
		"a past day was exported complete although collection has not caught up past it for a day: is collection stopped?",
		"a past day waits for collection to catch up past its end before its export",
	} {
		if logs.FilterMessage(msg).Len() != 1 {
			t.Errorf("logged %q %d times, want once; all: %v", msg, logs.FilterMessage(msg).Len(), logs.All())
		}
	}
}
