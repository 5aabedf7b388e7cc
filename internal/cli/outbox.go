package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/retention"
)

func newOutboxCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "outbox",
		Short: "Inspect the outbox: list pending or failed events, retry failed ones, prune published ones",
	}
	cmd.AddCommand(newOutboxListCmd(a), newOutboxRetryCmd(a), newOutboxPruneCmd(a))
	return cmd
}

func newOutboxListCmd(a *app) *cobra.Command {
	var opts outbox.ListOptions
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List events not yet published (pending, then failed), oldest first",
		Args:  cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			if opts.Limit < 1 {
				return usageError{"collector outbox list", fmt.Errorf("--limit %d: at least 1", opts.Limit)}
			}
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			b, err := outbox.ReadBacklog(ctx, pool, true)
			if err != nil {
				return err
			}
			rows, err := outbox.List(ctx, pool, opts)
			if err != nil {
				return err
			}
			lag := ""
			if b.Pending > 0 {
				lag = fmt.Sprintf(" (oldest %s ago)", b.Oldest.Round(time.Second))
			}
			a.printf("pending %d%s, failed %d, published (not yet pruned) %d\n",
				b.Pending, lag, b.Failed, b.Published)
			if len(rows) == 0 {
				return nil
			}
			w := tabwriter.NewWriter(a.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tSTATE\tITEM\tCREATED\tFAILED_ATTEMPTS\tEVENT_ID\tLAST_ERROR")
			for _, r := range rows {
				state := "pending"
				if r.FailedAt != nil {
					state = "failed"
				}
				lastErr := ""
				if r.LastError != nil {
					lastErr = clipLine(*r.LastError, 120)
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%d\t%s\t%s\n", r.ID, state, r.ItemID,
					r.CreatedAt.UTC().Format(time.RFC3339), r.Attempts, r.EventID, lastErr)
			}
			return w.Flush()
		}),
	}
	cmd.Flags().BoolVar(&opts.FailedOnly, "failed", false, "only events the broker rejected")
	cmd.Flags().IntVar(&opts.Limit, "limit", 100, "at most this many rows")
	return cmd
}

func newOutboxRetryCmd(a *app) *cobra.Command {
	var ids []int64
	var all bool
	cmd := &cobra.Command{
		Use:   "retry (--id N ... | --all)",
		Short: "Put failed events back in line for the relay",
		Long: `retry clears the failed mark so the relay publishes the events again. They keep their
outbox id, so they are published after newer events of the same item that went out meanwhile.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			if all == (len(ids) > 0) {
				return usageError{cmd: "collector outbox retry", err: errors.New("give either --id (one or more) or --all")}
			}
			for _, id := range ids {
				if id <= 0 {
					return usageError{cmd: "collector outbox retry", err: fmt.Errorf("--id %d: outbox ids are positive (collector outbox list shows them)", id)}
				}
			}
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			n, err := outbox.RetryFailed(ctx, pool, ids) // no ids: --all
			if err != nil {
				return err
			}
			a.printf("%d failed events back in line\n", n)
			if !all && n < int64(len(ids)) {
				a.printf("%d of the given ids were not failed events\n", int64(len(ids))-n)
			}
			return nil
		}),
	}
	cmd.Flags().Int64SliceVar(&ids, "id", nil, "outbox `ID` to retry (repeatable, or comma-separated)")
	cmd.Flags().Lookup("id").DefValue = "" // not "[]": no default is the same as none
	cmd.Flags().BoolVar(&all, "all", false, "retry every failed event")
	return cmd
}

func newOutboxPruneCmd(a *app) *cobra.Command {
	var batch int
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Delete published events older than the retention, in small batches",
		Long: `Deletes the published events older than kafka.outbox_retention, as collector prune and the
daemon's pruner do, and nothing else.`,
		Args: cobra.NoArgs,
		RunE: a.run(func(ctx context.Context) error {
			if batch < 0 {
				return usageError{cmd: "collector outbox prune", err: fmt.Errorf("--batch %d: must be >= 1 (0 = %d)", batch, retention.OutboxBatchDefault)}
			}
			pool, err := a.db(ctx)
			if err != nil {
				return err
			}
			cfg := retention.Config{OutboxRetention: a.cfg.Kafka.OutboxRetention, OutboxBatch: batch}
			res, err := retention.Prune(ctx, pool, cfg, 0)
			a.printf("deleted %d published events older than %s\n", res.OutboxPublished, a.cfg.Kafka.OutboxRetention)
			return err
		}),
	}
	f := cmd.Flags()
	f.Duration("older-than", 0, "delete published events older than this (kafka.outbox_retention)")
	f.IntVar(&batch, "batch", 0, "rows per DELETE (0 = the default)")
	a.bindFlag("kafka.outbox_retention", f.Lookup("older-than"))
	return cmd
}

// clipLine keeps a table row on one line.
func clipLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		s = string(r[:n-1]) + "…" // by runes: a Korean message cut mid-character is not UTF-8
	}
	return s
}
