package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/retention"
)

func newPruneCmd(a *app) *cobra.Command {
	var batch int
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Drop history past its retention: whole snapshot and sales partitions, old outbox events, interest events and candles",
		Long: `Drops the auction_snapshots and auction_sales partitions whose whole range is older than
retention.snapshots / retention.sales (what collector partitions does, creating the partitions
ahead as well), then deletes published outbox events older than kafka.outbox_retention,
unpublished ones (pending or failed) older than retention.outbox_unpublished when it is set
(off by default; their snapshots stay), and interest events and price candles older than retention.interest,
retention.candles_hourly and retention.candles_daily, oldest first, in short statements
(1000 outbox rows, --batch other rows each). 0 keeps a table's rows. The daemon does the same
(partitions every hour, rows every ten minutes) with the same partition keeper and pruner;
this one-shot is for cron-only setups.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			if batch < 0 {
				return usageError{cmd: "collector prune", err: fmt.Errorf("--batch %d: must be >= 1 (0 = %d)", batch, retention.BatchDefault)}
			}
			pool, states, partErr := a.keepPartitions(ctx)
			for _, st := range states {
				skipped := ""
				if st.DropSkipped {
					skipped = " (another instance is dropping)"
				}
				a.printf("%s: dropped %d partitions%s\n", st.Table, len(st.Dropped), skipped)
			}
			if pool == nil {
				return partErr
			}
			// Rows are pruned even when the partitions' upkeep failed (a drop that waited out
			// a long export's lock, no session behind PgBouncer): in a cron-only setup this is
			// the outbox's only pruner, and it must not stop behind partitions.
			cfg := retention.FromConfig(a.cfg)
			cfg.Batch = batch
			res, err := retention.Prune(ctx, pool, cfg, 0)
			retention.LogExpired(a.log, cfg, res.OutboxExpired)
			a.printf("deleted %d published and %d unpublished (expired) outbox events, %d interest events, %d hourly candles, %d daily candles\n",
				res.OutboxPublished, res.OutboxExpired, res.Interest, res.CandlesHourly, res.CandlesDaily)
			return errors.Join(partErr, err)
		}),
	}
	f := cmd.Flags()
	f.Duration("snapshots", 0, "drop snapshot partitions wholly older than this (retention.snapshots)")
	f.Duration("sales", 0, "drop sales partitions wholly older than this (retention.sales)")
	f.Duration("interest", 0, "delete interest events older than this (retention.interest)")
	f.IntVar(&batch, "batch", 0, "interest events or candles per DELETE (0 = the default)")
	a.bindFlag("retention.snapshots", f.Lookup("snapshots"))
	a.bindFlag("retention.sales", f.Lookup("sales"))
	a.bindFlag("retention.interest", f.Lookup("interest"))
	return cmd
}
