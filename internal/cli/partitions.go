package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/store"
)

func newPartitionsCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "partitions",
		Short: "Create history partitions ahead and drop those past retention (for cron deployments)",
		Long: `Keeps auction_snapshots and auction_sales partitioned: creates the partitions of the next
history.partition_ahead (history.partition_interval each), and drops the partitions whose whole
range is older than retention.snapshots / retention.sales (DETACH … CONCURRENTLY, then DROP;
judged from the bounds in the catalog). Creation comes first, so a drop that fails or waits
never holds it back. The daemon does the same every hour; run this
from cron where no daemon runs, at least daily. Safe from several processes at once (one drops,
the others skip the drop). All partition DDL goes over database.direct_url when it is set;
behind PgBouncer in transaction mode without it, partitions are created but not dropped.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			_, states, err := a.keepPartitions(ctx)
			for _, st := range states {
				if !st.Described {
					a.printf("%s: could not be read; created %d, dropped %d (the error follows)\n", st.Table, len(st.Created), len(st.Dropped))
					continue
				}
				oldest := "none"
				if !st.Oldest.IsZero() {
					oldest = st.Oldest.UTC().Format(time.RFC3339)
				}
				skipped := ""
				if st.DropSkipped {
					skipped = " (another instance is dropping)"
				}
				a.printf("%s: %d partitions, ready %s ahead, oldest from %s; created %d, dropped %d%s\n",
					st.Table, st.Partitions, st.Ahead.Round(time.Minute), oldest, len(st.Created), len(st.Dropped), skipped)
			}
			return err
		}),
	}
}

// directPool is a small pool on database.direct_url for what needs PostgreSQL itself: partition
// DDL (a drop holds a session lock across DETACH … CONCURRENTLY's two transactions); pool when
// no direct URL is set.
func (a *app) directPool(ctx context.Context, pool *pgxpool.Pool) (*pgxpool.Pool, error) {
	if a.cfg.Database.DirectURL == "" {
		return pool, nil
	}
	if a.direct == nil {
		d, err := store.Open(ctx, store.PoolConfig{URL: a.cfg.Database.DirectURL, MaxConns: 2, ApplicationName: "duecollector-direct"})
		if err != nil {
			return nil, fmt.Errorf("database.direct_url: %w", err)
		}
		a.direct = d
	}
	return a.direct, nil
}

// keeper is the one partition keeper of this process, built on first use and shared by every
// command that keeps or writes the history tables (partitions, prune, run, collect-due): DDL
// over database.direct_url when set, bounds from history.partition_*, drops by retention.*.
func (a *app) keeper(ctx context.Context, pool *pgxpool.Pool) (*partition.Partitions, error) {
	if a.parts != nil {
		return a.parts, nil
	}
	direct, err := a.directPool(ctx, pool)
	if err != nil {
		return nil, err
	}
	if a.parts, err = partition.New(pool, direct, partition.FromConfig(a.cfg)); err != nil {
		return nil, err
	}
	return a.parts, nil
}

// keepPartitions runs partition upkeep once; it returns the pool it opened for the caller's
// further work.
func (a *app) keepPartitions(ctx context.Context) (*pgxpool.Pool, []partition.TableState, error) {
	pool, err := a.db(ctx)
	if err != nil {
		return nil, nil, err
	}
	parts, err := a.keeper(ctx, pool)
	if err != nil {
		return pool, nil, err // the pool works: prune still prunes rows
	}
	states, err := parts.RunOnce(ctx)
	return pool, states, err
}
