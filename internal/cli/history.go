package cli

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store"
)

func newHistoryCmd(a *app) *cobra.Command {
	var interval, since, output string
	cmd := &cobra.Command{
		Use:   "history ITEM_ID",
		Short: "Print an item's stored series: raw snapshots or hourly / daily price candles",
		Long: `Prints one item's history since --since (a duration such as 36h or 30d), oldest first.

--interval raw prints the stored snapshots: each holds from its collected_at until the next one
(history.mode changes writes one only when the market changed, or every history.heartbeat).
--interval 1h or 1d prints price candles: open / high / low / close of the lowest unit price over
the bucket's snapshots, the listing count range, and the sales sold in it with their VWAP.
Candles are kept when raw partitions are dropped (retention.candles_*).`,
		Args: cobra.ExactArgs(1),
		RunE: a.runArgs(func(ctx context.Context, args []string) error {
			age, err := parseAge(since)
			if err != nil {
				return usageError{cmd: "collector history", err: fmt.Errorf("--since %q: %w", since, err)}
			}
			if interval != "raw" && interval != history.Hourly && interval != history.Daily {
				return usageError{cmd: "collector history", err: fmt.Errorf("--interval %q: allowed raw, 1h, 1d", interval)}
			}
			if output != "table" && output != "csv" && output != "json" {
				return usageError{cmd: "collector history", err: fmt.Errorf("-o %q: allowed table, csv, json", output)}
			}
			reads, err := a.reads(ctx)
			if err != nil {
				return err
			}
			reads.RunOnce(ctx)
			if err := a.printHistory(ctx, reads, args[0], interval, age, output); err != nil {
				return err
			}
			if st := reads.State(); st.Replica && output == "table" {
				a.printf("read from the %s\n", st)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&interval, "interval", "1h", "raw, 1h or 1d")
	f.StringVar(&since, "since", "7d", "how far back: a duration (36h) or whole days (30d)")
	f.StringVarP(&output, "output", "o", "table", "table, csv or json")
	return cmd
}

// maxDays is the most whole days parseAge takes: about the most a time.Duration holds, which
// an hour more would wrap around.
const maxDays = 106751

// parseAge reads a Go duration or a whole number of days ("30d").
func parseAge(s string) (time.Duration, error) {
	var d time.Duration
	if n, ok := strings.CutSuffix(s, "d"); ok {
		days, err := strconv.Atoi(n)
		if err != nil {
			return 0, errors.New("want a duration such as 36h or whole days such as 30d")
		}
		if days > maxDays {
			return 0, fmt.Errorf("at most %dd", maxDays)
		}
		d = time.Duration(days) * 24 * time.Hour
	} else {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			return 0, errors.New("want a duration such as 36h or whole days such as 30d")
		}
	}
	if d <= 0 {
		return 0, errors.New("must be positive")
	}
	return d, nil
}

func (a *app) printHistory(ctx context.Context, db history.Reader, item, interval string, age time.Duration, output string) error {
	now, err := store.Now(ctx, db)
	if err != nil {
		return err
	}
	since := now.Add(-age)
	s, err := catalog.ReadSeries(ctx, db, item, interval, since, time.Time{})
	if err != nil {
		return err
	}
	header, rows := historyRows(s, interval)
	switch output {
	case "json":
		enc := json.NewEncoder(a.stdout)
		enc.SetIndent("", "  ")
		// The read API's /timeseries answer, the same document.
		return enc.Encode(s.Document(interval, since, time.Time{}))
	case "csv":
		w := csv.NewWriter(a.stdout)
		_ = w.Write(header)
		_ = w.WriteAll(rows)
		return w.Error()
	}
	tw := tabwriter.NewWriter(a.stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, strings.Join(header, "\t"))
	for _, r := range rows {
		fmt.Fprintln(tw, strings.Join(r, "\t"))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	switch {
	case s.SeenUntil == nil:
		a.printf("item %s has not been collected yet\n", item)
	case len(rows) > 0:
		a.printf("seen until %s (the last row held at least until then)\n", s.SeenUntil.UTC().Format(time.RFC3339))
	default:
		a.printf("nothing stored since %s; last collected %s\n", since.UTC().Format(time.RFC3339), s.SeenUntil.UTC().Format(time.RFC3339))
	}
	return nil
}

func historyRows(s history.Series, interval string) ([]string, [][]string) {
	if interval == "raw" {
		header := []string{"collected_at", "reason", "lowest", "median", "weighted", "api_average", "listings", "quantity", "truncated", "sales", "sales_qty", "sales_vwap"}
		var rows [][]string
		for _, p := range s.Points {
			rows = append(rows, []string{p.At.UTC().Format(time.RFC3339), p.Reason, num(p.Lowest), num(p.Median), flt(p.Weighted),
				num(p.APIAverage), strconv.Itoa(p.ListingCount), strconv.FormatInt(p.Quantity, 10), strconv.FormatBool(p.Truncated),
				strconv.Itoa(p.SalesCount), strconv.FormatInt(p.SalesQuantity, 10), flt(p.SalesVWAP)})
		}
		return header, rows
	}
	header := []string{"bucket", "snapshots", "open", "high", "low", "close", "listings_min", "listings_max", "sales", "sales_qty", "sales_vwap"}
	var rows [][]string
	for _, c := range s.Candle {
		rows = append(rows, []string{c.Bucket.UTC().Format(time.RFC3339), strconv.Itoa(c.Snapshots), num(c.Open), num(c.High), num(c.Low), num(c.Close),
			num(c.ListingsMin), num(c.ListingsMax), strconv.Itoa(c.SalesCount), strconv.FormatInt(c.SalesQuantity, 10), flt(c.SalesVWAP)})
	}
	return header, rows
}

func num[T int | int64](p *T) string {
	if p == nil {
		return ""
	}
	return strconv.FormatInt(int64(*p), 10)
}

func flt(p *float64) string {
	if p == nil {
		return ""
	}
	return strconv.FormatFloat(*p, 'f', 2, 64)
}
