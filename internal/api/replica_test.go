package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/duecollector/duecollector/internal/api"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

// Through a read replica, /latest shows what the standby replayed while it keeps up; with its
// replay paused behind a change, or stopped, the answer comes from the primary with the
// change: never the standby's stale copy.
func TestLatestThroughAReplicaIsNeverStale(t *testing.T) {
	s := storetest.NewStandby(t)
	ctx := context.Background()
	primary, standby := s.Pools(t)
	reads := store.NewReads(primary, standby, store.ReadsConfig{MaxLag: time.Microsecond, Every: time.Hour, Timeout: 5 * time.Second}, nil)
	storetest.Items(t, primary, storetest.Item{ID: hotItem})
	setPrice := func(p int64) {
		t.Helper()
		if _, err := primary.Exec(ctx, `UPDATE tracked_items SET updated_at = now(), seen_lowest_price = $2, last_collected_at = now() WHERE item_id = $1`, hotItem, p); err != nil {
			t.Fatal(err)
		}
	}
	setPrice(100)
	a, err := api.New(reads, api.Config{APIConfig: config.Default().API, MaxAge: time.Nanosecond}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	e := &env{srv: srv, client: &http.Client{Transport: checking{t: t, spec: loadSpec(t), base: http.DefaultTransport}}}
	lowest := func() int64 {
		t.Helper()
		_, b := e.get(t, "/api/v1/latest?ids="+hotItem)
		got := decode[latestBody](t, b)
		if len(got.Items) != 1 || got.Items[0].Lowest == nil {
			t.Fatalf("latest: %s", b)
		}
		return *got.Items[0].Lowest
	}
	testkit.Eventually(t, testkit.Timeout, "reads to go to the replica", func() bool {
		return reads.RunOnce(ctx).Source == store.SourceReplica
	})
	if got := lowest(); got != 100 {
		t.Fatalf("through the replica: lowest %d, want 100", got)
	}

	s.PauseReplay(t)
	setPrice(200)
	if st := reads.RunOnce(ctx); st.Source != store.SourcePrimary {
		t.Fatalf("paused behind a change: %s, want the primary", st)
	}
	if got := lowest(); got != 200 {
		t.Fatalf("replica paused: lowest %d, want the primary's 200", got)
	}
	s.ResumeReplay(t)
	testkit.Eventually(t, testkit.Timeout, "reads to go back to the replica", func() bool {
		return reads.RunOnce(ctx).Source == store.SourceReplica
	})

	s.StopStandby(t)
	setPrice(300)
	if got := lowest(); got != 300 {
		t.Fatalf("replica stopped: lowest %d, want the primary's 300", got)
	}
}
