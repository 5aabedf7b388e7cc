package dispatcher

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/testsignal"
	"github.com/duecollector/duecollector/internal/tiers"
)

// Every claim statement a pass may use reports its refusal and its success to the write health:
// a claim on a full disk marks it refused, and a claim that succeeds clears what a claim can
// clear (here a read-only state).
func TestEveryClaimStatementReportsToWriteHealth(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		name string
		cfg  Config
		one  bool // CollectOne's claim
	}{
		{name: "by tier", cfg: Config{}},
		{name: "by cost", cfg: Config{ClaimRequests: func() float64 { return 2 }}},
		{name: "one item", one: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			e := setup(t, 1, tiers.Active, nil)
			run := func(wh *store.WriteHealth) error {
				cfg := c.cfg
				cfg.WriteHealth, cfg.MaxBatches = wh, 1
				d := e.dispatcher(t, cfg, nil)
				var err error
				if c.one {
					_, err = d.CollectOne(ctx, e.items[0].ItemID)
				} else {
					_, err = d.RunOnce(ctx)
				}
				return err
			}

			free := storetest.FillDisk(t, e.pool, "tracked_items")
			wh := store.NewWriteHealth()
			err := run(wh)
			if s := wh.State(); s.Cause != store.CauseDiskFull {
				t.Fatalf("write health %+v after a claim refused for lack of space (%v): want disk_full", s, err)
			}
			free()

			// Nothing else writes in this pass: the item is not due (the one-item claim finds it leased).
			if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() + interval '1 hour',
				lease_expires_at = now() + interval '1 hour', lease_token = gen_random_uuid()`); err != nil {
				t.Fatal(err)
			}
			wh = store.NewWriteHealth()
			wh.ObserveProbe(store.CauseReadOnly, "before the claim")
			_ = run(wh)
			if s := wh.State(); !s.Writable {
				t.Fatalf("write health %+v after a claim succeeded: want writable", s)
			}
		})
	}
}

// A write-back refused for lack of space marks the write health refused while it is retried;
// its success afterwards does not end the state (only the space probe does), and the result is
// stored once the disk has room.
func TestWriteBackReportsToWriteHealth(t *testing.T) {
	ctx := context.Background()
	e := setup(t, 1, tiers.Active, nil)
	wh, full := storetest.WatchWrites(t, store.CauseDiskFull)
	free := storetest.FillDisk(t, e.pool, "auction_snapshots")
	done := make(chan error, 1)
	go func() {
		_, err := e.dispatcher(t, Config{Concurrency: 1, MaxBatches: 1, Lease: 10 * time.Minute, WriteHealth: wh, History: everyCollection}, nil).RunOnce(ctx)
		done <- err
	}()
	full.WaitWithin(t, time.Minute)
	free()
	if err := testkit.Recv(t, done, 2*time.Minute, "the pass to write its result once the disk has room"); err != nil {
		t.Fatal(err)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM auction_snapshots`); n != 1 {
		t.Fatalf("%d snapshots, want 1", n)
	}
	if s := wh.State(); s.Cause != store.CauseDiskFull {
		t.Fatalf("write health %+v after the write-back succeeded: want disk_full until the space probe's write", s)
	}
}

// A write-back refused for longer than renewCap leases, while its lease renewals still succeed
// (a full disk: updates that fit in their page do), gives its items up instead of keeping them
// from every other collector for good: the pass ends, the items are handed back, nothing is
// stored.
func TestARefusedWriteBackGivesItsItemsUpAfterTheRenewalCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t, 1, tiers.Active, nil)
	wh, full := storetest.WatchWrites(t, store.CauseDiskFull)
	storetest.FillDisk(t, e.pool, "auction_snapshots")
	done := make(chan error, 1)
	go func() {
		// A lease longer than the retries' longest back-off: without the cap they would renew it
		// for good.
		_, err := e.dispatcher(t, Config{Concurrency: 1, MaxBatches: 1, Lease: writeBackoff.Max + time.Second, WriteHealth: wh, History: everyCollection}, nil).RunOnce(ctx)
		done <- err
	}()
	full.WaitWithin(t, time.Minute)
	err := testkit.Recv(t, done, 2*time.Minute, "the pass to give up its refused write-back")
	if store.RefusedCause(err) != store.CauseDiskFull {
		t.Fatalf("pass error %v: want the refusal", err)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL`); n != 0 {
		t.Fatalf("%d items still leased after the pass gave them up", n)
	}
	if n := count(t, e.pool, `SELECT count(*) FROM auction_snapshots`); n != 0 {
		t.Fatalf("%d snapshots stored through a full disk", n)
	}
}

// Lease renewals while a slow call runs report to the write health: one refused for lack of
// space marks it refused.
func TestLeaseRenewalReportsToWriteHealth(t *testing.T) {
	ctx := context.Background()
	release := make(chan struct{})
	e := setup(t, 1, tiers.Active, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			<-release
			next.ServeHTTP(w, r)
		})
	})
	wh, full := storetest.WatchWrites(t, store.CauseDiskFull)
	var free func()
	var claimed testsignal.Signal[struct{}]
	claimed.Init(t)
	done := make(chan error, 1)
	go func() {
		_, err := e.dispatcher(t, Config{Concurrency: 1, MaxBatches: 1, Lease: 3 * time.Second, WriteHealth: wh,
			Observer: claimObserver{claimed: &claimed}}, nil).RunOnce(ctx)
		done <- err
	}()
	claimed.WaitWithin(t, time.Minute)
	// Claimed and in its call: from here only the renewals write to tracked_items.
	free = storetest.FillDisk(t, e.pool, "tracked_items")
	full.WaitWithin(t, time.Minute)
	free()
	close(release)
	testkit.Recv(t, done, 2*time.Minute, "the pass to end")
}

// claimObserver signals every claimed batch.
type claimObserver struct {
	nopObserver
	claimed *testsignal.Signal[struct{}]
}

func (o claimObserver) Claimed([]catalog.Claim) { o.claimed.Signal(struct{}{}) }
