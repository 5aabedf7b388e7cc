package dispatcher

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// On shutdown no new call starts, calls in flight finish within Grace and are written, and
// every other claim is handed back at once rather than after its lease.
func TestShutdownFinishesInFlightAndReleasesTheRest(t *testing.T) {
	t.Parallel()
	inFlight := make(chan struct{}, 100)
	proceed := make(chan struct{})
	var started atomic.Int64
	e := setup(t, 20, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction" {
				started.Add(1)
				inFlight <- struct{}{}
				<-proceed
			}
			next.ServeHTTP(w, r)
		})
	})
	t.Cleanup(func() { closeOnce(proceed) }) // a failed wait must not leave handlers hanging
	ctx, cancel := context.WithCancel(context.Background())
	d := e.dispatcher(t, Config{BatchSize: 20, Concurrency: 4, Grace: time.Minute}, nil)
	done := make(chan Summary, 1)
	go func() {
		s, err := d.RunOnce(ctx)
		if err != nil {
			t.Error(err)
		}
		done <- s
	}()
	for i := 0; i < 4; i++ {
		testkit.Recv(t, inFlight, testkit.Timeout, "a call in flight")
	}
	cancel() // SIGTERM
	closeOnce(proceed)
	s := testkit.Recv(t, done, testkit.Timeout, "RunOnce to return")
	if s.Collected != 4 || s.Released != 16 {
		t.Fatalf("summary %s: want the 4 in-flight items collected and 16 released", s)
	}
	if got := started.Load(); got != 4 {
		t.Fatalf("%d calls started; none may start after shutdown began", got)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL`); c != 0 {
		t.Fatalf("%d leases left after shutdown", c)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM outbox`); c != 4 {
		t.Fatalf("%d outbox rows, want 4", c)
	}
}

// A stop that comes while a claim statement runs lets it finish and hands its items back at
// once: cut, a claim the server had already committed would leave them leased to nobody until
// the lease ran out.
func TestAClaimUnderWayAtAStopIsHandedBack(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	e := setup(t, 10, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			calls.Add(1)
			next.ServeHTTP(w, r)
		})
	})
	d := e.dispatcher(t, Config{BatchSize: 10, Concurrency: 2, Lease: time.Hour}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := d.pass(ctx, 0, func(cctx context.Context, _ bool, _ float64) ([]catalog.Claim, bool, error) {
		cancel() // SIGTERM while the statement is on its way
		c, err := catalog.ClaimDue(cctx, e.pool, 10, time.Hour, "stopping", 0)
		return c, false, err
	})
	if err != nil {
		t.Fatalf("pass: %v", err)
	}
	if s.Claimed != 10 || s.Released != 10 || s.Stop != StopInterrupted {
		t.Fatalf("summary %s: want the 10 claimed items released and the pass interrupted", s)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL`); c != 0 {
		t.Fatalf("%d leases left after the stop; the claim's items must be handed back at once", c)
	}
	if n := calls.Load(); n != 0 {
		t.Fatalf("%d provider calls after the stop", n)
	}
}

func TestLeasesAreRenewedWhileCallsRun(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	e := setup(t, 1, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction" {
				<-release
			}
			next.ServeHTTP(w, r)
		})
	})
	t.Cleanup(func() { closeOnce(release) }) // a failed wait must not leave the handler hanging
	d := e.dispatcher(t, Config{Lease: 3 * time.Second}, nil)
	done := make(chan Summary, 1)
	go func() {
		s, _ := d.RunOnce(context.Background())
		done <- s
	}()
	// Poll the lease: it must be pushed forward while the call hangs.
	var first time.Time
	testkit.Eventually(t, 30*time.Second, "the lease renewed while the provider call is in flight", func() bool {
		var exp *time.Time
		if err := e.pool.QueryRow(context.Background(), `SELECT lease_expires_at FROM tracked_items`).Scan(&exp); err != nil {
			t.Fatal(err)
		}
		if exp == nil {
			return false
		}
		if first.IsZero() {
			first = *exp
		}
		return exp.After(first)
	})
	closeOnce(release)
	if s := testkit.Recv(t, done, testkit.Timeout, "RunOnce to return"); s.Collected != 1 || s.Fenced != 0 {
		t.Fatalf("summary %s", s)
	}
}

// A batch whose calls never end (a wedged process, calls held for a database that does not come
// back) keeps its items for renewCap leases without a call finishing, not for good: then its
// leases lapse, another collector takes the item, and the stuck batch's late write-back is
// fenced.
func TestAStuckBatchLetsItsLeasesLapse(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var calls atomic.Int64
	e := setup(t, 1, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction" && calls.Add(1) == 1 {
				<-release
			}
			next.ServeHTTP(w, r)
		})
	})
	t.Cleanup(func() { closeOnce(release) }) // a failed wait must not leave the handler hanging
	ctx := context.Background()
	stuck := e.dispatcher(t, Config{Lease: time.Second, Owner: "stuck"}, nil)
	stuck.LeasesLeft.Init(t)
	done := make(chan Summary, 1)
	go func() {
		s, _ := stuck.RunOnce(ctx)
		done <- s
	}()
	if n := stuck.LeasesLeft.Wait(t); n != 1 {
		t.Fatalf("leases of %d items left to lapse, want the one claimed", n)
	}
	if !stuck.Stuck() {
		t.Fatal("the dispatcher does not report itself stuck")
	}
	// Nothing renews it now: wait out what is left of its last lease by the database's clock.
	var owner string
	if err := e.pool.QueryRow(ctx, `SELECT leased_by, pg_sleep(greatest(0, extract(epoch FROM lease_expires_at - clock_timestamp())))::text
		FROM tracked_items`).Scan(&owner, new(string)); err != nil {
		t.Fatal(err)
	}
	if owner != "stuck" {
		t.Fatalf("leased by %q before the takeover, want the stuck batch", owner)
	}
	if s, err := e.dispatcher(t, Config{Lease: time.Second, Owner: "taker"}, nil).RunOnce(ctx); err != nil || s.Collected != 1 {
		t.Fatalf("the other collector: %s %v; want the stuck batch's item collected", s, err)
	}
	closeOnce(release)
	if s := testkit.Recv(t, done, testkit.Timeout, "the stuck RunOnce to return"); s.Collected != 0 || s.Fenced != 1 {
		t.Fatalf("the stuck batch: %s; want its late write fenced", s)
	}
	if stuck.Stuck() {
		t.Fatal("the dispatcher still reports itself stuck after its batch ended")
	}
}

// A batch's calls in flight during a shutdown's grace end as soon as another batch meets a
// pass-ending answer (a 429, maintenance), not when the grace is over: they would go on
// retrying against a provider that asked everyone to stop.
func TestAHaltDuringTheShutdownGraceEndsTheCallsInFlight(t *testing.T) {
	e, h := firstCallHeld(t, 1)
	ctx := context.Background()
	d := e.dispatcher(t, Config{Concurrency: 1, Grace: time.Hour}, nil)
	claims, err := catalog.ClaimDue(ctx, e.pool, 1, time.Minute, "test", 0)
	if err != nil || len(claims) != 1 {
		t.Fatalf("claimed %d: %v", len(claims), err)
	}
	d.clock.set(claims[0].DBNow)
	var tm timings
	f := newFlow(1)
	w := d.startWriter(ctx, &tm)
	pass, shutdown := context.WithCancel(ctx)
	defer shutdown()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		d.collectBatch(pass, claims, w, &tm, f)
	}()
	testkit.Recv(t, h.arrived, testkit.Timeout, "the call to arrive")
	shutdown() // an hour of grace for the call in flight
	f.halt(&stopError{class: provider.ClassRateLimited, err: errors.New("429 met by another batch")})
	testkit.Recv(t, ended, testkit.Timeout, "the batch to end once the pass was halted")
	w.finish()
}

// heldCall holds the first /df/auction call of a test's provider until release: arrived
// hears its item, calls counts every /df/auction call.
type heldCall struct {
	release chan struct{}
	arrived chan string
	calls   atomic.Int64
}

// firstCallHeld sets up n HOT items behind a provider whose first /df/auction call is held.
func firstCallHeld(t *testing.T, n int) (*env, *heldCall) {
	h := &heldCall{release: make(chan struct{}), arrived: make(chan string, 1)}
	e := setup(t, n, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction" && h.calls.Add(1) == 1 {
				h.arrived <- r.URL.Query().Get("itemId")
				<-h.release
			}
			next.ServeHTTP(w, r)
		})
	})
	t.Cleanup(func() { closeOnce(h.release) })
	return e, h
}

// wantOnlyTheHeldCollected releases the held call and wants its item collected, the other n-1
// (taken by another collector) fenced out and no call made for them.
func (h *heldCall) wantOnlyTheHeldCollected(t *testing.T, done <-chan Summary, n int) {
	t.Helper()
	closeOnce(h.release)
	s := testkit.Recv(t, done, testkit.Timeout, "RunOnce to return")
	if s.Collected != 1 || s.Fenced != n-1 || s.Failed != 0 {
		t.Fatalf("summary %s: want the item in flight collected and the %d taken fenced out", s, n-1)
	}
	if c := h.calls.Load(); c != 1 {
		t.Fatalf("%d /df/auction calls, want only the one in flight before the takeover", c)
	}
}

// takeAllBut gives every item but one to another collector, for an hour: what a claim does
// once their leases ran out.
func takeAllBut(t *testing.T, e *env, item string) {
	if _, err := e.pool.Exec(context.Background(), `UPDATE tracked_items SET lease_token = gen_random_uuid(), leased_by = 'taker',
		lease_expires_at = now() + interval '1 hour' WHERE item_id <> $1`, item); err != nil {
		t.Fatal(err)
	}
}

// A batch whose process was stopped past its leases (a paused VM, SIGSTOP) finds at its next
// renewal that another collector took items it has not fetched yet: it makes no call for them
// (the answers could only be fenced, and the budget is the other collector's too) and counts
// them fenced out.
func TestABatchMakesNoCallForItemsWhoseLeasesPassedToAnother(t *testing.T) {
	t.Parallel()
	const n = 5
	e, h := firstCallHeld(t, n)
	ctx := context.Background()
	// One batch (the taken items are not claimed back), and a call timeout that keeps the one
	// in flight from counting as stuck however loaded the machine.
	d := e.dispatcher(t, Config{Lease: time.Second, Concurrency: 1, BatchSize: n, MaxBatches: 1, CallTimeout: time.Minute}, nil)
	d.LeasesLost.Init(t)
	done := make(chan Summary, 1)
	go func() {
		s, _ := d.RunOnce(ctx)
		done <- s
	}()
	first := testkit.Recv(t, h.arrived, testkit.Timeout, "the batch's first call")
	takeAllBut(t, e, first)
	if got := d.LeasesLost.Wait(t); got != n-1 {
		t.Fatalf("the renewal found %d items taken, want %d", got, n-1)
	}
	h.wantOnlyTheHeldCollected(t, done, n)
}

// A batch stuck past the renewal cap lets its leases lapse; when its call comes back after all
// (its process resumed after a long stop), it makes no call for the items another collector
// took meanwhile, and writes back the one still its own.
func TestABatchComingUnstuckMakesNoCallForItemsTakenMeanwhile(t *testing.T) {
	t.Parallel()
	const n = 3
	e, h := firstCallHeld(t, n)
	ctx := context.Background()
	d := e.dispatcher(t, Config{Lease: time.Second, Concurrency: 1, BatchSize: n, MaxBatches: 1}, nil)
	d.LeasesLeft.Init(t)
	d.LeasesLost.Init(t)
	done := make(chan Summary, 1)
	go func() {
		s, _ := d.RunOnce(ctx)
		done <- s
	}()
	first := testkit.Recv(t, h.arrived, testkit.Timeout, "the batch's first call")
	if got := d.LeasesLeft.Wait(t); got != n {
		t.Fatalf("leases of %d items left to lapse, want %d", got, n)
	}
	takeAllBut(t, e, first)
	if got := d.LeasesLost.Wait(t); got != n-1 {
		t.Fatalf("the stuck batch found %d items taken, want %d", got, n-1)
	}
	h.wantOnlyTheHeldCollected(t, done, n)
}

// A batch that works, however slowly, keeps its leases past renewCap leases: one call after
// another finishes, each within the cap, while the whole batch takes longer than it.
func TestASlowBatchThatWorksKeepsItsLeases(t *testing.T) {
	t.Parallel()
	const lease, n = time.Second, 5
	e := setup(t, n, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction" {
				time.Sleep(lease) // the provider's latency: n of them one after another outlast the cap
			}
			next.ServeHTTP(w, r)
		})
	})
	d := e.dispatcher(t, Config{Lease: lease, Concurrency: 1, BatchSize: n}, nil)
	d.LeasesLeft.Init(t)
	s, err := d.RunOnce(context.Background())
	if err != nil || s.Collected != n || s.Fenced != 0 || s.Batches != 1 {
		t.Fatalf("summary %s, %v: want the one batch's %d items collected", s, err, n)
	}
	if s.Duration < renewCap*lease {
		t.Fatalf("the batch took %s, under the cap of %s: the test proves nothing", s.Duration, renewCap*lease)
	}
	select {
	case got := <-d.LeasesLeft.C():
		t.Fatalf("the leases of %d items were left to lapse while the batch's calls kept finishing", got)
	default:
	}
}

// A lease shorter than one provider call (collect.lease 1s, provider.timeout 5s): a call that
// takes longer than renewCap leases, but not than its timeout, is slow, not stuck, and the
// batch keeps its item rather than paying for the same call again from another collector.
func TestACallLongerThanTheRenewalCapButItsTimeoutKeepsItsLeases(t *testing.T) {
	t.Parallel()
	const lease = time.Second
	e := setup(t, 1, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction" {
				time.Sleep(renewCap*lease + lease/2) // the provider's latency, within its timeout
			}
			next.ServeHTTP(w, r)
		})
	})
	d := e.dispatcher(t, Config{Lease: lease, CallTimeout: 5 * time.Second}, nil)
	d.LeasesLeft.Init(t)
	s, err := d.RunOnce(context.Background())
	if err != nil || s.Collected != 1 || s.Fenced != 0 {
		t.Fatalf("summary %s, %v: want the item collected by the one slow call", s, err)
	}
	select {
	case got := <-d.LeasesLeft.C():
		t.Fatalf("the leases of %d items were left to lapse during one call within its timeout", got)
	default:
	}
}

// Every claim, the daemon's and a one-shot's, takes the most urgent tier first and each tier
// the longest-due first.
func TestAClaimTakesTheMostUrgentTierFirstThenTheLongestDue(t *testing.T) {
	t.Parallel()
	e := setup(t, 6, tiers.Cold, nil)
	ctx := context.Background()
	// The HOT items became due last, yet they are claimed first; of the COLD ones, the one due
	// longest ago comes next.
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET collection_tier = 'HOT_1M', next_collect_at = now() - interval '1 millisecond'
		WHERE item_id = ANY($1)`, []string{e.items[4].ItemID, e.items[5].ItemID}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 hour' WHERE item_id = $1`, e.items[2].ItemID); err != nil {
		t.Fatal(err)
	}
	claims, err := catalog.ClaimDue(ctx, e.pool, 3, time.Minute, "t", 0)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, c := range claims {
		got[c.ItemID] = true
	}
	if len(claims) != 3 || !got[e.items[4].ItemID] || !got[e.items[5].ItemID] || !got[e.items[2].ItemID] {
		t.Fatalf("claimed %v; want the two HOT items and %s, the COLD one due longest", got, e.items[2].ItemID)
	}
}

// A DORMANT item that gets an interest event is due at once and collected by the next pass.
func TestDormantItemReactivatedByInterestIsCollectedNext(t *testing.T) {
	t.Parallel()
	e := setup(t, 1, tiers.Hot, nil)
	ctx := context.Background()
	id := e.items[0].ItemID
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET collection_tier = 'DORMANT', next_collect_at = NULL`); err != nil {
		t.Fatal(err)
	}
	if s, _ := e.dispatcher(t, Config{}, nil).RunOnce(ctx); s.Claimed != 0 {
		t.Fatal("a DORMANT item was claimed")
	}
	if _, err := catalog.RecordInterest(ctx, e.pool, catalog.InterestEvent{ItemID: id, Kind: "watch", Weight: 1, Source: "test"}, tiers.Active); err != nil {
		t.Fatal(err)
	}
	s, err := e.dispatcher(t, Config{}, nil).RunOnce(ctx)
	if err != nil || s.Collected != 1 {
		t.Fatalf("after the interest event: %s %v; want the item collected", s, err)
	}
	var tier string
	if err := e.pool.QueryRow(ctx, `SELECT collection_tier FROM tracked_items`).Scan(&tier); err != nil || tier != string(tiers.Active) {
		t.Fatalf("tier %q %v, want ACTIVE_3M", tier, err)
	}
	if e.sim.ItemRequests(id) != 1 {
		t.Fatalf("simulator served %d auction requests for the item, want 1", e.sim.ItemRequests(id))
	}
}

// A status change made elsewhere (another instance, an operator) pauses a running pass before
// its next batch.
func TestStatusIsReadAgainBeforeEveryBatch(t *testing.T) {
	t.Parallel()
	var e *env
	var flipped atomic.Bool
	e = setup(t, 30, tiers.Hot, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/df/auction" && flipped.CompareAndSwap(false, true) {
				if err := provider.SetOverride(r.Context(), e.pool, "neople", provider.Degraded, "operator", 0); err != nil {
					t.Error(err)
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	s, err := e.dispatcher(t, Config{BatchSize: 10, Concurrency: 1}, nil).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Batches != 1 || s.Collected != 10 || !s.Paused || s.Status != provider.Degraded {
		t.Fatalf("summary %s: want one batch collected, then paused as DEGRADED", s)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE next_collect_at <= now() AND lease_token IS NULL`); c != 20 {
		t.Fatalf("%d items still due and unleased, want 20", c)
	}
}

// closeOnce closes ch unless it is closed already.
func closeOnce(ch chan struct{}) {
	select {
	case <-ch:
	default:
		close(ch)
	}
}
