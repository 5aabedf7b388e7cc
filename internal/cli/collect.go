package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/health"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// newDispatcher builds the dispatcher from the validated config with the market workload's
// own client (its key, its limiter). With daemon.budget.enabled a one-shot takes its share of
// the key's cluster-wide budget like a daemon does, so cron runs beside daemons never push
// the key over; stop ends that share (call it when the pass is over).
func (a *app) newDispatcher(ctx context.Context) (d *dispatcher.Dispatcher, stop func(), err error) {
	// Configuration and keys first, so every start-up problem shows before the database is touched.
	client, err := provider.FromConfig(a.cfg.Provider, provider.WorkloadMarket, a.log)
	if err != nil {
		return nil, nil, err
	}
	pool, err := a.db(ctx)
	if err != nil {
		return nil, nil, err
	}
	var fetch dispatcher.Fetcher = client
	stop = func() {}
	owner := telemetry.Instance()
	if b := a.cfg.Daemon.Budget; b.Enabled {
		share, err := budget.New(pool, budget.ConfigFor(b, a.cfg.Provider.Market, marketKeyLabel(a), owner), a.log)
		if err != nil {
			return nil, nil, err
		}
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		// Not restarted after a panic (maintenance.Runner): one can leave the share given up.
		go func() { defer close(done); share.Start(sctx) }()
		stop = func() { cancel(); <-done }
		fetch = &budget.Fetcher{Next: client, Share: share, Within: a.cfg.Collect.Lease}
	}
	dc := dispatcher.FromConfig(a.cfg)
	dc.Owner, dc.MaxBatches, dc.Grace = owner, a.cfg.Collect.MaxBatches, a.cfg.Collect.ShutdownGrace
	// A run collects what is due when it starts and ends: what falls due meanwhile is the next
	// run's.
	dc.DueAtStart = true
	hc := health.Config{Thresholds: a.health, Provider: dc.Provider, Owner: owner}
	// The probe goes through the client's own limiter, not the budget share: a share this fresh
	// is not granted within the probe's timeout, and one request per back-off cannot push the
	// key over.
	probe := health.AuctionProbe(pool, client.Auction)
	dc.Recover = func(ctx context.Context) error { return health.Once(ctx, pool, hc, probe, a.log) }
	if dc.Partitions, err = a.keeper(ctx, pool); err != nil {
		stop()
		return nil, nil, err
	}
	d, err = dispatcher.New(pool, fetch, dc, a.log)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return d, stop, nil
}

func newCollectDueCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "collect-due",
		Short: "Claim every due item, collect it and reschedule it by its tier, then exit",
		Long: `collect-due claims due items in batches (safe to run from several processes or schedulers
at once: each item goes to exactly one of them), collects current listings and recent sales,
stores a snapshot and an outbox event per item, and reschedules every claimed item by its tier.
It collects what was due when it started and ends: what falls due meanwhile is the next run's.
When the provider is not HEALTHY or RECOVERING it claims nothing, says why, and exits 0. It exits 1
when every item it claimed was tried and failed (not all for the item's own error), so that a
scheduler sees a run that did nothing; items failing beside others collected, or handed back by
a maintenance answer, a cool-down or a signal, leave it at 0 (the log names the failed by outcome).`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			d, stop, err := a.newDispatcher(ctx)
			if err != nil {
				return err
			}
			defer stop()
			sum, err := d.RunOnce(ctx)
			a.printf("%s\n", sum)
			if err == nil {
				a.log.Info("collect-due finished", summaryFields(sum)...)
			}
			if err == nil && everyItemFailed(sum) {
				return fmt.Errorf("every item claimed failed (%d); the log names them by outcome, `collector items ITEM_ID` shows one's last error", sum.Failed)
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.Int("batch-size", 0, "items claimed per statement (collect.batch_size)")
	f.Duration("lease", 0, "lease per claimed item (collect.lease)")
	f.Int("concurrency", 0, "provider calls in flight (collect.concurrency)")
	f.Int("max-batches", 0, "stop after N batches; 0 = until what was due at the start is collected (collect.max_batches)")
	a.bindFlag("collect.batch_size", f.Lookup("batch-size"))
	a.bindFlag("collect.lease", f.Lookup("lease"))
	a.bindFlag("collect.concurrency", f.Lookup("concurrency"))
	a.bindFlag("collect.max_batches", f.Lookup("max-batches"))
	f.BoolFunc("test-timings", "probe a paused provider and end RECOVERING at test speed (tools/faults)", func(string) error {
		a.health = health.TestTimings
		return nil
	})
	_ = f.MarkHidden("test-timings")
	return cmd
}

func newCollectCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "collect ITEM_ID",
		Short: "Collect one item now, through the same lease, budget and write path as collect-due",
		Args:  oneItemID,
		RunE: a.runArgs(func(ctx context.Context, args []string) error {
			d, stop, err := a.newDispatcher(ctx)
			if err != nil {
				return err
			}
			defer stop()
			sum, err := d.CollectOne(ctx, args[0])
			if errors.Is(err, dispatcher.ErrNotClaimable) {
				return err // nothing was collected: no summary line before the reason
			}
			a.printf("%s\n", sum)
			switch {
			case err != nil:
				return err
			case sum.Failed > 0 && !sum.Paused:
				return fmt.Errorf("collect %s failed; see the log and `collector items` for its last error", args[0])
			case sum.Collected == 0 && sum.Stop == dispatcher.StopInterrupted:
				return fmt.Errorf("nothing collected, the item handed back: %w", context.Cause(ctx))
			case sum.Collected == 0:
				// Asked for one item now: a pause or a pass-ending answer is a failure to do
				// that, unlike collect-due's "nothing to do now".
				return fmt.Errorf("nothing collected: %s", notCollected(sum))
			}
			return nil
		}),
	}
}

// everyItemFailed tells a collect-due run that did nothing because its calls failed: every item
// it claimed was tried and failed, not all of them for the item's own error (a removed item
// alone due must not fail every run until it goes dormant). Items handed back (a maintenance
// answer, a cool-down, a signal) are not failures, nor are the calls the maintenance answered
// (written back failed): such a run exits 0, saying why.
func everyItemFailed(sum dispatcher.Summary) bool {
	return sum.Claimed > 0 && !sum.Paused && sum.Failed+sum.Fenced == sum.Claimed && sum.Failed > sum.ItemErrors
}

// notCollected says why a pass that ended without error collected nothing.
func notCollected(sum dispatcher.Summary) string {
	switch {
	case sum.Paused:
		return fmt.Sprintf("the provider is %s (%s)", sum.Status, sum.StatusReason)
	case !sum.CooldownUntil.IsZero():
		return "the key cools down until " + sum.CooldownUntil.UTC().Format(time.RFC3339)
	case sum.Fenced > 0:
		// A process stalled past its lease (a paused VM, SIGSTOP), or a call stuck past the
		// renewal cap, meets this: the lease ran out mid-call and another collector took the item.
		return "its lease (collect.lease) ran out before the answer was stored, and another collector took the item over; its answer was not stored"
	case sum.Stop != dispatcher.StopNone:
		return "the pass stopped: " + sum.Stop.String()
	}
	return "the item was handed back"
}

// oneItemID names the missing argument and where ids come from, for collect and touch.
func oneItemID(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return fmt.Errorf("missing ITEM_ID: give one tracked item's id (`collector items` lists them)")
	case len(args) > 1:
		return fmt.Errorf("%s takes one ITEM_ID, got %d arguments", cmd.Name(), len(args))
	}
	return blankItemID(args)
}

// blankItemID refuses an ITEM_ID argument (the first) that is empty or blank, an unset shell
// variable most often: `items ""` read it as no id and showed another item as if it were the
// one asked for.
func blankItemID(args []string) error {
	if len(args) > 0 && strings.TrimSpace(args[0]) == "" {
		return fmt.Errorf("ITEM_ID is empty: give one tracked item's id (`collector items` lists them)")
	}
	return nil
}

// itemIDArgs is cobra's check of the argument count, then blankItemID.
func itemIDArgs(count cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := count(cmd, args); err != nil {
			return err
		}
		return blankItemID(args)
	}
}

func summaryFields(s dispatcher.Summary) []zap.Field {
	return []zap.Field{
		zap.Int("claimed", s.Claimed), zap.Int("collected", s.Collected), zap.Int("failed", s.Failed),
		zap.Int("fenced_out", s.Fenced), zap.Int("released", s.Released), zap.Int("batches", s.Batches),
		zap.Duration("duration_seconds", s.Duration), zap.Stringer("stop", s.Stop),
		zap.Duration("claim_p50_seconds", s.Claim.P50), zap.Duration("claim_p95_seconds", s.Claim.P95),
		zap.Duration("fetch_p50_seconds", s.Fetch.P50), zap.Duration("fetch_p95_seconds", s.Fetch.P95),
		zap.Duration("persist_p50_seconds", s.Persist.P50), zap.Duration("persist_p95_seconds", s.Persist.P95),
	}
}

// collectOncePass is seed:real's collect step: a plain collect-due pass.
func (a *app) collectOncePass(ctx context.Context) error {
	d, stop, err := a.newDispatcher(ctx)
	if err != nil {
		return err
	}
	defer stop()
	sum, err := d.RunOnce(ctx)
	a.printf("collect-due: %s\n", sum)
	return err
}
