package daemon

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// The partition gauges say how far ahead each table reaches and how old its oldest partition
// is, next to the retention and the interval the alert compares them with: while a drop fails
// the age stays past retention + 2 intervals (CollectorHistoryRetentionBehind), once it works
// it falls under retention + an interval.
func TestPartitionGaugesTellAheadAndRetentionBehind(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	ctx := context.Background()
	today := storetest.PartitionDays(t, e.pool, -10, 1, partition.Snapshots, partition.Sales)
	const retention = 3 * 24 * time.Hour
	cfg := testConfig()
	pc := partition.FromConfig(config.Default())
	pc.DropLockTimeout = 100 * time.Millisecond
	pc.Tables = []partition.Table{{Name: partition.Snapshots, Retention: retention}, {Name: partition.Sales}}
	var err error
	if cfg.Partitions, err = partition.New(e.pool, nil, pc); err != nil {
		t.Fatal(err)
	}
	d := e.build(t, cfg, nil)
	m := d.Metrics()
	ahead := func(table string) float64 { v, _ := m.PartitionsAhead.Value(table); return v }
	oldest := func(table string) float64 { v, _ := m.OldestPartition.Value(table); return v }
	// The gauges move with the clock after the pass: read a moment later, within a minute.
	same := func(got float64, want time.Duration) bool { return math.Abs(got-want.Seconds()) < 60 }
	// Within a minute of the age the bounds give (the gauge is read a moment after the pass).
	near := func(got float64, since time.Time) bool { return math.Abs(got-time.Since(since).Seconds()) < 60 }
	interval := testutil.ToFloat64(m.PartitionInterval)
	if interval != 86400 || testutil.ToFloat64(m.Retention.WithLabelValues(partition.Snapshots)) != retention.Seconds() {
		t.Fatalf("interval %v s, snapshots' retention %v s", interval, testutil.ToFloat64(m.Retention.WithLabelValues(partition.Snapshots)))
	}
	if n := testutil.CollectAndCount(m.Retention); n != 1 {
		t.Fatalf("%d retention series, want only the snapshots' (sales are kept)", n)
	}

	// A long transaction holds the oldest day: its drop gives up, the age stays past the line.
	tx, err := e.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, `LOCK TABLE auction_snapshots_day90 IN SHARE MODE`); err != nil {
		t.Fatal(err)
	}
	states, err := d.parts.runOnce(ctx)
	if err == nil {
		t.Fatal("the pass with the oldest day locked reported no error")
	}
	for _, st := range states {
		if a := ahead(st.Table); !same(a, st.Ahead) || a < (7*24*time.Hour).Seconds() {
			t.Errorf("%s: ahead gauge %v s, the pass said %v", st.Table, a, st.Ahead)
		}
		// Both ages are by the database's clock, which the bounds are written in.
		if o := oldest(st.Table); !st.Oldest.IsZero() && !same(o, st.Now.Sub(st.Oldest)) {
			t.Errorf("%s: oldest gauge %v s, the database's clock says %v", st.Table, o, st.Now.Sub(st.Oldest))
		}
	}
	if o := oldest(partition.Snapshots); !near(o, today.AddDate(0, 0, -10)) || o <= retention.Seconds()+2*interval {
		t.Fatalf("snapshots' oldest partition %v s old while its drop fails, want 10 days and past retention + 2 intervals", o)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	if _, err := d.parts.runOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if o := oldest(partition.Snapshots); !near(o, today.AddDate(0, 0, -3)) || o > retention.Seconds()+interval {
		t.Errorf("snapshots' oldest partition %v s old after the drop, want 3 days (under retention + an interval)", o)
	}
	if o := oldest(partition.Sales); !near(o, today.AddDate(0, 0, -10)) {
		t.Errorf("sales' oldest partition %v s old, want 10 days (kept)", o)
	}

	// A pass that cannot read the tables at all (here its context is gone before it starts)
	// leaves the figures it last read, falling with the clock, not "0 s ahead".
	before := ahead(partition.Sales)
	gone, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := d.parts.runOnce(gone); err == nil {
		t.Fatal("a pass without its database reported no error")
	}
	if a := ahead(partition.Sales); a > before || before-a > 60 || a < (7*24*time.Hour).Seconds() {
		t.Errorf("sales' ahead gauge %v s after a pass that read nothing, want the last read %v s less the time since", a, before)
	}
}
