package dispatcher

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/testsignal"
	"github.com/duecollector/duecollector/internal/tiers"
)

// While the provider works through a WARM backlog (its calls held here, as a saturated budget
// holds them), a HOT item that falls due is claimed and fetched before that backlog drains:
// claims bounded by cost leave the rest unclaimed, and a claim of the top tier alone does not
// wait for the pending work. With whole batches claimed one after the other, the HOT item would
// wait behind the held calls and never be fetched while they are held.
func TestHotClaimedWhileBacklogPending(t *testing.T) {
	t.Parallel()
	const warm = 10
	release := make(chan struct{})
	var warmCall, hotCall testsignal.Signal[string]
	warmCall.Init(t)
	hotCall.Init(t)
	var hotID atomic.Pointer[string]
	hotID.Store(new(string))
	var once sync.Once
	e := setup(t, warm+1, tiers.Warm, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id := r.URL.Query().Get("itemId")
			if id == *hotID.Load() {
				hotCall.Signal(id)
			} else {
				warmCall.Signal(id)
				<-release
			}
			next.ServeHTTP(w, r)
		})
	})
	defer once.Do(func() { close(release) })
	ctx := context.Background()
	hot := e.items[warm].ItemID
	hotID.Store(&hot)
	// The HOT item is not due yet; every WARM item is, 2 requests each.
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET collection_tier = 'HOT_1M', next_collect_at = now() + interval '1 hour' WHERE item_id = $1`, hot); err != nil {
		t.Fatal(err)
	}
	d := e.dispatcher(t, Config{Concurrency: 4, ClaimRequests: func() float64 { return 2 }, TopAhead: 50 * time.Millisecond}, nil)
	done := make(chan Summary, 1)
	go func() {
		s, err := d.RunOnce(ctx)
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	warmCall.Wait(t) // the backlog is being collected, its calls held
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() WHERE item_id = $1`, hot); err != nil {
		t.Fatal(err)
	}
	hotCall.Wait(t)
	// At most 4 requests' worth of WARM items were claimed: the rest of the backlog waits.
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE collection_tier = 'WARM_5M' AND last_claimed_at IS NOT NULL`); n > 2 {
		t.Errorf("%d WARM items claimed while their calls were held, want at most 2 (pending work bounded by cost)", n)
	}
	once.Do(func() { close(release) })
	s := testkit.Recv(t, done, testkit.Timeout, "the pass")
	if s.Collected != warm+1 {
		t.Errorf("collected %d, want %d", s.Collected, warm+1)
	}
}

// The pending work may reach topPending claims' worth, and a claim of the most urgent tier
// alone comes only while a full claim still fits under that: with room for a sliver it would
// take one item, which then shares no call.
func TestATopClaimHasRoomForAFullClaim(t *testing.T) {
	for _, c := range []struct {
		pending         float64
		expired         bool
		wantFull, wantT bool
	}{
		{pending: 2, expired: false, wantFull: true},
		{pending: 2.5, expired: false},
		{pending: 6, expired: true, wantT: true},
		{pending: 6.1, expired: true},  // 1.9 requests of room: a sliver
		{pending: 7.8, expired: true},  // 0.2: one item of ten to a call
		{pending: 5.9, expired: false}, // not yet: the top tier waits TopAhead
	} {
		full, top := mayClaim(c.pending, 2, c.expired)
		if full != c.wantFull || top != c.wantT {
			t.Errorf("pending %v of 2-request claims (TopAhead passed: %v): full %v, top %v; want %v, %v",
				c.pending, c.expired, full, top, c.wantFull, c.wantT)
		}
	}
}
