package telemetry

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A figure nobody measures again keeps moving with the clock: partitions a week ahead that
// upkeep stopped adding to read a day less a day later, and the oldest partition a day older,
// so the alerts on them fire although the job that measured them is stuck.
func TestAgingFiguresMoveWithTheClockUntilMeasuredAgain(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	now := t0
	ahead := newAging("ahead_seconds", "h", "table", -1)
	age := newAging("age_seconds", "h", "table", +1)
	for _, a := range []*Aging{ahead, age} {
		a.now = func() time.Time { return now }
	}
	week := 7 * 24 * time.Hour
	ahead.Set("auction_snapshots", week)
	age.Set("auction_snapshots", 3*24*time.Hour)
	now = now.Add(24 * time.Hour)
	if v, ok := ahead.Value("auction_snapshots"); !ok || v != (6*24*time.Hour).Seconds() {
		t.Fatalf("a day after the last pass, %v s ahead; want 6 days", v)
	}
	if v, _ := age.Value("auction_snapshots"); v != (4 * 24 * time.Hour).Seconds() {
		t.Fatalf("a day after the last pass, the oldest partition %v s old; want 4 days", v)
	}
	// A scrape reads the same figures.
	reg := prometheus.NewRegistry()
	reg.MustRegister(ahead)
	if v := testutil.ToFloat64(ahead); v != (6 * 24 * time.Hour).Seconds() {
		t.Fatalf("scraped %v s ahead; want 6 days", v)
	}
	ahead.Set("auction_snapshots", week)
	if v, _ := ahead.Value("auction_snapshots"); v != week.Seconds() {
		t.Fatalf("measured again: %v s ahead; want the new figure, a week", v)
	}
	if _, ok := ahead.Value("auction_sales"); ok {
		t.Fatal("a table never measured has a figure")
	}
}
