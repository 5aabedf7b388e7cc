package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/health"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/history/partition"
	"github.com/duecollector/duecollector/internal/maintenance"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// app is what every subcommand gets: the validated config, a logger and lazily a pool.
type app struct {
	stdout, stderr io.Writer
	configFile     string
	flagKeys       map[string]*pflag.Flag

	cfg    *config.Config
	log    *zap.Logger
	pool   *pgxpool.Pool
	direct *pgxpool.Pool // database.direct_url, opened on first use
	// replica is the pool on database.read_url, and readRouter the reads router over it and
	// pool, both built on first use (reads).
	replica    *pgxpool.Pool
	readRouter *store.Reads
	parts      *partition.Partitions // the partition keeper (keeper), built on first use
	// health is a one-shot's health thresholds: the defaults, or health.TestTimings under
	// collect-due --test-timings (tools/faults).
	health health.Thresholds
	// bg counts the loops started with background: run ends them before the pools close.
	bg        sync.WaitGroup
	bgRestart time.Duration // how long a background loop that panicked waits (0: maintenance.RestartDefault)
}

// subcommands is every command under the root, in one explicit list.
var subcommands = []func(a *app) *cobra.Command{
	newAPICheckCmd,
	newImportItemsCmd, newSeedRealCmd, newSeedSyntheticCmd, newPurgeSyntheticCmd,
	newRecalculatePopularityCmd, newTouchCmd, newItemsCmd,
	newCollectDueCmd, newCollectCmd,
	newConfigCmd, newConsoleCmd, newHealthcheckCmd, newMigrateCmd, newOutboxCmd, newPackingCmd,
	newPlanCmd, newProviderCmd, newPruneCmd, newRelayOutboxCmd, newRunCmd,
	newStatusCmd, newVersionCmd, newHistoryCmd, newPartitionsCmd, newExportCmd,
}

// Tree is one binary's command tree: the shared commands and the ones it adds.
type Tree struct {
	Name  string      // the binary's name, the root of every command path
	Extra []Extension // commands only this binary has
}

// Extension builds a command from outside this package; it reaches the shared state through Host.
type Extension func(h Host) *cobra.Command

// Collector is the shipped binary's tree: what production runs and nothing else.
var Collector = Tree{Name: "collector"}

// NewRoot is the tree's root command writing to stdout and stderr, for tests.
func (t Tree) NewRoot(stdout, stderr io.Writer) *cobra.Command {
	root, _ := t.newRoot(stdout, stderr)
	return root
}

func (t Tree) newRoot(stdout, stderr io.Writer) (*cobra.Command, *app) {
	a := &app{stdout: stdout, stderr: stderr, flagKeys: map[string]*pflag.Flag{}}
	root := &cobra.Command{
		Use:   t.Name,
		Short: "Collect tracked market items when the database says they are due",
		Long: t.Name + ` collects tracked market items when the database says they are due, and relays
the snapshots to Kafka. New here? Run ` + "`collector-dev demo`" + ` (make demo): it needs only PostgreSQL
(or its server binaries) and shows the whole flow in 15 seconds.

Exit codes: 0 success, 1 the command failed, 2 a usage error (unknown command or flag, wrong
arguments; nothing was done) or import targets that matched nothing.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&a.configFile, "config", "", "YAML config file (env COLLECTOR_CONFIG)")
	pf.String("database-url", "", "PostgreSQL `URL`; env COLLECTOR_DATABASE_URL, then DATABASE_URL")
	pf.String("log-level", "", "debug, info, warn or error")
	pf.String("log-format", "", "json, console or auto (console on a terminal, json otherwise)")
	a.bindFlag("database.url", pf.Lookup("database-url"))
	a.bindFlag("log.level", pf.Lookup("log-level"))
	a.bindFlag("log.format", pf.Lookup("log-format"))
	for _, f := range subcommands {
		root.AddCommand(f(a))
	}
	for _, f := range t.Extra {
		root.AddCommand(f(Host{a}))
	}
	a.finishTree(root)
	return root, a
}

// bindFlag ties a flag to a config key; the flag wins only when the user set it.
func (a *app) bindFlag(key string, f *pflag.Flag) {
	if f == nil {
		panic("bindFlag: no such flag for " + key)
	}
	a.flagKeys[key] = f
}

// load reads and validates the config once and builds the logger.
func (a *app) load() error {
	if a.cfg != nil {
		return nil
	}
	cfg, err := config.Load(config.Options{File: a.configPath(), Flags: a.flagKeys})
	if err != nil {
		return err
	}
	logger, err := telemetry.NewLogger(cfg.Log.Level, cfg.Log.Format, a.stderr)
	if err != nil {
		return err
	}
	a.cfg, a.log = cfg, logger
	logFormatInForce.Store(cfg.Log.Format)
	for _, name := range config.UnknownEnv(os.Environ()) {
		a.log.Warn("unknown environment variable ignored: no configuration key reads it (docs/configuration.md lists them)",
			zap.String("variable", name))
	}
	return nil
}

// configPath is --config, else COLLECTOR_CONFIG.
func (a *app) configPath() string {
	if a.configFile != "" {
		return a.configFile
	}
	return getenv("COLLECTOR_CONFIG")
}

// db opens the pool on first use.
func (a *app) db(ctx context.Context) (*pgxpool.Pool, error) {
	if err := a.load(); err != nil {
		return nil, err
	}
	if a.pool != nil {
		return a.pool, nil
	}
	pool, err := store.Open(ctx, store.PoolConfig{URL: a.cfg.Database.URL, MaxConns: a.cfg.Database.MaxConns,
		ApplicationName: "duecollector", QueryExecMode: a.cfg.Database.QueryExecMode,
		// After a failover or a restore every connection is new: snapshot ids move on past
		// those the lost commits used, whose events may already be in Kafka.
		OnConnect: func(ctx context.Context, c *pgx.Conn) error { return history.AdvanceSnapshotIDs(ctx, c) }})
	if err != nil {
		return nil, err
	}
	// The check /readyz makes: one line naming the database and `migrate up`, not a missing relation.
	if err := store.CheckCurrent(ctx, pool); err != nil {
		pool.Close()
		return nil, withMigrateHint(err)
	}
	if v, err := store.CurrentVersion(ctx, pool); err == nil {
		if latest, _ := store.LatestVersion(); v > latest {
			// Allowed (a rolling upgrade, a rollback of the binary), and said once per process.
			a.log.Warn("the database schema is newer than this binary's: a newer release migrated it",
				zap.Int32("schema_version", v), zap.Int32("binary_version", latest))
		}
	}
	a.pool = pool
	return pool, nil
}

func (a *app) close() {
	a.parts = nil // built on the pools closed here
	a.readRouter = nil
	if a.replica != nil {
		a.replica.Close()
		a.replica = nil
	}
	if a.direct != nil {
		a.direct.Close()
		a.direct = nil
	}
	if a.pool != nil {
		a.pool.Close()
		a.pool = nil
	}
	if a.log != nil {
		_ = a.log.Sync()
	}
}

// reads builds the read router on first use: over the pool, and the replica on
// database.read_url when one is set. It routes to the primary until measured: a long-running
// command runs its measurements (Start), a one-shot measures once (RunOnce) before reading.
func (a *app) reads(ctx context.Context) (*store.Reads, error) {
	pool, err := a.db(ctx)
	if err != nil {
		return nil, err
	}
	if a.readRouter != nil {
		return a.readRouter, nil
	}
	if u := a.cfg.Database.ReadURL; u != "" {
		a.replica, err = store.OpenReplica(ctx, store.PoolConfig{URL: u, MaxConns: a.cfg.Database.MaxConns,
			ApplicationName: "duecollector-reads", QueryExecMode: a.cfg.Database.QueryExecMode})
		if err != nil {
			return nil, err
		}
	}
	a.readRouter = store.NewReads(pool, a.replica, store.ReadsConfig{}, a.log)
	return a.readRouter, nil
}

// withApp wraps a command body: load config, run, always release the pool.
func (a *app) run(fn func(ctx context.Context) error) func(cmd *cobra.Command, args []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := a.load(); err != nil {
			return err
		}
		// A command's background loops (read measurements, the console's refresh, /latest)
		// end with its context; they are waited for before their pools close, so a stop does
		// not make them fail on a closed pool.
		ctx, cancel := context.WithCancel(cmd.Context())
		defer a.close()
		defer a.bg.Wait()
		defer cancel()
		return fn(ctx)
	}
}

// background runs loop until ctx ends, under the daemon's lifecycle for background jobs (a
// panic is logged and the loop started again, the command lives on); run waits for it before
// closing the pools.
func (a *app) background(ctx context.Context, name string, loop func(context.Context)) {
	a.bg.Go(func() { maintenance.Runner{Restart: a.bgRestart, Log: a.log}.Run(ctx, name, loop) })
}

// runArgs is run for commands that take positional arguments.
func (a *app) runArgs(fn func(ctx context.Context, args []string) error) func(cmd *cobra.Command, args []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return a.run(func(ctx context.Context) error { return fn(ctx, args) })(cmd, args)
	}
}

func (a *app) printf(format string, args ...any) { fmt.Fprintf(a.stdout, format, args...) }

// migrateHint is what to run when the schema is behind or must be made again; packages below
// cmd do not name commands.
const migrateHint = "run `collector migrate up`"

func withMigrateHint(err error) error {
	if store.NeedsMigration(err) {
		return fmt.Errorf("%w; %s", err, migrateHint)
	}
	return err
}
