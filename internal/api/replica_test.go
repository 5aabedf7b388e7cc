package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
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
		if _, err := primary.Exec(ctx, `UPDATE tracked_items SET updated_at = now(), seen_lowest_price = $2, last_collected_at = now(),
			last_snapshot_at = now(), seen_listing_count = 1, seen_listing_quantity = 1, seen_truncated = false WHERE item_id = $1`, hotItem, p); err != nil {
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
	// A series answer says where it was read, and how far the replica trailed.
	source := func() string {
		t.Helper()
		resp, b := e.get(t, "/api/v1/items/"+hotItem+"/timeseries")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("series: %d %s", resp.StatusCode, b)
		}
		return resp.Header.Get("Read-Source")
	}
	if got := source(); !strings.HasPrefix(got, "replica; lag=") {
		t.Fatalf("series through the replica: Read-Source %q, want the replica and its lag", got)
	}

	s.PauseReplay(t)
	setPrice(200)
	if st := reads.RunOnce(ctx); st.Source != store.SourcePrimary {
		t.Fatalf("paused behind a change: %s, want the primary", st)
	}
	if got := lowest(); got != 200 {
		t.Fatalf("replica paused: lowest %d, want the primary's 200", got)
	}
	if got := source(); got != "primary" {
		t.Fatalf("series with the replica paused: Read-Source %q, want primary", got)
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

// A replica that hangs (it takes connections and never answers, as when its packets are
// dropped) holds no read slot for longer than the router waits for it: series requests that
// took both slots waiting on it answer from the primary, and /latest (whose refresh has a slot
// of its own) answers meanwhile.
func TestHungReplicaHoldsNoReadSlot(t *testing.T) {
	s := storetest.NewStandby(t)
	ctx := context.Background()
	primary, _ := s.Pools(t)
	proxy := storetest.NewProxy(t, s.StandbyURL)
	replica, err := store.OpenReplica(ctx, store.PoolConfig{URL: proxy.URL, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Close)
	reads := store.NewReads(primary, replica, store.ReadsConfig{MaxLag: time.Microsecond, Every: time.Hour}, nil)
	storetest.Items(t, primary, storetest.Item{ID: hotItem})
	a, err := api.New(reads, api.Config{APIConfig: config.Default().API, Latest: reads.Primary()}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	// Cleanups run last first: a read stuck on the frozen proxy must fail before the server
	// and the pool wait for it.
	t.Cleanup(proxy.Close)
	e := &env{srv: srv, client: &http.Client{Transport: checking{t: t, spec: loadSpec(t), base: http.DefaultTransport}}}
	testkit.Eventually(t, testkit.Timeout, "reads to go to the replica", func() bool {
		return reads.RunOnce(ctx).Source == store.SourceReplica
	})

	proxy.Freeze()
	codes := make(chan int, api.MaxReadsDefault)
	for range api.MaxReadsDefault {
		go func() {
			resp, err := e.client.Get(srv.URL + "/api/v1/items/" + hotItem + "/timeseries")
			if err != nil {
				t.Errorf("series: %v", err)
				codes <- 0
				return
			}
			_ = resp.Body.Close()
			codes <- resp.StatusCode
		}()
	}
	// Both wait on the replica, a slot each (or, on a slow machine, one has fallen back already
	// and the other reads the primary at once).
	held := map[int]bool{}
	testkit.Eventually(t, testkit.Timeout, "the series reads to wait on the replica", func() bool {
		for {
			select {
			case n := <-proxy.Held:
				held[n] = true
			default:
				return len(held) >= api.MaxReadsDefault || reads.State().Source == store.SourcePrimary
			}
		}
	})
	if resp, b := e.get(t, "/api/v1/latest?ids="+hotItem); resp.StatusCode != http.StatusOK {
		t.Fatalf("latest while series reads waited on a hung replica: %d %s", resp.StatusCode, b)
	}
	for range api.MaxReadsDefault {
		// The frozen proxy passes no answer: a 200 is the primary's.
		if code := testkit.Recv(t, codes, testkit.Timeout, "a series answer"); code != http.StatusOK {
			t.Fatalf("series with the replica hung: %d, want 200 from the primary", code)
		}
	}
	if st := reads.State(); st.Source != store.SourcePrimary || !strings.Contains(st.Reason, "did not answer") {
		t.Fatalf("after reads the replica did not answer: %+v, want the primary, saying so", st)
	}
}

// An item the replica does not hold yet (added on the primary within its lag) is looked up on
// the primary before /timeseries answers 404: a client that learnt of it from /latest, which
// reads the primary, finds its series. An id neither knows, and a fixture, are still 404.
func TestNewItemIsFoundOnThePrimaryBehindAReplica(t *testing.T) {
	s := storetest.NewStandby(t)
	ctx := context.Background()
	primary, standby := s.Pools(t)
	// Measured once, and trusted for an hour: the replica serves reads while its replay is paused.
	reads := store.NewReads(primary, standby, store.ReadsConfig{MaxLag: time.Hour, Every: time.Hour, Timeout: 5 * time.Second}, nil)
	storetest.Items(t, primary, storetest.Item{ID: hotItem}, storetest.Item{ID: "seed-0001"})
	a, err := api.New(reads, api.Config{APIConfig: config.Default().API, Latest: reads.Primary()}, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)
	e := &env{srv: srv, client: &http.Client{Transport: checking{t: t, spec: loadSpec(t), base: http.DefaultTransport}}}
	testkit.Eventually(t, testkit.Timeout, "the replica to hold the items and serve reads", func() bool {
		var n int
		_ = standby.QueryRow(ctx, `SELECT count(*) FROM tracked_items`).Scan(&n)
		return n == 2 && reads.RunOnce(ctx).Source == store.SourceReplica
	})
	s.PauseReplay(t)
	const brandNew = "brand-new-item"
	storetest.Items(t, primary, storetest.Item{ID: brandNew})
	var onReplica bool
	if err := standby.QueryRow(ctx, `SELECT EXISTS (SELECT FROM tracked_items WHERE item_id = $1)`, brandNew).Scan(&onReplica); err != nil || onReplica {
		t.Fatalf("the paused replica holds the new item: %v, %v", onReplica, err)
	}
	resp, b := e.get(t, "/api/v1/items/"+brandNew+"/timeseries")
	// The router reads the replica, which lacks the item: a 200 is the primary's, and says so.
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Read-Source") != "primary" {
		t.Fatalf("a new item behind the replica: %d, Read-Source %q, %s; want 200 read again from the primary", resp.StatusCode, resp.Header.Get("Read-Source"), b)
	}
	if got := decode[seriesBody](t, b); got.ItemID != brandNew {
		t.Fatalf("a new item behind the replica: %s", b)
	}
	for _, id := range []string{"nobody-tracks-this", "seed-0001"} {
		if resp, b := e.get(t, "/api/v1/items/"+id+"/timeseries"); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("%s behind the replica: %d %s; want 404", id, resp.StatusCode, b)
		}
	}
}
