package cli

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/devdata"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/tiers"
)

// exitTargetsFailed is the exit code when some import targets imported nothing for what they
// say (no match, several): running the import again cannot help. A search that failed for a
// temporary reason exits 1 instead.
const exitTargetsFailed = 2

// importItems resolves the targets file with the item workload's key and budget and
// upserts the matches; it returns exit code 2 when targets failed, unless allowMissing.
func (a *app) importItems(ctx context.Context, targetsFlag string, allowMissing bool) error {
	path := a.cfg.Catalog.Targets
	if targetsFlag != "" {
		path = targetsFlag
	}
	targets, err := catalog.LoadTargets(path)
	if err != nil {
		return err
	}
	client, err := provider.FromConfig(a.cfg.Provider, provider.WorkloadItem, a.log)
	if err != nil {
		return err
	}
	pool, err := a.db(ctx)
	if err != nil {
		return err
	}
	def, _ := tiers.Parse(a.cfg.Catalog.DefaultTier)
	// A line every 5 % of a long import; short ones just print the result.
	step := max(1, (len(targets)+19)/20)
	rep, err := catalog.Import(ctx, pool, client, targets, catalog.ImportOptions{
		DefaultTier: def,
		Progress: func(done, total, failed int) {
			if total >= 40 && (done%step == 0 || done == total) {
				a.log.Info("import-items: targets resolved", zap.Int("done", done), zap.Int("total", total), zap.Int("failed", failed))
			}
		},
	})
	if err != nil {
		return err
	}
	a.printf("import-items %s: %d targets → %d items: %d new, %d renamed, %d unchanged; %d targets failed\n",
		path, rep.Targets, rep.Matched, rep.Inserted, rep.Renamed, rep.Unchanged, len(rep.Failures))
	for _, w := range rep.Warnings {
		a.log.Warn("import-items: " + w.String())
	}
	if rep.Inserted > 0 && a.cfg.Catalog.Policy == config.PolicyBudget {
		// New items add demand: plan again now rather than at the daemon's next recalculation.
		res, err := a.recalculateOn(ctx, pool)
		if err != nil {
			// The items are stored; say which targets failed before the re-plan's error.
			if ferr := rep.Err(); ferr != nil {
				a.log.Error("import-items: targets failed", zap.Error(ferr))
			}
			return fmt.Errorf("items imported, but the re-plan failed (run `collector recalculate-popularity`): %w", err)
		}
		if res.Skipped {
			// The other process may have read its signals before these items were committed.
			a.log.Warn("import-items: re-plan skipped, another process recalculated at the same moment; " +
				"the new items are collected from now on and planned at the next recalculation (or run `collector recalculate-popularity`)")
		} else if res.Plan != nil {
			a.printf("re-planned: %d tier moves; demand %.1f of %.1f requests/s\n", len(res.Changes), res.Plan.DemandAfter, res.Plan.Limit)
		}
	}
	if err := rep.Err(); err != nil {
		if n := rep.Temporary(); n > 0 {
			// Not "missing": the provider did not answer. Exit 1, which a scheduler retries;
			// --allow-missing does not hide it, or those targets would silently stay untracked.
			return exitError{1, fmt.Errorf("%w\n(%d of them failed for a temporary reason: run the import again, it changes nothing twice)", err, n)}
		}
		if allowMissing {
			a.log.Warn("import-items: targets failed (--allow-missing)", zap.Error(err))
			return nil
		}
		return exitError{exitTargetsFailed, fmt.Errorf("%w\n(--allow-missing makes this a warning)", err)}
	}
	return nil
}

func newImportItemsCmd(a *app) *cobra.Command {
	var targets string
	var allowMissing bool
	cmd := &cobra.Command{
		Use:   "import-items",
		Short: "Resolve the names in the targets file through /df/items and track the items found",
		Long: `import-items reads the targets file (catalog.targets, default configs/import-targets.yaml),
resolves each name through /df/items with the item workload's key and budget, and upserts the items
into tracked_items. New items start at their target's tier and are due at once; items already
tracked keep their tier and schedule (a renamed item keeps its id and takes the new name), so running
it twice changes nothing. Targets that match nothing, or several items when one was wanted, are
listed by file line; the rest are still imported, and the exit code is 2 unless --allow-missing.
A search that failed for a temporary reason (a timeout, a 5xx, the key's rate limit) makes it exit
1, with or without --allow-missing: running it again may import that target.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error { return a.importItems(ctx, targets, allowMissing) }),
	}
	cmd.Flags().StringVar(&targets, "targets", "", "read the targets from `FILE` (catalog.targets)")
	cmd.Flags().Lookup("targets").DefValue = config.Default().Catalog.Targets
	cmd.Flags().BoolVar(&allowMissing, "allow-missing", false, "exit 0 even when some targets imported nothing")
	return cmd
}

func newSeedRealCmd(a *app) *cobra.Command {
	var targets string
	var allowMissing bool
	cmd := &cobra.Command{
		Use:   "seed:real",
		Short: "import-items, collect-due, relay-outbox (when Kafka is configured), recalculate-popularity against the real provider",
		Long: `seed:real fills the database from the real provider: import-items, then collect-due, then
relay-outbox when Kafka is configured, then recalculate-popularity. It needs both
NEOPLE_ITEM_API_KEY and NEOPLE_MARKET_API_KEY and fails at once, naming what is missing, without them;
it never falls back to synthetic data (that is seed:synthetic).`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			steps := devdata.RealSteps{
				Import:      func(ctx context.Context) error { return a.importItems(ctx, targets, allowMissing) },
				Recalculate: func(ctx context.Context) error { return a.recalculate(ctx) },
				Log:         func(msg string) { a.log.Info(msg) },
			}
			steps.Collect = a.collectOncePass
			if len(a.cfg.Kafka.Brokers) > 0 {
				steps.Relay = a.relayOncePass
			}
			err := devdata.SeedReal(ctx, a.cfg.Provider, steps)
			// An import that lost some targets keeps its exit code through the later steps.
			var ee exitError
			if errors.Is(err, catalog.ErrTargetsFailed) && !errors.As(err, &ee) {
				return exitError{exitTargetsFailed, err}
			}
			return err
		}),
	}
	cmd.Flags().StringVar(&targets, "targets", "", "read the targets from `FILE` (catalog.targets)")
	cmd.Flags().Lookup("targets").DefValue = config.Default().Catalog.Targets
	cmd.Flags().BoolVar(&allowMissing, "allow-missing", false, "exit 0 even when some targets imported nothing")
	return cmd
}

func newSeedSyntheticCmd(a *app) *cobra.Command {
	var opt devdata.SyntheticOptions
	cmd := &cobra.Command{
		Use:   "seed:synthetic",
		Short: "Write synthetic items (ids seed-NNNN) with a plausible price history, for offline screens and tests",
		Long: `seed:synthetic writes --items fixture items with ids seed-0001, seed-0002, … and --days of hourly
snapshots and sales, in batches that each commit (progress goes to stderr; an interrupted run
keeps what it wrote). Running it again adds only the hours that passed since and completes an
interrupted run. Fixtures are never
scheduled for collection, are hidden from ranking read paths, and purge:synthetic removes them.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			if opt.Items < 1 || opt.Items > devdata.MaxSyntheticItems {
				return usageError{cmd: "collector seed:synthetic", err: fmt.Errorf("--items %d: must be between 1 and %d", opt.Items, devdata.MaxSyntheticItems)}
			}
			if opt.Days < 1 || opt.Days > devdata.MaxSyntheticDays {
				return usageError{cmd: "collector seed:synthetic", err: fmt.Errorf("--days %d: must be between 1 and %d", opt.Days, devdata.MaxSyntheticDays)}
			}
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			if opt.Policy, err = a.policy(ctx, pool, budget.ConfiguredPlanLimit(a.cfg)); err != nil {
				return err
			}
			// A line every 5 % of a long run; each batch is committed when it is reported.
			step := max(1, opt.Items/20)
			next := step
			opt.Progress = func(done, total int) {
				if total >= 1000 && (done >= next || done == total) {
					a.log.Info("seed:synthetic: items written", zap.Int("done", done), zap.Int("total", total))
					next = done + step
				}
			}
			res, err := devdata.SeedSynthetic(ctx, pool, opt)
			if err != nil {
				return err
			}
			a.printf("seed:synthetic: %d items (%d new), %d snapshots, %d sales, %d interest events inserted\n",
				res.Items, res.Inserted, res.Snapshots, res.Sales, res.Interest)
			return nil
		}),
	}
	cmd.Flags().IntVar(&opt.Items, "items", 20, fmt.Sprintf("number of synthetic items (at most %d)", devdata.MaxSyntheticItems))
	cmd.Flags().IntVar(&opt.Days, "days", 7, fmt.Sprintf("days of hourly history per item (1 to %d)", devdata.MaxSyntheticDays))
	return cmd
}

func newPurgeSyntheticCmd(a *app) *cobra.Command {
	var batch int
	cmd := &cobra.Command{
		Use:   "purge:synthetic",
		Short: "Delete every row of every synthetic item (seed-, integration-item-) from every table",
		Args:  cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			if batch < 1 {
				return usageError{"collector purge:synthetic", fmt.Errorf("--batch-size %d: at least 1", batch)}
			}
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			res, err := devdata.PurgeSynthetic(ctx, pool, batch)
			for _, c := range res {
				a.printf("purge:synthetic: %-18s %d rows deleted\n", c.Table, c.Deleted)
			}
			if err != nil {
				return err
			}
			a.printf("purge:synthetic: %d rows deleted in total\n", res.Total())
			return nil
		}),
	}
	cmd.Flags().IntVar(&batch, "batch-size", 5000, "rows deleted per statement")
	return cmd
}

// policy is the tier policy as configured, planning within limit requests per second
// (budget.PlanLimit) and counting what collections cost with the cluster's packing as it is now.
func (a *app) policy(ctx context.Context, pool *pgxpool.Pool, limit float64) (catalog.Policy, error) {
	m, err := dispatcher.PackingModelNow(ctx, pool, dispatcher.FromConfig(a.cfg), a.cfg.Provider.AuctionLimit)
	return catalog.PolicyFromConfig(a.cfg.Catalog, limit, m), err
}

// recalculateOn recalculates popularity and applies tiers under the configured policy.
func (a *app) recalculateOn(ctx context.Context, pool *pgxpool.Pool) (catalog.Result, error) {
	p, err := a.policy(ctx, pool, budget.ConfiguredPlanLimit(a.cfg))
	if err != nil {
		return catalog.Result{}, err
	}
	return catalog.RecalculatePopularity(ctx, pool, p)
}

func (a *app) recalculate(ctx context.Context) error {
	pool, err := a.db(ctx)
	if err != nil {
		return err
	}
	res, err := a.recalculateOn(ctx, pool)
	if err != nil {
		return err
	}
	if res.Skipped {
		a.printf("recalculate-popularity: skipped, another process is recalculating right now\n")
		return nil
	}
	a.printf("recalculate-popularity: %d items scored, %d scores changed; %d promoted (%d reactivated), %d demoted (%d to DORMANT), %d demotions held, %d conflicts\n",
		res.Scored, res.ScoreChanged, res.Promoted, res.Reactivated, res.Demoted, res.Dormant, res.Held, res.Conflicts)
	for _, c := range res.Changes {
		a.log.Info("tier changed", zap.String("item_id", c.ItemID), zap.String("from", string(c.From)),
			zap.String("to", string(c.To)), zap.String("reason", c.Reason), zap.Timep("next_collect_at", c.NextCollectAt))
	}
	return nil
}

func newRecalculatePopularityCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "recalculate-popularity",
		Short: "Score every item from sales, listing churn and interest, and move it to the tier its score earns",
		Args:  cobra.NoArgs,
		RunE:  a.run(a.recalculate),
	}
}

func newTouchCmd(a *app) *cobra.Command {
	var source string
	cmd := &cobra.Command{
		Use:   "touch ITEM_ID",
		Short: "Record interest in an item: a DORMANT or COLD_10M item is promoted and due now",
		Args:  oneItemID,
		RunE: a.runArgs(func(ctx context.Context, args []string) error {
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			to, _ := tiers.Parse(a.cfg.Catalog.ReactivateTier)
			r, err := catalog.RecordInterest(ctx, pool, catalog.InterestEvent{ItemID: args[0], Kind: catalog.KindTouch, Source: source}, to)
			if err != nil {
				return err
			}
			if r.Reactivated {
				a.printf("item %s: reactivated %s → %s, next collection at %s\n", args[0], r.From, r.To, fmtTime(r.NextCollectAt))
			} else {
				a.printf("item %s: interest recorded; it is %s, next collection at %s\n", args[0], r.From, fmtTime(r.NextCollectAt))
			}
			return nil
		}),
	}
	cmd.Flags().StringVar(&source, "source", "cli", "who is touching the item (item_interest.source)")
	return cmd
}

func newItemsCmd(a *app) *cobra.Command {
	var q catalog.ItemsQuery
	var tier string
	cmd := &cobra.Command{
		Use:   "items [ITEM_ID]",
		Short: "List tracked items, most popular first: tier, score, schedule, estimated change and sales rates, and when and why the tier last changed",
		Long: `items lists tracked items, most popular first. With ITEM_ID it shows that one item in full,
including what collection has learnt: observed collections and changes, the estimated change rate
(Cho & Garcia-Molina), the sales rate and lost-sale gaps, and how its last collection ended
(the failures in a row, the last error).`,
		Args: itemIDArgs(cobra.MaximumNArgs(1)),
		RunE: a.runArgs(func(ctx context.Context, args []string) error {
			if q.Limit < 0 {
				return usageError{"collector items", fmt.Errorf("--limit %d: 0 (all) or more", q.Limit)}
			}
			if tier != "" {
				t, err := tiers.Parse(tier)
				if err != nil {
					return usageError{"collector items", fmt.Errorf("--tier: %w", err)}
				}
				q.Tier = t
			}
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				q = catalog.ItemsQuery{ItemID: args[0], IncludeSynthetic: true}
			}
			rows, err := catalog.ListItems(ctx, pool, q)
			if err != nil {
				return err
			}
			if len(args) == 1 {
				if len(rows) == 0 {
					return fmt.Errorf("item %s is not tracked", args[0])
				}
				return printItem(a, rows[0])
			}
			var tb table
			tb.add("ITEM_ID", "NAME", "TIER", "PIN", "SCORE", "CHANGES/H", "SALES/H", "GAPS", "NEXT_COLLECT_AT", "LAST_COLLECTED_AT", "TIER_CHANGED_AT", "TIER_REASON")
			for _, r := range rows {
				// The score as stored (3 decimals), so it reads the same as in tier_reason.
				tb.add(r.ItemID, r.Name, string(r.Tier), orDash(string(r.PinnedTier)),
					strconv.FormatFloat(r.Score, 'f', -1, 64), fmtRate(r.ChangesPerHour), fmtRate(r.SalesPerHour), strconv.FormatInt(r.SalesGaps, 10),
					fmtTime(r.NextCollectAt), fmtTime(r.LastCollectedAt), fmtTime(r.TierChangedAt), r.TierReason)
			}
			return tb.write(a.stdout)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&tier, "tier", "", "only this tier ("+tiers.Names()+")")
	f.IntVar(&q.Limit, "limit", 100, "at most this many rows (0 = all)")
	f.BoolVar(&q.IncludeSynthetic, "include-synthetic", false, "also list synthetic fixtures (seed-, integration-item-)")
	cmd.AddCommand(newPinCmd(a), newUnpinCmd(a), newUntrackCmd(a))
	return cmd
}

// printItem shows one item in full, one field a line.
func printItem(a *app, r catalog.ItemRow) error {
	tw := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
	o := r.Observed
	for _, kv := range [][2]string{
		{"item_id", r.ItemID}, {"name", r.Name}, {"tier", string(r.Tier)}, {"pinned_tier", orDash(string(r.PinnedTier))},
		{"score", strconv.FormatFloat(r.Score, 'f', -1, 64)}, {"tier_changed_at", fmtTime(r.TierChangedAt)},
		{"tier_reason", orDash(r.TierReason)}, {"next_collect_at", fmtTime(r.NextCollectAt)},
		{"last_collected_at", fmtTime(r.LastCollectedAt)},
		{"observed_collections", fmt.Sprintf("%.1f (decayed)", o.Accesses)},
		{"observed_changes", fmt.Sprintf("%.1f over %.0f s (decayed)", o.Changes, o.ChangedSeconds+o.UnchangedSeconds)},
		{"changes_per_hour", fmtRate(r.ChangesPerHour) + " (estimated)"},
		{"sales_per_hour", fmtRate(r.SalesPerHour) + " (observed)"},
		{"sales_gaps", strconv.FormatInt(r.SalesGaps, 10)},
		{"collection_cost", fmtRequests(r.Requests)},
		{"last_outcome", lastOutcome(r)},
		{"last_error", orDash(r.LastError)},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], strings.ReplaceAll(kv[1], "\t", " "))
	}
	return tw.Flush()
}

// lastOutcome is how an item's last collection ended, with the failures in a row up to it.
func lastOutcome(r catalog.ItemRow) string {
	switch {
	case r.LastOutcome == "":
		return "- (never collected)"
	case r.FailureStreak > 0:
		return fmt.Sprintf("%s (%d failed in a row)", r.LastOutcome, r.FailureStreak)
	}
	return r.LastOutcome
}

func fmtRequests(r float64) string {
	if r < packing.Alone {
		return strconv.FormatFloat(r, 'f', 2, 64) + " requests (shares packed calls)"
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + " requests (its own calls)"
}

func fmtRate(v *float64) string {
	if v == nil {
		return "-"
	}
	return strconv.FormatFloat(*v, 'f', 2, 64)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339)
}
