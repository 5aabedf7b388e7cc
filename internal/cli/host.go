package cli

import (
	"context"
	"io"
	"net"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/daemon"
)

// Host is what a command built outside this package shares with the others: the loaded
// config, the logger, the pool and the building blocks `run` and `console` use. It exists so
// that collector-dev's commands can run the daemon exactly as `collector run` does without
// this package importing the simulator.
type Host struct{ a *app }

// Run wraps a command body like every shared command's: load the config, run, release the pool.
func (h Host) Run(fn func(ctx context.Context) error) func(*cobra.Command, []string) error {
	return h.a.run(fn)
}

// Config is the validated config; a development command may change it before building services.
func (h Host) Config() *config.Config { return h.a.cfg }

// Log is the logger built from the config.
func (h Host) Log() *zap.Logger { return h.a.log }

// SetLog replaces the logger, with format the log.format it writes.
func (h Host) SetLog(log *zap.Logger, format string) {
	h.a.log, h.a.cfg.Log.Format = log, format
	logFormatInForce.Store(format)
}

// Stdout is where commands print their results; Stderr gets the logs.
func (h Host) Stdout() io.Writer { return h.a.stdout }
func (h Host) Stderr() io.Writer { return h.a.stderr }

// ConfigPath is --config, else COLLECTOR_CONFIG; empty when no file is read.
func (h Host) ConfigPath() string { return h.a.configPath() }

// DB opens the pool on first use and checks the schema is current.
func (h Host) DB(ctx context.Context) (*pgxpool.Pool, error) { return h.a.db(ctx) }

// NewDaemon builds `collector run`'s daemon from the config.
func (h Host) NewDaemon(ctx context.Context, testTimings bool) (*daemon.Daemon, error) {
	return h.a.newDaemon(ctx, testTimings)
}

// PrintStatus prints `collector status`'s table.
func (h Host) PrintStatus(ctx context.Context, pool *pgxpool.Pool) error {
	st, err := daemon.Status(ctx, pool, h.a.cfg.Provider.Name)
	if err != nil {
		return err
	}
	_, learned, err := h.a.learnedMarket(ctx, pool)
	if err != nil {
		return err
	}
	printStatus(h.a, st, learned)
	return nil
}

// ServeConsole serves `collector console` on ln until ctx ends.
func (h Host) ServeConsole(ctx context.Context, ln net.Listener, pool *pgxpool.Pool) error {
	reads := store.NewReads(pool, nil, store.ReadsConfig{}, h.a.log) // the demo's own database, no replica
	c, err := h.a.newConsole(ctx, pool, reads)
	if err != nil {
		_ = ln.Close()
		return err
	}
	site, _, err := h.a.withAPI(ctx, reads, c.Handler())
	if err != nil {
		_ = ln.Close()
		return err
	}
	return serveUntilDone(ctx, ln, site, h.a.log)
}

// HostURL is the URL people open for a listen address.
func HostURL(hostPort string) string { return hostURL(hostPort) }
