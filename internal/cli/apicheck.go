package cli

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/apicheck"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/provider"
)

func newAPICheckCmd(a *app) *cobra.Command {
	var (
		items, writeConfig string
		pace               time.Duration
		burst              int
	)
	cmd := &cobra.Command{
		Use:   "api-check",
		Short: "Find out how the live market API behaves where its documentation is silent, and what to configure",
		Long: `Sends a handful of requests with the market key (NEOPLE_MARKET_API_KEY), paced gently, and prints
whether the apikey header (and the query) is accepted, whether itemIds works on /df/auction and
/df/auction-sold, whether limit counts per call or per item, how rows of several items are ordered and,
with --burst N, which status and code a rate-limit answer uses. It never prints the key.
--write-config FILE writes the configuration this implies.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return err
			}
			// Each request of the burst spends the production key's budget outside the
			// cluster's share: a few hundred show a rate-limit answer.
			if burst < 0 || burst > maxBurst {
				return fmt.Errorf("--burst %d: allowed 0 (do not provoke) to %d", burst, maxBurst)
			}
			if pace < 0 {
				return fmt.Errorf("--pace %s: must not be negative", pace)
			}
			return nil
		},
		RunE: a.run(func(ctx context.Context) error {
			ids := splitIDs(items)
			if len(ids) == 0 {
				pool, err := a.db(ctx)
				if err != nil {
					return fmt.Errorf("--items not given and no database to take tracked items from: %w", err)
				}
				rows, err := catalog.ListItems(ctx, pool, catalog.ItemsQuery{Limit: 5})
				if err != nil {
					return err
				}
				for _, r := range rows {
					ids = append(ids, r.ItemID)
				}
			}
			if len(ids) < 2 || len(ids) > provider.MaxItemIDs {
				return usageError{cmd: "collector api-check", err: fmt.Errorf("need 2 to %d item ids (--items, or tracked items), got %d", provider.MaxItemIDs, len(ids))}
			}
			key := a.cfg.Provider.MarketKey.Reveal()
			if strings.TrimSpace(key) == "" {
				return fmt.Errorf("%s is not set", provider.WorkloadMarket.KeyEnv())
			}
			rep, err := apicheck.Run(ctx, apicheck.Config{BaseURL: a.cfg.Provider.BaseURL, Key: key, ItemIDs: ids, Pace: pace, Burst: burst})
			if err != nil {
				return err
			}
			a.printf("%s", rep)
			if burst == 0 {
				a.printf("(run with --burst N to send N requests at once and describe the rate-limit answer)\n")
			}
			if writeConfig != "" {
				if err := os.WriteFile(writeConfig, []byte(rep.ConfigYAML()), 0o644); err != nil {
					return fmt.Errorf("--write-config: %w", err)
				}
				a.printf("wrote %s\n", writeConfig)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&items, "items", "", "comma-separated item ids with listings and sales (default: the 5 most popular tracked items)")
	f.DurationVar(&pace, "pace", 500*time.Millisecond, "pause between requests")
	f.IntVar(&burst, "burst", 0, "send this many requests at once to provoke and describe a rate-limit answer (0: do not)")
	f.StringVar(&writeConfig, "write-config", "", "write the configuration the findings imply to this YAML file")
	return cmd
}

// maxBurst bounds api-check --burst.
const maxBurst = 1000

func splitIDs(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
