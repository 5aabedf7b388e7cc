package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// Every maintenance loop of the daemon reports a write the database refused, as claims and
// write-backs do, so /readyz and collector_database_writable tell what the loop met.
func TestMaintenanceLoopsReportRefusedWrites(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	ctx := context.Background()
	storetest.PartitionDays(t, e.pool, -3, 1, partition.Snapshots, partition.Sales) // upkeep must create
	cfg := testConfig()
	cfg.Catalog = config.Default().Catalog
	cfg.Catalog.RecalcInterval = time.Hour
	d := e.build(t, cfg, nil)
	for _, loop := range []struct {
		name   string
		tables []string
		run    func() error
	}{
		{"partitions", nil, func() error { _, err := d.parts.runOnce(ctx); return err }},
		{"planner", []string{"tracked_items", "tier_forecast"}, func() error { _, err := d.plan.runOnce(ctx, time.Now()); return err }},
		{"retention", []string{"outbox", "item_interest", "price_candles"}, func() error { _, err := d.retention.runOnce(ctx); return err }},
	} {
		t.Run(loop.name, func(t *testing.T) {
			free := storetest.FillDisk(t, e.pool, loop.tables...)
			freed := false
			defer func() {
				if !freed {
					free()
				}
			}()
			if err := loop.run(); err == nil {
				t.Fatal("the loop's pass succeeded on a full disk")
			}
			if s := d.writes.State(); s.Cause != store.CauseDiskFull {
				t.Fatalf("write state after the loop's refused write: %+v, want disk_full", s)
			}
			free()
			freed = true
			d.writes.ObserveSpace(nil) // the daemon's space probe, once the disk has room
		})
	}
}

// A lack of space ends after spaceQuiet successful space probes in a row, and after twice as
// many when it came back soon after ending: a disk that write-backs fill again at once settles
// refused instead of flapping.
func TestSpaceProbeEndsALackOfSpaceWithHysteresis(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	ctx := context.Background()
	d := e.build(t, testConfig(), nil)
	full := &pgconn.PgError{Code: "53100", Message: "could not extend file: No space left on device"}
	for spell, need := range []int{spaceQuiet, 2 * spaceQuiet, 4 * spaceQuiet} {
		d.writes.Observe(full)
		for probe := 1; probe < need; probe++ {
			d.probeSpace(ctx)
			if s := d.writes.State(); s.Cause != store.CauseDiskFull {
				t.Fatalf("spell %d: state %+v after %d of %d successful probes, want disk_full standing", spell, s, probe, need)
			}
		}
		d.probeSpace(ctx)
		if s := d.writes.State(); !s.Writable {
			t.Fatalf("spell %d: state %+v after %d successful probes, want writable", spell, s, need)
		}
	}
}
