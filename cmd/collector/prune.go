package main

import (
	"context"
	"errors"

	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/retention"
)

func newPruneCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Delete collected history past its retention (snapshots, sales, interest events), in small batches",
		Long: `Deletes auction snapshots, sales and interest events older than retention.snapshots,
retention.sales and retention.interest (0 keeps a table's rows), oldest first, retention.batch
rows per statement, until none are left. The daemon does the same every retention.interval;
this one-shot is for cron-only setups. The outbox has its own: collector outbox prune.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			cfg := a.cfg.Retention
			if !cfg.Enabled() {
				return errors.New("nothing to prune: retention.snapshots, retention.sales and retention.interest are all 0 (keep); set one (or --snapshots, --sales, --interest)")
			}
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			res, err := retention.Prune(ctx, pool, cfg, 0)
			a.printf("deleted %d snapshots, %d sales, %d interest events\n", res.Snapshots, res.Sales, res.Interest)
			return err
		}),
	}
	f := cmd.Flags()
	f.Duration("snapshots", 0, "delete snapshots collected longer ago than this (retention.snapshots)")
	f.Duration("sales", 0, "delete sales older than this (retention.sales)")
	f.Duration("interest", 0, "delete interest events older than this (retention.interest)")
	f.Int("batch", 0, "rows per DELETE (retention.batch)")
	a.bindFlag("retention.snapshots", f.Lookup("snapshots"))
	a.bindFlag("retention.sales", f.Lookup("sales"))
	a.bindFlag("retention.interest", f.Lookup("interest"))
	a.bindFlag("retention.batch", f.Lookup("batch"))
	return cmd
}
