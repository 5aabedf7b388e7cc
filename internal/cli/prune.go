package cli

import (
	"context"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/retention"
)

func newPruneCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Drop history past its retention: whole snapshot and sales partitions, old outbox events, interest events and candles",
		Long: `Drops the auction_snapshots and auction_sales partitions whose whole range is older than
retention.snapshots / retention.sales (what collector partitions does, creating the partitions
ahead as well), then deletes published outbox events older than kafka.outbox_retention,
unpublished ones (pending or failed) older than retention.outbox_unpublished when it is set
(off by default; their snapshots stay), and interest events and price candles older than retention.interest,
retention.candles_hourly and retention.candles_daily, oldest first, in short statements
(kafka.prune_batch outbox rows, retention.batch other rows each). 0 keeps a table's rows. The
daemon does the same (partitions every history.maintenance_interval, rows every
retention.interval); this one-shot is for cron-only setups.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			pool, states, err := a.keepPartitions(ctx)
			for _, st := range states {
				a.printf("%s: dropped %d partitions\n", st.Table, len(st.Dropped))
			}
			if err != nil {
				return err
			}
			cfg := retention.FromConfig(a.cfg)
			res, err := retention.Prune(ctx, pool, cfg, 0)
			if res.OutboxExpired > 0 {
				a.log.Warn("dropped unpublished outbox events past retention.outbox_unpublished; their snapshots stay in auction_snapshots",
					zap.Int64("expired", res.OutboxExpired), zap.Duration("older_than_seconds", cfg.OutboxUnpublished))
			}
			a.printf("deleted %d published and %d unpublished (expired) outbox events, %d interest events, %d hourly candles, %d daily candles\n",
				res.OutboxPublished, res.OutboxExpired, res.Interest, res.CandlesHourly, res.CandlesDaily)
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
