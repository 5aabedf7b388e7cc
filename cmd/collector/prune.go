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
		Short: "Drop history past its retention: whole snapshot and sales partitions, old interest events and candles",
		Long: `Drops the auction_snapshots and auction_sales partitions whose whole range is older than
retention.snapshots / retention.sales (what collector partitions does, creating the partitions
ahead as well), then deletes interest events and price candles older than retention.interest,
retention.candles_hourly and retention.candles_daily, oldest first, retention.batch rows per
statement. 0 keeps a table's rows. The daemon does the same (partitions every
history.maintenance_interval, rows every retention.interval); this one-shot is for cron-only
setups. The outbox has its own: collector outbox prune.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			cfg := a.cfg.Retention
			if !cfg.Enabled() && cfg.Snapshots == 0 && cfg.Sales == 0 {
				return errors.New("nothing to prune: retention.snapshots, retention.sales, retention.interest and retention.candles_* are all 0 (keep); set one (or --snapshots, --sales, --interest)")
			}
			pool, states, err := a.keepPartitions(ctx)
			for _, st := range states {
				a.printf("%s: dropped %d partitions\n", st.Table, len(st.Dropped))
			}
			if err != nil {
				return err
			}
			res, err := retention.Prune(ctx, pool, cfg, 0)
			a.printf("deleted %d interest events, %d hourly candles, %d daily candles\n", res.Interest, res.CandlesHourly, res.CandlesDaily)
			return err
		}),
	}
	f := cmd.Flags()
	f.Duration("snapshots", 0, "drop snapshot partitions wholly older than this (retention.snapshots)")
	f.Duration("sales", 0, "drop sales partitions wholly older than this (retention.sales)")
	f.Duration("interest", 0, "delete interest events older than this (retention.interest)")
	f.Int("batch", 0, "rows per DELETE (retention.batch)")
	a.bindFlag("retention.snapshots", f.Lookup("snapshots"))
	a.bindFlag("retention.sales", f.Lookup("sales"))
	a.bindFlag("retention.interest", f.Lookup("interest"))
	a.bindFlag("retention.batch", f.Lookup("batch"))
	return cmd
}
