package dispatcher

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/tiers"
)

// panicking is a Fetcher whose every call naming the poison item (every item: poisonAll)
// panics, as a bug in reading that item's answer would.
type panicking struct {
	Fetcher
	poison    string
	poisonAll bool
	calls     atomic.Int64 // calls that panicked
}

func (p *panicking) meet(ids ...string) {
	if p.poisonAll || slices.Contains(ids, p.poison) {
		p.calls.Add(1)
		panic("index out of range [3] with length 3")
	}
}

func (p *panicking) Auction(ctx context.Context, id string) (provider.Answer[provider.Listing], error) {
	p.meet(id)
	return p.Fetcher.Auction(ctx, id)
}

func (p *panicking) AuctionMany(ctx context.Context, ids []string) (provider.Answer[provider.Listing], error) {
	p.meet(ids...)
	return p.Fetcher.AuctionMany(ctx, ids)
}

// checkPanicRecorded checks that the poison item was rescheduled by its tier as failed with the
// panic in last_error, its lease gone, and that the panic's stack was logged.
func checkPanicRecorded(t *testing.T, e *env, id string, logs *observer.ObservedLogs) {
	t.Helper()
	var outcome, lastErr string
	var next, attempt time.Time
	var leased bool
	if err := e.pool.QueryRow(context.Background(), `
		SELECT last_outcome, last_error, next_collect_at, last_attempt_at, lease_token IS NOT NULL
		FROM tracked_items WHERE item_id = $1`, id).Scan(&outcome, &lastErr, &next, &attempt, &leased); err != nil {
		t.Fatal(err)
	}
	if outcome != outcomePanic || !strings.Contains(lastErr, "index out of range") || leased {
		t.Fatalf("poison item: outcome %q, last_error %q, leased %v; want the panic recorded and the lease gone", outcome, lastErr, leased)
	}
	if want, _ := tiers.NextDue(id, tiers.Active, attempt); !next.Equal(want) {
		t.Fatalf("poison item next_collect_at %v, want its tier slot %v", next, want)
	}
	found := false
	for _, l := range logs.FilterLevelExact(zapcore.ErrorLevel).All() {
		if stack, _ := l.ContextMap()["stack"].(string); strings.Contains(stack, "panic") && slices.Contains(l.ContextMap()["item_ids"].([]any), any(id)) {
			found = true
		}
	}
	if !found {
		t.Fatalf("no error log with the panic's stack naming %s: %v", id, logs.All())
	}
}

// An item whose answer meets a bug (a panic) fails alone and is rescheduled by tier; the pass,
// and the process, go on. Before, the panic killed the process, and every collector that
// claimed the item after its lease lapsed died in turn.
func TestAPanicOnOneItemFailsThatItemAlone(t *testing.T) {
	t.Parallel()
	e := setup(t, 6, tiers.Active, nil)
	f := &panicking{Fetcher: e.client, poison: e.items[3].ItemID}
	core, logs := observer.New(zapcore.DebugLevel)
	d, err := New(e.pool, f, configured(e.pool, Config{Concurrency: 2}), zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.RunOnce(context.Background())
	if err != nil || s.Collected != 5 || s.Failed != 1 {
		t.Fatalf("pass %s, %v; want 5 collected and the poison item failed", s, err)
	}
	checkPanicRecorded(t, e, f.poison, logs)
}

// A packed call whose answer meets a bug is fetched again one item at a time, so only the item
// that meets it fails, not its pack-mates.
func TestAPanicInAPackedCallFailsOnlyTheItemThatMeetsIt(t *testing.T) {
	t.Parallel()
	e := setup(t, 20, tiers.Active, nil)
	ctx := context.Background()
	cfg := Config{BatchSize: 20, Concurrency: 2, PackSize: 10, PackMaxListings: 60, PackMaxSales: packMaxSalesMax}
	if _, err := e.dispatcher(t, cfg, nil).RunOnce(ctx); err != nil { // first collections: alone
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	f := &panicking{Fetcher: e.client, poison: e.items[5].ItemID}
	core, logs := observer.New(zapcore.DebugLevel)
	d, err := New(e.pool, f, configured(e.pool, cfg), zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.RunOnce(ctx)
	if err != nil || s.Collected != 19 || s.Failed != 1 {
		t.Fatalf("pass %s, %v; want 19 collected and the poison item failed", s, err)
	}
	if f.calls.Load() < 2 {
		t.Fatalf("%d calls met the poison item; want the packed one and its own (else the test proves nothing)", f.calls.Load())
	}
	checkPanicRecorded(t, e, f.poison, logs)
}

// A write-back that meets a bug on one item's data rolls back, and the group is split until that
// item is alone: its batch-mates are written, it is rescheduled as failed.
func TestAPanicWritingOneItemBackFailsThatItemAlone(t *testing.T) {
	t.Parallel()
	e := setup(t, 6, tiers.Active, nil)
	poison := e.items[2].ItemID
	core, logs := observer.New(zapcore.DebugLevel)
	d := e.dispatcher(t, Config{}, zap.New(core))
	d.inWrite = func(rs []result) {
		for _, r := range rs {
			if r.claim.ItemID == poison && r.err == nil {
				panic("index out of range [3] with length 3")
			}
		}
	}
	s, err := d.RunOnce(context.Background())
	if err != nil || s.Collected != 5 || s.Failed != 1 {
		t.Fatalf("pass %s, %v; want 5 collected and the poison item failed", s, err)
	}
	checkPanicRecorded(t, e, poison, logs)
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_outcome = 'ok' AND lease_token IS NULL`); n != 5 {
		t.Fatalf("%d items written back as collected, want 5", n)
	}
}

// A recovered panic is the collector's bug, not the provider's: it must not count against the
// provider's health (a bug many answers meet would otherwise pause the cluster as DEGRADED).
func TestAPanicIsNoProviderFailure(t *testing.T) {
	for _, err := range []error{&bugError{value: "x"}, &store.DataError{Err: &bugError{value: "x"}}} {
		if c := provider.ClassOf(err); c != provider.ClassBug {
			t.Errorf("ClassOf(%v) = %s, want bug", err, c)
		}
	}
}
