package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/provider"
)

func init() {
	register(newCollectDueCmd)
	register(newCollectCmd)
}

// newDispatcher builds the dispatcher from the validated config with the market workload's
// own client (its key, its limiter).
func (a *app) newDispatcher(ctx context.Context) (*dispatcher.Dispatcher, error) {
	pool, err := a.db(ctx)
	if err != nil {
		return nil, err
	}
	client, err := provider.FromConfig(a.cfg.Provider, provider.WorkloadMarket)
	if err != nil {
		return nil, err
	}
	c := a.cfg.Collect
	return dispatcher.New(pool, client, dispatcher.Config{
		Provider:    a.cfg.Provider.Name,
		BatchSize:   c.BatchSize,
		Lease:       c.Lease,
		Concurrency: c.Concurrency,
		MaxBatches:  c.MaxBatches,
		FlushSize:   c.FlushSize,
		SoldLimit:   a.cfg.Provider.SoldLimit,
	}, a.log)
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
			d, err := a.newDispatcher(ctx)
			if err != nil {
				return err
			}
			sum, err := d.RunOnce(ctx)
			a.printf("%s\n", sum)
			if err == nil {
				a.log.Info("collect-due finished", summaryFields(sum)...)
			}
			return err
		}),
	}
	f := cmd.Flags()
	f.Int("batch-size", 0, "items claimed per statement (collect.batch_size, default 100)")
	f.Duration("lease", 0, "lease per claimed item (collect.lease, default 2m)")
	f.Int("concurrency", 0, "provider calls in flight (collect.concurrency, default 16)")
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
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.run(func(ctx context.Context) error {
				d, err := a.newDispatcher(ctx)
				if err != nil {
					return err
				}
				sum, err := d.CollectOne(ctx, args[0])
				a.printf("%s\n", sum)
				if err == nil && sum.Failed > 0 {
					return fmt.Errorf("collect %s failed; see the log and `collector items` for its last error", args[0])
				}
				return err
			})(cmd, args)
		},
	}
}

func summaryFields(s dispatcher.Summary) []zap.Field {
	return []zap.Field{
		zap.Int("claimed", s.Claimed), zap.Int("collected", s.Collected), zap.Int("failed", s.Failed),
		zap.Int("fenced_out", s.Fenced), zap.Int("released", s.Released), zap.Int("batches", s.Batches),
		zap.Duration("duration", s.Duration), zap.String("stop", s.Stop),
		zap.Duration("claim_p50", s.Claim.P50), zap.Duration("claim_p95", s.Claim.P95),
		zap.Duration("fetch_p50", s.Fetch.P50), zap.Duration("fetch_p95", s.Fetch.P95),
		zap.Duration("persist_p50", s.Persist.P50), zap.Duration("persist_p95", s.Persist.P95),
	}
}

func init() {
	// seed:real's collect step is a plain collect-due pass.
	seedRealCollect = func(ctx context.Context, a *app) error {
		d, err := a.newDispatcher(ctx)
		if err != nil {
			return err
		}
		sum, err := d.RunOnce(ctx)
		a.printf("collect-due: %s\n", sum)
		return err
	}
}
