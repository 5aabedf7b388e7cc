package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/store"
)

// migrateFlags are shared by up and down.
type migrateFlags struct {
	to      int32
	dryRun  bool
	showSQL bool
}

func newMigrateCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply, revert or inspect the database schema migrations",
		Long: `Apply, revert or inspect the embedded schema migrations (tern, advisory-locked, so several
processes may run them at once). Run them against PostgreSQL directly (database.direct_url), not
through a transaction-pooling PgBouncer.`,
		Args: cobra.NoArgs,
		// A bare `collector migrate` applies nothing: applying needs an explicit `up`. It fails,
		// so that a Job or init container written `migrate` does not report a migration done.
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError{"collector migrate", fmt.Errorf("name what to do: `collector migrate up` applies the pending migrations (`status`, `down` the others)")}
		},
	}
	var upF, downF migrateFlags
	up := &cobra.Command{
		Use:   "up [--to N] [--dry-run] [--show-sql]",
		Short: "Apply pending migrations, all of them or up to version N",
		Args:  cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			return withMigrateHint(runMigrate(ctx, a, upF, "up"))
		}),
	}
	down := &cobra.Command{
		Use:   "down [--to N] [--dry-run] [--show-sql]",
		Short: "Revert migrations down to version N (default: the latest one only)",
		Args:  cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			return withMigrateHint(runMigrate(ctx, a, downF, "down"))
		}),
	}
	for _, c := range []struct {
		cmd *cobra.Command
		f   *migrateFlags
		to  string
	}{{up, &upF, "version to migrate up to (default: the latest)"}, {down, &downF, "version to migrate down to (default: one below the current; 0 only when given)"}} {
		c.cmd.Flags().Int32Var(&c.f.to, "to", -1, c.to)
		c.cmd.Flags().BoolVar(&c.f.dryRun, "dry-run", false, "print the migrations that would run and change nothing")
		c.cmd.Flags().BoolVar(&c.f.showSQL, "show-sql", false, "print each migration's SQL")
	}
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the applied schema version; exits 1 while migrations are pending",
		Args:  cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			st, err := store.Status(ctx, migrateURL(a))
			if err != nil {
				return withMigrateHint(err)
			}
			a.printf("schema at version %d of %d\n", st.Current, st.Latest)
			if len(st.Pending) > 0 {
				a.printf("pending: %s\n", strings.Join(st.Pending, ", "))
				return fmt.Errorf("%d migrations pending: run `collector migrate up`", len(st.Pending))
			}
			return nil
		}),
	}
	cmd.AddCommand(up, down, status)
	return cmd
}

// migrateURL: migrations need a session (advisory lock), so they prefer the direct URL; on
// database.url they use database.query_exec_mode like every other connection.
func migrateURL(a *app) string {
	if a.cfg.Database.DirectURL != "" {
		return a.cfg.Database.DirectURL
	}
	return store.WithExecMode(a.cfg.Database.URL, a.cfg.Database.QueryExecMode)
}

func runMigrate(ctx context.Context, a *app, f migrateFlags, direction string) error {
	if f.to < -1 {
		// -1 is the flag's "not given"; any other negative would silently mean it too.
		return usageError{"collector migrate " + direction, fmt.Errorf("--to %d: a version is 0 or more", f.to)}
	}
	url := migrateURL(a)
	if !f.dryRun && a.cfg.Database.DirectURL == "" && store.SimpleProtocol(url) {
		// tern's lock is the session's: through a transaction pooler it can be taken on one
		// server connection and released on another, stranded there for every later migration.
		return fmt.Errorf("collector migrate %s needs a session of PostgreSQL itself (an advisory lock), and database.url runs in the simple protocol "+
			"(database.query_exec_mode: a transaction-pooling PgBouncer): set database.direct_url to PostgreSQL (docs/operations.md, \"Behind PgBouncer\")", direction)
	}
	target := f.to
	if direction == "up" && target < 0 {
		target = store.Latest
	}
	if direction == "down" && target < 0 {
		cur, _, err := store.Plan(ctx, url, store.Latest)
		if err != nil {
			return err
		}
		target = max(cur-1, 0)
		if target == 0 && cur > 0 {
			// Version 0 is no schema: the catalog, every partition of history and the
			// unpublished events go with it. One below the current is then no default.
			return fmt.Errorf("migrate down from version %d drops every table and all history (version 0): pass --to 0 if that is what you mean", cur)
		}
	}
	cur, steps, err := store.Plan(ctx, url, target)
	if ahead := new(store.SchemaAheadError); errors.As(err, &ahead) && direction == "up" && f.to < 0 {
		// A rollback's migrate job (a Helm pre-upgrade hook, one Job per version) runs the
		// older binary's `migrate up`: there is nothing for it to apply, and failing would
		// fail the rollback. The older binary runs on the newer schema, which only adds.
		a.log.Warn("the database schema is newer than this binary's; nothing to apply", zap.Error(err))
		a.printf("schema at version %d, newer than this binary's %d: nothing applied\n", ahead.Current, ahead.Latest)
		return nil
	}
	if err != nil {
		return err
	}
	for _, s := range steps {
		if s.Direction != direction {
			return fmt.Errorf("--to %d is %s from version %d: use `collector migrate %s`", target, s.Direction, cur, s.Direction)
		}
	}
	if f.dryRun {
		a.printf("schema at version %d; %d migrations would run (dry run, nothing changed)\n", cur, len(steps))
		for _, s := range steps {
			printStep(a, s, f.showSQL)
		}
		return nil
	}
	err = store.MigrateTo(ctx, url, target, store.MigrateHooks{
		OnStart: func(s store.Step) {
			a.log.Info("applying migration", zap.Int32("seq", s.Sequence), zap.String("name", s.Name), zap.String("direction", s.Direction))
			if f.showSQL {
				printStep(a, s, true)
			}
		},
		OnWait: func(holder string) {
			a.log.Warn("another session holds the migration lock; waiting for it (a migration that hangs there can be ended with pg_terminate_backend)",
				zap.String("holder", holder))
		},
	})
	if err != nil {
		return err
	}
	st, err := store.Status(ctx, url)
	if err != nil {
		return err
	}
	a.printf("schema at version %d of %d\n", st.Current, st.Latest)
	if direction == "up" && st.Current == st.Latest {
		// A new database is ready to write at once, not only once a daemon has run.
		return a.createPartitions(ctx)
	}
	return nil
}

// createPartitions creates the history partitions up to history.partition_ahead with the
// process's one keeper (DDL over database.direct_url when set, as the migration itself), dropping
// nothing: that is `collector partitions`' and the daemon's.
func (a *app) createPartitions(ctx context.Context) error {
	pool, err := a.db(ctx)
	if err != nil {
		return err
	}
	parts, err := a.keeper(ctx, pool)
	if err != nil {
		return err
	}
	states, err := parts.CreateAhead(ctx)
	covered := len(states) > 0
	for _, st := range states {
		if !st.Described {
			a.printf("%s: partitions could not be read\n", st.Table)
			covered = false
			continue
		}
		a.printf("%s: %d partitions, ready %s ahead\n", st.Table, st.Partitions, st.Ahead.Round(time.Minute))
		covered = covered && st.Ahead > 0
	}
	if err != nil && covered {
		// The schema is current and writes have their partitions: what is missing further
		// ahead the daemon's upkeep creates. A lock held on a parent (a detach waiting out a
		// long export) must not fail a rollout's migrate job.
		a.log.Warn("history partitions not created ahead; the daemon's upkeep creates them", zap.Error(err))
		return nil
	}
	return err
}

func printStep(a *app, s store.Step, showSQL bool) {
	a.printf("%s %03d %s\n", s.Direction, s.Sequence, s.Name)
	if showSQL {
		a.printf("%s\n", strings.TrimSpace(s.SQL))
	}
}
