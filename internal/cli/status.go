package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/daemon"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

func newStatusCmd(a *app) *cobra.Command {
	var output string
	var check bool
	var lim checkLimits
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the cluster at a glance: items per tier, due, overdue, lag, leases, provider, budgets, outbox, instances",
		Long: `Show the cluster at a glance. -o json prints the same as one JSON object with stable field
names (docs/operations.md).

--check exits 1 naming the first problem — for a cron alert or a probe. It checks that the
database takes writes (not read-only, not a standby, not out of space: a write that needs new
space is made and rolled back), that collections keep happening, whoever makes them (daemons or collect-due from cron): the provider
paused by a manual override, fewer live daemon instances than --min-instances (0: a cron-only
deployment needs none; set 1 where collector run is what collects), an outbox relay stopped for
good, items due with no successful collection for longer than --max-idle, more overdue items
than --max-overdue, or an unpublished outbox event older than --max-outbox-age. While the
provider itself reports MAINTENANCE, idle and overdue items are not counted; a maintenance
that has lasted longer than 6 hours is named instead.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			if output != "text" && output != "json" {
				return usageError{cmd: "collector status", err: fmt.Errorf("-o %q: allowed text, json", output)}
			}
			// A sign typo must not switch a check off (--max-idle -1s read as "not checked")
			// or make it pass whatever the cluster does.
			switch {
			case lim.maxOverdue < 0:
				return usageError{cmd: "collector status", err: fmt.Errorf("--max-overdue %d: 0 or more", lim.maxOverdue)}
			case lim.maxOutboxAge < 0:
				return usageError{cmd: "collector status", err: fmt.Errorf("--max-outbox-age %s: 0 or more", lim.maxOutboxAge)}
			case lim.maxIdle < 0:
				return usageError{cmd: "collector status", err: fmt.Errorf("--max-idle %s: 0 (not checked) or more", lim.maxIdle)}
			case lim.minInstances < 0:
				return usageError{cmd: "collector status", err: fmt.Errorf("--min-instances %d: 0 or more", lim.minInstances)}
			}
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			st, err := daemon.Status(ctx, pool, a.cfg.Provider.Name)
			if err != nil {
				return err
			}
			st.NoOutbox = !a.cfg.Outbox.Enabled
			var problems []string
			if check {
				problems = lim.problems(st)
			}
			pk, err := dispatcher.ReadPackingStatus(ctx, pool)
			if err != nil {
				return err
			}
			reads, err := a.reads(ctx)
			if err != nil {
				return err
			}
			rs := reads.RunOnce(ctx)
			if output == "json" {
				v := toStatusJSON(st)
				v.Packing = toPackingJSON(pk)
				v.Reads = toReadsJSON(rs)
				if check {
					v.Check = &checkJSON{OK: len(problems) == 0, Problems: append([]string{}, problems...)}
				}
				if err := writeStatusJSON(a, v); err != nil {
					return err
				}
			} else {
				_, learned, err := a.learnedMarket(ctx, pool)
				if err != nil {
					return err
				}
				printStatus(a, st, learned)
				a.printf("%s", packingLines(pk, a.cfg.Collect.PackSize))
				if rs.Replica {
					a.printf("reads (console item pages, API, history): from the %s; replica %s, max lag %s\n", rs, rs.Where, rs.MaxLag)
				}
			}
			if len(problems) > 0 {
				return fmt.Errorf("%w: %s", errCheckFailed, problems[0])
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&output, "output", "o", "text", "text or json (stable field names)")
	f.BoolVar(&check, "check", false, "exit 1 naming the first problem found")
	f.Int64Var(&lim.maxOverdue, "max-overdue", 0, "--check: items overdue (due > 30s, unclaimed) tolerated")
	f.DurationVar(&lim.maxOutboxAge, "max-outbox-age", 10*time.Minute, "--check: age of the oldest unpublished outbox event tolerated")
	f.DurationVar(&lim.maxIdle, "max-idle", defaultMaxIdle, "--check: how long items may be due with no successful collection anywhere (0: not checked)")
	f.IntVar(&lim.minInstances, "min-instances", 0, "--check: live daemon instances required (0 for a cron-only deployment)")
	return cmd
}

func printStatus(a *app, st daemon.ClusterStatus, learned float64) {
	now := st.DatabaseNow
	ago := func(t time.Time) string { return now.Sub(t).Round(time.Second).String() + " ago" }

	if st.WriteRefused != "" {
		a.printf("DATABASE REFUSES WRITES (%s): %s\n", st.WriteRefused, st.WriteDetail)
	}
	eff, reason, since := st.Provider.Effective()
	a.printf("provider %s: %s since %s (%s; %s)\n", st.Provider.Provider, eff, since.UTC().Format(time.RFC3339), ago(since), reason)
	if st.Provider.OverrideStatus != "" {
		a.printf("  manual override; automatic status %s (%s)\n", st.Provider.Status, st.Provider.Reason)
	}
	if st.Probe != nil && !eff.CanDispatch() {
		a.printf("  probe: %s\n", st.Probe.Describe(now))
	}
	printCooldowns(a, st.Cooldowns, now)

	a.printf("\n")
	w := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "tier\titems\tdue now\toverdue (>30s)\tdemand req/s\test. freshness\t")
	var items, due, overdue int64
	var demand float64
	var forecast []tierplan.TierForecast
	for _, t := range st.Tiers {
		d := tierplan.TierDemand(tiers.Tier(t.Tier), t.Requests)
		fresh := "-"
		if t.Forecast != nil {
			fresh = fmt.Sprintf("%.1f%%", 100*t.Forecast.Freshness)
			forecast = append(forecast, t.Forecast.TierForecast)
		}
		fmt.Fprintf(w, "%s\t%d\t%d\t%d\t%.2f\t%s\t\n", t.Tier, t.Items, t.Due, t.Overdue, d, fresh)
		items, due, overdue, demand = items+t.Items, due+t.Due, overdue+t.Overdue, demand+d
	}
	fresh := "-"
	if len(forecast) > 0 {
		_, f := tierplan.Overall(forecast)
		fresh = fmt.Sprintf("%.1f%%", 100*f)
	}
	fmt.Fprintf(w, "total\t%d\t%d\t%d\t%.2f\t%s\t\n", items, due, overdue, demand, fresh)
	_ = w.Flush()
	if !st.PlannedAt.IsZero() {
		a.printf("est. freshness: predicted by the tier plan of %s (%s), not measured: the share of time an item's stored copy matches the market, weighted by popularity\n",
			st.PlannedAt.UTC().Format(time.RFC3339), ago(st.PlannedAt))
	}
	m := a.cfg.Provider.Market
	keyBudget := budget.KeyRate(m, learned)
	if learned < 1 {
		a.printf("market key budget: %.1f req/s, the %.0f%% of the configured %.0f/s, %d/min the provider was found to allow; demand is %.0f%% of it\n",
			keyBudget, 100*learned, m.Rate, m.PerMinute, 100*ratio(demand, keyBudget))
	} else {
		a.printf("market key budget: %.1f req/s (%.0f/s, %d/min); demand is %.0f%% of it\n", keyBudget, m.Rate, m.PerMinute, 100*ratio(demand, keyBudget))
	}
	if demand > keyBudget {
		a.printf("WARNING: the tiers ask for %.1f req/s, more than the budget's %.1f; COLD items wait first (collector plan shows a fix)\n", demand, keyBudget)
	}

	a.printf("\nleases held: %d\n", st.Leased)
	if st.LagN > 0 {
		a.printf("due → claim lag, last %s: p50 %s, p99 %s (%d items)\n", daemon.LagWindow,
			st.LagP50.Round(time.Millisecond), st.LagP99.Round(time.Millisecond), st.LagN)
	} else {
		a.printf("due → claim lag, last %s: no claims\n", daemon.LagWindow)
	}
	printActivity(a, st.Activity, now)
	a.printf("%s", st.Events())
	// With events off, rows left from before still matter: nothing will publish them.
	if !st.NoOutbox || st.OutboxBacklog+st.OutboxFailed > 0 {
		oldest := ""
		if st.OutboxBacklog > 0 {
			oldest = fmt.Sprintf(" (oldest %s)", st.OutboxOldest.Round(time.Second))
		}
		a.printf("; outbox: %d unpublished%s, %d failed", st.OutboxBacklog, oldest, st.OutboxFailed)
	}
	a.printf("\n")
	a.printf("history: %s", history.SizeText(st.History.Bytes()))
	for _, t := range st.History.Tables {
		a.printf("; %s %s (~%d rows)", t.Table, history.SizeText(t.Bytes), t.Rows)
	}
	if !st.History.Since.IsZero() {
		a.printf("; raw snapshots kept from %s (%.1f days)", st.History.Since.UTC().Format("2006-01-02"), st.DatabaseNow.Sub(st.History.Since).Hours()/24)
	}
	a.printf("\n")
	for _, stop := range st.Relay.Stops {
		a.printf("relay: STOPPED %s at %s: %s\n", stop.Owner, stop.StoppedAt.Format(time.RFC3339), stop.Reason)
	}
	if st.Relay.LanesHeld > 0 {
		a.printf("relay: %d/%d lanes held by %s\n", st.Relay.LanesHeld, outbox.Lanes, strings.Join(st.Relay.Owners, ", "))
	} else {
		a.printf("relay: none running (no lane leased)\n")
	}
	if st.Relay.Cooling > 0 {
		a.printf("relay: %d lanes given back after a failed send, free once it can no longer land\n", st.Relay.Cooling)
	}

	for _, b := range st.Budgets {
		cool := ""
		if b.CooldownUntil != nil {
			cool = fmt.Sprintf(", cooling down for %s", b.CooldownUntil.Sub(now).Round(100*time.Millisecond))
		}
		if b.LearnedRate != nil {
			cool += fmt.Sprintf(", learned provider limit %.1f/s", *b.LearnedRate)
			if b.LastCut != nil {
				cool += fmt.Sprintf(" (last cut %s ago)", now.Sub(*b.LastCut).Round(time.Second))
			}
		}
		if b.SlowStartRate != nil {
			cool += fmt.Sprintf(", slow start at %.1f/s (no provider limit learned yet)", *b.SlowStartRate)
		}
		a.printf("budget %s: %d instances sharing %.1f/s, %d requests sent%s\n", b.KeyLabel, b.Instances, b.SharePerSec, b.Used, cool)
	}
	a.printf("\nlive instances: %d\n", len(st.Instances))
	if len(st.Instances) > 0 {
		w = tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
		fmt.Fprintln(w, "  instance\thost\tpid\tkey\tup\theartbeat\tshare/s\tsent")
		for _, i := range st.Instances {
			fmt.Fprintf(w, "  %s\t%s\t%d\t%s\t%s\t%s\t%.1f\t%d\n", i.Instance, i.Host, i.PID, i.KeyLabel,
				now.Sub(i.Started).Round(time.Second), ago(i.Heartbeat), i.Share, i.Used)
		}
		_ = w.Flush()
	}
}

// printActivity says whether collections keep happening, whoever makes them.
func printActivity(a *app, act catalog.Activity, now time.Time) {
	last := "none yet"
	if !act.LastCollected.IsZero() {
		last = now.Sub(act.LastCollected).Round(time.Second).String() + " ago"
	}
	waiting := "nothing waiting"
	if !act.OldestDue.IsZero() {
		waiting = "the oldest due item waits for " + max(now.Sub(act.OldestDue), 0).Round(time.Second).String()
	}
	a.printf("last successful collection: %s; %s\n", last, waiting)
}

// printCooldowns says which keys are cooling down, until when and why.
func printCooldowns(a *app, cds []budget.Cooldown, now time.Time) {
	for _, c := range cds {
		a.printf("  key %s cooling down until %s (%s left): %s\n", c.KeyLabel, c.Until.UTC().Format(time.RFC3339),
			max(c.Until.Sub(now), 0).Round(time.Second), c.Reason)
	}
}
