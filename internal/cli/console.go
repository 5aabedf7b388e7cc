package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/api"
	"github.com/duecollector/duecollector/internal/console"
	"github.com/duecollector/duecollector/internal/httpserve"
	"github.com/duecollector/duecollector/internal/store"
)

func newConsoleCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Serve the operator console against the database, with no daemon running",
		Long: `console serves the operator console (docs/console.md) on console.addr until SIGTERM/SIGINT:
the overview (provider, budgets, tiers, lag, outbox, relay, instances), the items with search
and filters, and each item's estimates, sales and price chart. collector run serves the same
console at / on daemon.http_addr.

It is read-only unless a console password is set (COLLECTOR_CONSOLE_PASSWORD or
console.password_file): then a login enables pin/unpin, provider pause/resume, packing on/off
and outbox retry. The read API (docs/api.md) is served beside it at /api/v1/ unless
api.enabled is false.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			ln, err := net.Listen("tcp", a.cfg.Console.Addr)
			if err != nil {
				return fmt.Errorf("console.addr %s: %w", a.cfg.Console.Addr, err)
			}
			reads, err := a.reads(ctx)
			if err != nil {
				_ = ln.Close()
				return err
			}
			a.background(ctx, "replica", reads.Start)
			c, err := a.newConsole(ctx, pool, reads)
			if err != nil {
				_ = ln.Close()
				return err
			}
			site, _, err := a.withAPI(ctx, reads, c.Handler())
			if err != nil {
				_ = ln.Close()
				return err
			}
			a.printf("console: %s\n", hostURL(ln.Addr().String()))
			return serveUntilDone(ctx, ln, site, a.log)
		}),
	}
	f := cmd.Flags()
	f.String("addr", "", "listen on `HOST:PORT` (console.addr)")
	a.bindFlag("console.addr", f.Lookup("addr"))
	return cmd
}

// withAPI serves the read API (internal/api) at /api/v1/ beside console, when api.enabled;
// console may be nil (the console is off), and the result is nil when both are. The API's
// /latest refresh runs until ctx ends. It returns the API's metrics for a /metrics to serve. It reads through reads (the replica while it keeps up),
// but /latest from the primary: it promises to trail the database by a second at most.
func (a *app) withAPI(ctx context.Context, reads *store.Reads, console http.Handler) (http.Handler, []prometheus.Collector, error) {
	if !a.cfg.API.Enabled {
		return console, nil, nil
	}
	ap, err := api.New(reads, api.Config{APIConfig: a.cfg.API, Latest: reads.Primary()}, a.log)
	if err != nil {
		return nil, nil, err
	}
	a.background(ctx, "api", ap.Start)
	mux := http.NewServeMux()
	mux.Handle(api.Prefix, ap.Handler())
	if console != nil {
		mux.Handle("/", console)
	}
	return mux, ap.Collectors(), nil
}

// newConsole builds the console from the validated config and starts its status refresh,
// which ends with ctx. Its item pages read through reads; the caller runs its measurements.
func (a *app) newConsole(ctx context.Context, pool *pgxpool.Pool, reads *store.Reads) (*console.Console, error) {
	cfg := console.Config{
		ProviderName: a.cfg.Provider.Name,
		Market:       a.cfg.Provider.Market,
		PackSize:     a.cfg.Collect.PackSize,
		NoOutbox:     !a.cfg.Outbox.Enabled,
		User:         a.cfg.Console.User,
		Password:     a.cfg.Console.Password,
		Session:      a.cfg.Console.Session,
		Reads:        reads,
	}
	if a.cfg.API.Enabled {
		cfg.API = api.Prefix
	}
	if a.cfg.Daemon.Budget.Enabled {
		cfg.LearnedShare = func(ctx context.Context) (float64, error) {
			_, f, err := a.learnedMarket(ctx, pool)
			return f, err
		}
	}
	c, err := console.New(pool, cfg, a.log)
	if err != nil {
		return nil, err
	}
	a.background(ctx, "console", c.Start)
	return c, nil
}

// hostURL is the URL people open for a listen address: a wildcard host is reached on localhost.
func hostURL(hostPort string) string {
	host, port, err := net.SplitHostPort(hostPort)
	if err != nil {
		return "http://" + hostPort + "/"
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/"
}

// serveUntilDone serves h on ln until ctx ends, then lets requests in flight finish.
func serveUntilDone(ctx context.Context, ln net.Listener, h http.Handler, log *zap.Logger) error {
	srv := httpserve.New(h)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("console server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		// Requests still running hold pool connections, and closing the pool would wait for
		// them: closing their connections ends them (their contexts are cancelled).
		log.Warn("console: shutdown", zap.Error(err))
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("console server: %w", err)
	}
	return nil
}
