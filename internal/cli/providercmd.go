package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
)

func newProviderCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "provider", Short: "Show or override the provider's health status"}
	status := &cobra.Command{
		Use:   "status",
		Short: "Show the provider status that gates collection",
		Args:  cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			row, err := provider.ReadStatus(ctx, pool, a.cfg.Provider.Name)
			if err != nil {
				return err
			}
			st, reason, since := row.Effective()
			a.printf("provider %s: %s since %s (%s)\n", row.Provider, st, since.UTC().Format(time.RFC3339), reason)
			if row.OverrideStatus != "" {
				until := "cleared"
				if row.OverrideUntil != nil {
					until = row.OverrideUntil.UTC().Format(time.RFC3339)
				}
				a.printf("  manual override active until %s; automatic status: %s (%s)\n", until, row.Status, row.Reason)
			}
			if st.CanDispatch() {
				a.printf("  collection: dispatching\n")
			} else {
				a.printf("  collection: paused\n")
			}
			cds, err := budget.ActiveCooldowns(ctx, pool)
			if err != nil {
				return err
			}
			// The cool-downs end by the database's clock, which this host's may be minutes from.
			now, err := store.Now(ctx, pool)
			if err != nil {
				return err
			}
			printCooldowns(a, cds, now)
			return nil
		}),
	}
	var reason string
	var forDur time.Duration
	set := &cobra.Command{
		Use:   "set STATUS|auto",
		Short: "Override the provider status (HEALTHY, DEGRADED, MAINTENANCE, RECOVERING), or auto to clear the override",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return fmt.Errorf("give one STATUS (HEALTHY, DEGRADED, MAINTENANCE, RECOVERING) or auto, got %d arguments", len(args))
			}
			// Under a second would round to no end at all (the override is stored in whole
			// milliseconds, and 0 means "until cleared").
			if cmd.Flags().Changed("for") && forDur < time.Second {
				return fmt.Errorf("--for %s: must be at least 1s, such as 4h (leave --for out to hold the override until `provider set auto`)", forDur)
			}
			return nil
		},
		RunE: a.runArgs(func(ctx context.Context, args []string) error {
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			if args[0] == "auto" {
				if err := provider.ClearOverride(ctx, pool, a.cfg.Provider.Name); err != nil {
					return err
				}
				a.printf("provider %s: manual override cleared\n", a.cfg.Provider.Name)
				return nil
			}
			st, err := provider.ParseStatus(args[0])
			if err != nil {
				return err
			}
			if reason == "" {
				return fmt.Errorf("--reason is required: say why the status is overridden")
			}
			if err := provider.SetOverride(ctx, pool, a.cfg.Provider.Name, st, reason, forDur); err != nil {
				return err
			}
			a.printf("provider %s: %s (manual override: %s)\n", a.cfg.Provider.Name, st, reason)
			return nil
		}),
	}
	set.Flags().StringVar(&reason, "reason", "", "why (required)")
	set.Flags().DurationVar(&forDur, "for", 0, "let the override expire after this `DURATION`, at least 1s (left out: until provider set auto)")
	cmd.AddCommand(status, set)
	return cmd
}
