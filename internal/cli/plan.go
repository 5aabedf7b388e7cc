package cli

import (
	"context"
	"fmt"
	"math"
	"sort"
	"text/tabwriter"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

func newPlanCmd(a *app) *cobra.Command {
	var (
		perSecond float64
		apply     bool
		show      int
	)
	cmd := &cobra.Command{
		Use:   "plan [--budget R] [--apply]",
		Short: "Show what the budget policy would do: today's demand against the budget, the tier moves, predicted freshness before and after",
		Long: `plan runs the budget policy (catalog.policy: budget) over every tracked item and prints, without
changing anything, the request demand of today's tiers against the market key's budget (as the plan receives it:
less daemon.budget.headroom and the plan's reserve, budget.PlanReserve), the tier moves the policy would make, and the predicted
popularity-weighted freshness before and after. It plans, as the daemon does, within
provider.market.rate / per_minute scaled down to what the adaptive budget learned the provider
allows (budget_rates); --budget R plans for R requests per second instead. --apply makes the moves (as recalculate-popularity does
under the budget policy).`,
		Example: `  collector plan
  collector plan --budget 100
  collector plan --apply`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := cobra.NoArgs(cmd, args); err != nil {
				return err
			}
			if cmd.Flags().Changed("budget") && !(perSecond > 0 && !math.IsInf(perSecond, 1)) {
				return fmt.Errorf("--budget %v: want a positive, finite number of requests per second (leave --budget out to plan for provider.market.rate)", perSecond)
			}
			return nil
		},
		RunE: a.run(func(ctx context.Context) error {
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			market := config.WorkloadLimits{Rate: perSecond, PerMinute: int(math.Round(perSecond * 60))}
			learned := 1.0
			if perSecond == 0 {
				// Plan as the daemon does: within what the provider was found to allow.
				if market, learned, err = a.learnedMarket(ctx, pool); err != nil {
					return err
				}
			}
			p, err := a.policy(ctx, pool, budget.PlanLimit(market, a.cfg.Daemon.Budget.Headroom, learned))
			if err != nil {
				return err
			}
			p.Mode = config.PolicyBudget
			if learned < 1 {
				a.printf("learned: the provider allows %.0f%% of the configured budget (daemon.budget.adaptive); planning for that\n", 100*learned)
			}
			var res catalog.Result
			if apply {
				res, err = catalog.RecalculatePopularity(ctx, pool, p)
			} else {
				res, err = catalog.PlanTiers(ctx, pool, p)
			}
			if err != nil {
				return err
			}
			if res.Skipped {
				return fmt.Errorf("plan: another process is recalculating right now; try again")
			}
			printPlan(a, market, learned, res, apply, show)
			return nil
		}),
	}
	f := cmd.Flags()
	f.Float64Var(&perSecond, "budget", 0, "plan for this many requests per second (default: provider.market.rate and per_minute)")
	f.BoolVar(&apply, "apply", false, "make the tier moves")
	f.IntVar(&show, "show", 20, "list at most this many moves item by item")
	return cmd
}

// printPlan says what a plan within share of market did.
func printPlan(a *app, market config.WorkloadLimits, share float64, res catalog.Result, applied bool, show int) {
	s := res.Plan
	a.printf("budget: %.0f requests/s, %.0f/min, less daemon.budget.headroom %.0f%% and the plan's reserve %.0f%% → %.1f requests/s to plan with\n",
		market.Rate*share, float64(market.PerMinute)*share, a.cfg.Daemon.Budget.Headroom*100, budget.PlanReserve*100, s.Limit)
	a.printf("cost: %.2f requests per collection on average; %d of %d items share packed calls at their planned tier, the others cost 2"+
		" (a running daemon also divides the budget by what its calls really cost against this: collector_collection_cost_ratio)\n",
		s.Requests, s.Packed, s.Items)
	a.printf("demand of today's tiers: %.1f requests/s (%.2f× the budget)\n", s.DemandBefore, ratio(s.DemandBefore, s.Limit))
	if s.DemandBefore > s.Limit {
		a.printf("WARNING: today's tiers ask for more than the budget; COLD items wait first\n")
	}
	printPlannedDemand(a, s)
	if s.SalesUnsafe > 0 {
		a.printf("WARNING: %d items sell too fast for the budget to collect them before sales leave the 100-row window\n", s.SalesUnsafe)
	}
	a.printf("predicted weighted freshness: %.3f → %.3f over %d items\n", s.FreshnessBefore, s.FreshnessAfter, s.Items)

	moves := map[[2]tiers.Tier]int{}
	for _, c := range res.Changes {
		moves[[2]tiers.Tier{c.From, c.To}]++
	}
	keys := make([][2]tiers.Tier, 0, len(moves))
	for k := range moves {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i][0] != keys[j][0] {
			return keys[i][0].Rank() < keys[j][0].Rank()
		}
		return keys[i][1].Rank() < keys[j][1].Rank()
	})
	a.printf("tier moves: %d\n", len(res.Changes))
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	for _, k := range keys {
		fmt.Fprintf(tw, "  %s → %s\t%d\n", k[0], k[1], moves[k])
	}
	for i, c := range res.Changes {
		if i == show {
			fmt.Fprintf(tw, "  …\t%d more\n", len(res.Changes)-show)
			break
		}
		fmt.Fprintf(tw, "  %s\t%s → %s\t%s\n", c.ItemID, c.From, c.To, c.Reason)
	}
	_ = tw.Flush()
	if applied {
		a.printf("applied: %d promoted, %d demoted, %d conflicts\n", res.Promoted, res.Demoted, res.Conflicts)
	} else {
		a.printf("nothing changed; run with --apply to make these moves\n")
	}
}

// printPlannedDemand breaks the planned demand down by what the plan could not move or only
// guessed at, and says what the operator can do about each part that keeps it over the budget.
func printPlannedDemand(a *app, s *tierplan.PlanSummary) {
	a.printf("planned demand: %.1f requests/s (%.2f× the budget)\n", s.DemandAfter, ratio(s.DemandAfter, s.Limit))
	if s.Pinned > 0 {
		a.printf("  pinned: %d items, %.1f requests/s (collector items unpin ITEM_ID hands one back to the plan)\n", s.Pinned, s.PinnedDemand)
	}
	if s.Reactivated > 0 {
		a.printf("  reactivated by interest events: %d items, %.1f requests/s, kept at their tier until the next plan\n", s.Reactivated, s.ReactivatedDemand)
	}
	if s.Unobserved > 0 {
		prior := fmt.Sprintf("the median of %d observed items", s.Prior.Observed)
		if s.Prior.Observed == 0 {
			prior = "the defaults, as no item is observed yet"
		}
		a.printf("  not yet observed (fewer than two collections): %d items, %.1f requests/s, planned with %.2f changes/h and %.2f sales/h (%s); they settle on their own rates as they are collected\n",
			s.Unobserved, s.UnobservedDemand, s.Prior.ChangeRate*3600, s.Prior.SalesRate*3600, prior)
	}
	switch {
	case s.PinsExceed:
		a.printf("WARNING: pinned items alone ask for %.1f requests/s, more than the budget's %.1f; unpin some (collector items unpin ITEM_ID) or raise the budget\n",
			s.PinnedDemand, s.Limit)
	case s.DemandAfter > s.Limit*(1+1e-9):
		do := "raise the budget (provider.market.rate, per_minute)"
		if s.Pinned > 0 {
			do += " or unpin items (collector items unpin ITEM_ID)"
		}
		if s.Reactivated > 0 {
			do += "; reactivated items rejoin the plan at the next one"
		}
		a.printf("WARNING: even with every item that can move at its cheapest tier the plan asks for %.1f requests/s, more than the budget's %.1f; %s\n",
			s.MinDemand, s.Limit, do)
	}
}

func ratio(a, b float64) float64 {
	if b <= 0 {
		return 0
	}
	return a / b
}

func newPinCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "pin ITEM_ID TIER",
		Short: "Fix an item's tier: recalculation leaves it there and the budget policy plans around it",
		Args: func(cmd *cobra.Command, args []string) error {
			if err := itemIDArgs(cobra.ExactArgs(2))(cmd, args); err != nil {
				return err
			}
			t, err := tiers.Parse(args[1])
			if _, scheduled := t.Interval(); err != nil || !scheduled {
				return fmt.Errorf("pin item %s: tier %q cannot be pinned (allowed: %s; DORMANT follows sales and interest)", args[0], args[1], tiers.ScheduledNames())
			}
			return nil
		},
		RunE: a.runArgs(func(ctx context.Context, args []string) error {
			t, _ := tiers.Parse(args[1])
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			c, err := catalog.PinItem(ctx, pool, args[0], t)
			if err != nil {
				return err
			}
			a.printf("item %s: pinned to %s (was %s), next collection at %s\n", c.ItemID, c.To, c.From, fmtTime(c.NextCollectAt))
			return nil
		}),
	}
}

func newUnpinCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "unpin ITEM_ID",
		Short: "Hand an item back to the tier policy (its tier stays until the next recalculation)",
		Args:  itemIDArgs(cobra.ExactArgs(1)),
		RunE: a.runArgs(func(ctx context.Context, args []string) error {
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			if err := catalog.UnpinItem(ctx, pool, args[0]); err != nil {
				return err
			}
			a.printf("item %s: unpinned\n", args[0])
			return nil
		}),
	}
}

func newUntrackCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "untrack ITEM_ID",
		Short: "Stop tracking an item: never collected again, no longer listed by the read API; its history stays until retention drops it",
		Long: `untrack stops tracking an item. Removing it from the targets file does not: import-items only
adds and updates. Its row goes, with its tier, pin and estimates; its snapshots, sales and candles
stay in the database and day exports until retention drops them (collector history, the console
and the API no longer show them), and import-items tracks it again as a new item.`,
		Args: itemIDArgs(cobra.ExactArgs(1)),
		RunE: a.runArgs(func(ctx context.Context, args []string) error {
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			if err := catalog.UntrackItem(ctx, pool, args[0]); err != nil {
				return err
			}
			a.printf("item %s: no longer tracked (its history stays until retention drops it)\n", args[0])
			return nil
		}),
	}
}

// learnedMarket is the market key's configured budget and the share of it the adaptive budget
// learned the provider allows (budget_rates): the daemon plans within that share of it.
func (a *app) learnedMarket(ctx context.Context, pool *pgxpool.Pool) (config.WorkloadLimits, float64, error) {
	m := a.cfg.Provider.Market
	if !a.cfg.Daemon.Budget.Enabled {
		return m, 1, nil
	}
	f, err := budget.ReadLearnedShare(ctx, pool, budget.ConfigFor(a.cfg.Daemon.Budget, m, marketKeyLabel(a), ""))
	if err != nil {
		return m, 1, err
	}
	return m, f, nil
}
