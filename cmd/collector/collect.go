package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/provider"
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
	owner := dispatcher.OwnerString()
	if b := a.cfg.Daemon.Budget; b.Enabled {
		host, _ := os.Hostname()
		share, err := budget.New(pool, budget.Config{
			KeyLabel: marketKeyLabel(a), Rate: a.cfg.Provider.Market.Rate, PerMinute: a.cfg.Provider.Market.PerMinute,
			Headroom: b.Headroom, Heartbeat: b.Heartbeat, Cooldown: b.Cooldown, Adaptive: b.Adaptive,
			Instance: owner, Host: host, PID: os.Getpid(),
		}, a.log)
		if err != nil {
			return nil, nil, err
		}
		sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		done := make(chan struct{})
		go func() { defer close(done); _ = share.Run(sctx) }()
		stop = func() { cancel(); <-done }
		fetch = budgetedFetcher{next: client, share: share, window: a.cfg.Collect.Lease}
	}
	c := a.cfg.Collect
	d, err = dispatcher.New(pool, fetch, dispatcher.Config{
		Owner:       owner,
		Provider:    a.cfg.Provider.Name,
		BatchSize:   c.BatchSize,
		Lease:       c.Lease,
		Concurrency: c.Concurrency,
		MaxBatches:  c.MaxBatches,
		FlushSize:   c.FlushSize,
		Grace:       c.ShutdownGrace,
		SoldLimit:   a.cfg.Provider.SoldLimit, AuctionLimit: a.cfg.Provider.AuctionLimit,

		EstimateWindow: a.cfg.Catalog.EstimateWindow,
		PackSize:       c.PackSize, PackMaxListings: c.PackMaxListings, PackMaxSales: c.PackMaxSales,
		ShadowFraction: c.ShadowFraction,
	}, a.log)
	if err != nil {
		stop()
		return nil, nil, err
	}
	return d, stop, nil
}

// budgetedFetcher waits for this process's share of the key before each call and tells every
// instance when the provider answers that the key is over its budget.
type budgetedFetcher struct {
	next   dispatcher.Fetcher
	share  *budget.Share
	window time.Duration // a cool-down longer than this (the claims' lease) ends the run
}

func (f budgetedFetcher) Auction(ctx context.Context, itemID string) ([]provider.Listing, error) {
	return withShare(ctx, f.share, f.window, provider.EndpointAuction, func(ctx context.Context) ([]provider.Listing, error) { return f.next.Auction(ctx, itemID) })
}

func (f budgetedFetcher) AuctionSold(ctx context.Context, itemID string) ([]provider.Sale, error) {
	return withShare(ctx, f.share, f.window, provider.EndpointAuctionSold, func(ctx context.Context) ([]provider.Sale, error) { return f.next.AuctionSold(ctx, itemID) })
}

func (f budgetedFetcher) AuctionMany(ctx context.Context, ids []string) ([]provider.Listing, int, error) {
	return packedWithShare(ctx, f.share, f.window, provider.EndpointAuction, func() ([]provider.Listing, int, error) {
		return f.next.(dispatcher.PackedFetcher).AuctionMany(ctx, ids)
	})
}

func (f budgetedFetcher) AuctionSoldMany(ctx context.Context, ids []string) ([]provider.Sale, int, error) {
	return packedWithShare(ctx, f.share, f.window, provider.EndpointAuctionSold, func() ([]provider.Sale, int, error) {
		return f.next.(dispatcher.PackedFetcher).AuctionSoldMany(ctx, ids)
	})
}

func packedWithShare[T any](ctx context.Context, share *budget.Share, window time.Duration, endpoint string, call func() ([]T, int, error)) ([]T, int, error) {
	type answer struct {
		rows []T
		sent int
	}
	a, err := withShare(ctx, share, window, endpoint, func(context.Context) (answer, error) {
		rows, sent, err := call()
		return answer{rows, sent}, err
	})
	return a.rows, a.sent, err
}

func withShare[T any](ctx context.Context, share *budget.Share, window time.Duration, endpoint string, call func(context.Context) (T, error)) (T, error) {
	var zero T
	done, err := share.WaitWithin(ctx, window)
	var ce *budget.CooldownError
	if errors.As(err, &ce) {
		// Ends the pass like a rate-limit answer: unfetched claims are handed back at once.
		return zero, &provider.Error{Class: provider.ClassRateLimited, Workload: provider.WorkloadMarket, Endpoint: endpoint,
			RetryAfter: time.Until(ce.Until), Err: fmt.Errorf("%w, past this run's leases (collect.lease %s)", ce, window)}
	}
	if err != nil {
		return zero, &provider.Error{Class: provider.ClassTransient, Workload: provider.WorkloadMarket, Endpoint: endpoint,
			Err: fmt.Errorf("waiting for the cluster budget: %w", err)}
	}
	defer done()
	v, err := call(ctx)
	var pe *provider.Error
	if errors.As(err, &pe) && pe.Class == provider.ClassRateLimited && pe.Status != 0 {
		share.RateLimited(ctx, pe.RetryAfter, pe.Error())
	}
	return v, err
}

func newCollectDueCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "collect-due",
		Short: "Claim every due item, collect it and reschedule it by its tier, then exit",
		Long: `collect-due claims due items in batches (safe to run from several processes or schedulers
at once: each item goes to exactly one of them), collects current listings and recent sales,
stores a snapshot and an outbox event per item, and reschedules every claimed item by its tier.
When the provider is not HEALTHY or RECOVERING it claims nothing, says why, and exits 0.`,
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
			return err
		}),
	}
	f := cmd.Flags()
	f.Int("batch-size", 0, "items claimed per statement (collect.batch_size)")
	f.Duration("lease", 0, "lease per claimed item (collect.lease)")
	f.Int("concurrency", 0, "provider calls in flight (collect.concurrency)")
	f.Int("max-batches", 0, "stop after N batches; 0 = until nothing is due (collect.max_batches)")
	a.bindFlag("collect.batch_size", f.Lookup("batch-size"))
	a.bindFlag("collect.lease", f.Lookup("lease"))
	a.bindFlag("collect.concurrency", f.Lookup("concurrency"))
	a.bindFlag("collect.max_batches", f.Lookup("max-batches"))
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
			if err == nil && sum.Failed > 0 {
				return fmt.Errorf("collect %s failed; see the log and `collector items` for its last error", args[0])
			}
			return err
		}),
	}
}

// oneItemID names the missing argument and where ids come from, for collect and touch.
func oneItemID(cmd *cobra.Command, args []string) error {
	switch {
	case len(args) == 0:
		return fmt.Errorf("missing ITEM_ID: give one tracked item's id (`collector items` lists them)")
	case len(args) > 1:
		return fmt.Errorf("%s takes one ITEM_ID, got %d arguments", cmd.Name(), len(args))
	}
	return nil
}

func summaryFields(s dispatcher.Summary) []zap.Field {
	return []zap.Field{
		zap.Int("claimed", s.Claimed), zap.Int("collected", s.Collected), zap.Int("failed", s.Failed),
		zap.Int("fenced_out", s.Fenced), zap.Int("released", s.Released), zap.Int("batches", s.Batches),
		zap.Duration("duration_seconds", s.Duration), zap.String("stop", s.Stop),
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
