package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/provider"
)

func newPackingCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "packing", Short: "Show or switch packed (itemIds) calls, per endpoint, for every instance"}
	cmd.AddCommand(&cobra.Command{
		Use:   "status",
		Short: "Show whether each market endpoint may be packed, and why it was switched",
		Args:  cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			rows, err := dispatcher.ReadPackingStatus(ctx, pool)
			if err != nil {
				return err
			}
			a.printf("%s", packingLines(rows, a.cfg.Collect.PackSize))
			return nil
		}),
	})
	var endpoint string
	for _, on := range []bool{true, false} {
		use, short := "on", "Switch packed calls back on (after a shadow-verification mismatch switched them off)"
		if !on {
			use, short = "off", "Switch packed calls off: every item is fetched alone"
		}
		var c *cobra.Command
		c = &cobra.Command{
			Use: use, Short: short, Args: cobra.NoArgs,
			RunE: a.run(func(ctx context.Context) error {
				eps := []string{provider.EndpointAuction, provider.EndpointAuctionSold}
				if c.Flags().Changed("endpoint") {
					// Given empty (an unset variable), it must not widen to both endpoints.
					if !slices.Contains(eps, endpoint) {
						return usageError{"collector packing " + use, fmt.Errorf("--endpoint %q: allowed %s (leave it out for both)", endpoint, strings.Join(eps, ", "))}
					}
					eps = []string{endpoint}
				}
				pool, err := a.db(ctx)
				if err != nil {
					return err
				}
				for _, ep := range eps {
					if err := dispatcher.SetPacking(ctx, pool, ep, on, "collector packing "+use); err != nil {
						return err
					}
					a.printf("packing %s: %s\n", ep, use)
				}
				return nil
			}),
		}
		c.Flags().StringVar(&endpoint, "endpoint", "", "only this endpoint: /df/auction or /df/auction-sold (default both)")
		cmd.AddCommand(c)
	}
	return cmd
}

// packingLines says, per endpoint, whether packed calls are used.
func packingLines(rows []dispatcher.PackingStatus, packSize int) string {
	out := ""
	for _, ep := range []string{provider.EndpointAuction, provider.EndpointAuctionSold} {
		line := fmt.Sprintf("packing %s: on (up to %d ids a call)", ep, packSize)
		if packSize <= 1 {
			line = fmt.Sprintf("packing %s: off (collect.pack_size %d)", ep, packSize)
		}
		for _, r := range rows {
			if r.Endpoint == ep && !r.Enabled {
				line = fmt.Sprintf("packing %s: OFF since %s (%s); `collector packing on` after checking", ep,
					r.ChangedAt.UTC().Format(time.RFC3339), r.Reason)
			}
		}
		out += line + "\n"
	}
	return out
}
