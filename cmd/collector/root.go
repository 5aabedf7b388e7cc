package main

import (
	"context"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// app is what every subcommand gets: the validated config, a logger and lazily a pool.
type app struct {
	stdout, stderr io.Writer
	configFile     string
	flagKeys       map[string]*pflag.Flag

	cfg  *config.Config
	log  *zap.Logger
	pool *pgxpool.Pool
}

// subcommands is filled by each command file's init, so adding a command touches one file.
var subcommands []func(a *app) *cobra.Command

func register(f func(a *app) *cobra.Command) { subcommands = append(subcommands, f) }

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	a := &app{stdout: stdout, stderr: stderr, flagKeys: map[string]*pflag.Flag{}}
	root := &cobra.Command{
		Use:           "collector",
		Short:         "Collect tracked market items when the database says they are due",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	pf := root.PersistentFlags()
	pf.StringVar(&a.configFile, "config", "", "YAML config file (env COLLECTOR_CONFIG)")
	pf.String("database-url", "", "PostgreSQL URL (env COLLECTOR_DATABASE_URL, then DATABASE_URL)")
	pf.String("log-level", "", "debug, info, warn or error (default info)")
	pf.String("log-format", "", "json or console (default json)")
	a.bindFlag("database.url", pf.Lookup("database-url"))
	a.bindFlag("log.level", pf.Lookup("log-level"))
	a.bindFlag("log.format", pf.Lookup("log-format"))
	for _, f := range subcommands {
		root.AddCommand(f(a))
	}
	return root
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
	file := a.configFile
	if file == "" {
		file = getenv("COLLECTOR_CONFIG")
	}
	cfg, err := config.Load(config.Options{File: file, Flags: a.flagKeys})
	if err != nil {
		return err
	}
	logger, err := telemetry.NewLogger(cfg.Log.Level, cfg.Log.Format, a.stderr)
	if err != nil {
		return err
	}
	a.cfg, a.log = cfg, logger
	return nil
}

// db opens the pool on first use.
func (a *app) db(ctx context.Context) (*pgxpool.Pool, error) {
	if err := a.load(); err != nil {
		return nil, err
	}
	if a.pool != nil {
		return a.pool, nil
	}
	pool, err := store.Open(ctx, store.PoolConfig{URL: a.cfg.Database.URL, MaxConns: a.cfg.Database.MaxConns, ApplicationName: "duecollector"})
	if err != nil {
		return nil, err
	}
	a.pool = pool
	return pool, nil
}

func (a *app) close() {
	if a.pool != nil {
		a.pool.Close()
		a.pool = nil
	}
	if a.log != nil {
		_ = a.log.Sync()
	}
}

// withApp wraps a command body: load config, run, always release the pool.
func (a *app) run(fn func(ctx context.Context) error) func(cmd *cobra.Command, args []string) error {
	return func(cmd *cobra.Command, _ []string) error {
		if err := a.load(); err != nil {
			return err
		}
		defer a.close()
		return fn(cmd.Context())
	}
}

// runArgs is run for commands that take positional arguments.
func (a *app) runArgs(fn func(ctx context.Context, args []string) error) func(cmd *cobra.Command, args []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return a.run(func(ctx context.Context) error { return fn(ctx, args) })(cmd, args)
	}
}

func (a *app) printf(format string, args ...any) { fmt.Fprintf(a.stdout, format, args...) }
