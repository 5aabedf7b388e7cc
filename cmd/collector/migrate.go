package main

import (
	"context"
	"strings"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/store"
)

func init() { register(newMigrateCmd) }

func newMigrateCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Apply or inspect the database schema migrations"}
	up := &cobra.Command{
		Use:   "up",
		Short: "Apply every pending migration (safe to run from several processes at once)",
		Args:  cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			if err := store.Migrate(ctx, a.cfg.Database.URL, func(seq int32, name string) {
				a.log.Info("applying migration", zap.Int32("seq", seq), zap.String("name", name))
			}); err != nil {
				return err
			}
			st, err := store.Status(ctx, a.cfg.Database.URL)
			if err != nil {
				return err
			}
			a.printf("schema at version %d of %d\n", st.Current, st.Latest)
			return nil
		}),
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the applied schema version and pending migrations",
		Args:  cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			st, err := store.Status(ctx, a.cfg.Database.URL)
			if err != nil {
				return err
			}
			a.printf("schema at version %d of %d\n", st.Current, st.Latest)
			if len(st.Pending) > 0 {
				a.printf("pending: %s\n", strings.Join(st.Pending, ", "))
			}
			return nil
		}),
	}
	cmd.AddCommand(up, status)
	// `collector migrate` alone means up, the common case in entrypoints and CronJobs.
	cmd.RunE = up.RunE
	return cmd
}
