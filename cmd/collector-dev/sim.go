package main

import (
	"context"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/cli"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/provider/neoplesim/market"
)

func newSimCmd(h cli.Host) *cobra.Command {
	var (
		addr            string
		opts            neoplesim.Options
		itemKey, mktKey string
		marketKind      string
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Serve a simulated Neople API (deterministic data, per-key limits, /_sim admin endpoints)",
		Long: `Serve a simulated Neople API for development, tests and benchmarks. It needs no database.
Keys: --item-key/--market-key, else NEOPLE_ITEM_API_KEY/NEOPLE_MARKET_API_KEY, else sim-item-key/sim-market-key.
Admin: POST /_sim/maintenance?on=true|false, GET|POST /_sim/faults, GET|DELETE /_sim/stats, GET /_sim/catalog,
GET /_sim/freshness (--market realistic: freshness, age and sales coverage of what it served, against its ground truth).`,
		Example: `  collector-dev sim --addr 127.0.0.1:8089 --items 500
  NEOPLE_API_BASE_URL=http://127.0.0.1:8089 NEOPLE_MARKET_API_KEY=sim-market-key collector collect-due`,
		Args: cobra.NoArgs,
		RunE: h.Run(func(ctx context.Context) error {
			opts.Market = marketKind
			opts.ItemKey = firstNonEmpty(itemKey, os.Getenv(provider.WorkloadItem.KeyEnv()), neoplesim.DefaultItemKey)
			opts.MarketKey = firstNonEmpty(mktKey, os.Getenv(provider.WorkloadMarket.KeyEnv()), neoplesim.DefaultMarketKey)
			if err := opts.Validate(); err != nil {
				return err
			}
			return serveSim(ctx, h.Log(), addr, opts)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:8089", "listen on `HOST:PORT` (port 0 picks a free one)")
	f.IntVar(&opts.Items, "items", 50, "catalog size")
	f.Int64Var(&opts.Seed, "seed", 1, "data seed: the same seed serves the same catalog and market")
	f.StringVar(&itemKey, "item-key", "", "key accepted on /df/items (default $NEOPLE_ITEM_API_KEY, else sim-item-key)")
	f.StringVar(&mktKey, "market-key", "", "key accepted on /df/auction* (default $NEOPLE_MARKET_API_KEY, else sim-market-key)")
	f.Float64Var(&opts.Rate, "rate", 0, "requests per second per key before the API002 answer (0 = unlimited)")
	f.IntVar(&opts.RateLimitStatus, "rate-limit-status", 429, "HTTP status of the API002 rate-limit answer: 429 or 400")
	f.DurationVar(&opts.Latency, "latency", 0, "latency added to every /df request")
	f.StringVar(&marketKind, "market", market.Default, "market model: default (every item changes every minute) or realistic (heavy-tailed per-item rates, ground truth on /_sim/freshness)")
	f.StringVar(&opts.ItemIDsLimit, "itemids-limit", neoplesim.LimitPerCall, "what limit caps in an itemIds answer: per-call or per-item")
	f.StringVar(&opts.ItemIDsOrder, "itemids-order", neoplesim.OrderMerged, "row order of an itemIds answer: merged (one order) or grouped (item by item)")
	f.BoolVar(&opts.NotFoundAPI001, "not-found-api001", false, "an itemName search that finds nothing answers 400 API001 NOT_FOUND_SEARCH_VALUE")
	f.BoolVar(&opts.KoreanMessages, "korean-messages", false, "error messages as Korean sentences")
	_ = cmd.RegisterFlagCompletionFunc("market", cobra.FixedCompletions([]string{market.Default, market.Realistic}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// serveSim serves until ctx ends, then drains for up to 5 s.
func serveSim(ctx context.Context, log *zap.Logger, addr string, opts neoplesim.Options) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: neoplesim.New(opts), ReadHeaderTimeout: 10 * time.Second}
	log.Info("neople simulator listening",
		zap.String("addr", ln.Addr().String()), zap.String("base_url", "http://"+ln.Addr().String()),
		zap.Int("items", opts.Items), zap.Int64("seed", opts.Seed), zap.Float64("rate", opts.Rate),
		zap.Duration("latency_seconds", opts.Latency), zap.String("market", opts.Market), zap.Int("rate_limit_status", opts.RateLimitStatus),
		zap.String("itemids_limit", opts.ItemIDsLimit), zap.String("itemids_order", opts.ItemIDsOrder),
		// Labels, not keys: enough to match against /_sim/stats.
		zap.String("item_key", neoplesim.KeyLabel(opts.ItemKey)), zap.String("market_key", neoplesim.KeyLabel(opts.MarketKey)))
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if srv.Shutdown(shutdown) != nil {
		// Requests held by an injected timeout fault would otherwise keep us up to 30 s.
		_ = srv.Close()
	}
	<-errc
	log.Info("neople simulator stopped")
	return nil
}

func firstNonEmpty(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}
