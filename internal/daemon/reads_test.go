package daemon

import (
	"context"
	"math"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store"
)

// A daemon whose reads have a replica exports where they go; one without exports nothing,
// since there is no lag to speak of.
func TestReplicaGaugesFollowTheReadState(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	gauges := func(d *Daemon) map[string]float64 {
		t.Helper()
		mfs, err := d.Metrics().Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]float64{}
		for _, mf := range mfs {
			if n := mf.GetName(); n == "collector_replica_in_use" || n == "collector_replica_lag_seconds" {
				out[n] = mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		return out
	}
	cfg := testConfig()
	cfg.Reads = store.NewReads(e.pool, nil, store.ReadsConfig{}, nil)
	if g := gauges(e.build(t, cfg, zap.NewNop())); len(g) != 0 {
		t.Fatalf("without a replica: %v, want no replica series", g)
	}

	replica, err := store.OpenReplica(context.Background(), store.PoolConfig{URL: "postgres://reader@127.0.0.1:1/duecollector?sslmode=disable&connect_timeout=2"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Close)
	cfg.Reads = store.NewReads(e.pool, replica, store.ReadsConfig{Timeout: 3 * time.Second}, nil)
	d := e.build(t, cfg, zap.NewNop())
	cfg.Reads.RunOnce(context.Background())
	if g := gauges(d); g["collector_replica_in_use"] != 0 || !math.IsNaN(g["collector_replica_lag_seconds"]) || len(g) != 2 {
		t.Fatalf("unreachable replica: %v, want in_use 0 and an unknown (NaN) lag", g)
	}
}
