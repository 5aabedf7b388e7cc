package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/export"
)

// exportBusyWait is the command's wait for another export of the day (tests shorten it).
var exportBusyWait = export.BusyWaitDefault

func newExportCmd(a *app) *cobra.Command {
	var day, out, format string
	var partial bool
	cmd := &cobra.Command{
		Use:   "export --day YYYY-MM-DD --out DIR",
		Short: "Write one UTC day of snapshots, sales and candles to Parquet or CSV files with a manifest",
		Long: `Writes the history of one UTC day to DIR: auction_snapshots, auction_sales and price_candles
(the day's hourly candles and its daily one), one file per table, then manifest.json with each
file's row count, size and sha256, the schema and collector versions, and "complete". A day
is complete an hour after it ends by the database's clock, once every collected item has been
tried since a minute past its end (waited for up to a day); a day still in progress, or one
that began longer ago than a retention.* age (retention may have deleted some of its rows), is
refused unless --partial (its manifest then says "complete": false). The counts and the files
are read in one snapshot of the database. A re-run skips a complete day
whose manifest still matches the database's row counts, and otherwise writes the same bytes
again; each file is written under a temporary name and renamed, so nothing half-written ever
sits under a final name. If another export is writing the day, it waits for it (up to 30
minutes, then fails naming its lock) and judges the day again. The daemon exports past days
itself when export.enabled is set.
docs/api.md says how to load a day into DuckDB.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			opts := export.Options{Dir: out, Format: format, Partial: partial}
			var err error
			if opts.Day, err = export.ParseDay(day); err != nil {
				return usageError{cmd: "collector export", err: fmt.Errorf("--day: %w", err)}
			}
			if err := export.CheckFormat(format); err != nil {
				return usageError{cmd: "collector export", err: fmt.Errorf("--format %w", err)}
			}
			if out == "" {
				return usageError{cmd: "collector export", err: errors.New("--out: a directory is required")}
			}
			return a.run(func(ctx context.Context) error {
				pool, err := a.db(ctx)
				if err != nil {
					return err
				}
				opts.Version, _, _ = buildInfo()
				opts.Retention = a.cfg.Retention
				opts.BusyWait = exportBusyWait
				opts.OnBusy = func() {
					fmt.Fprintf(a.stderr, "%s: another export is writing %s right now; waiting for it to finish\n", day, out)
				}
				res, err := export.Run(ctx, pool, opts)
				if err != nil {
					return fmt.Errorf("export --day %s --out %s: %w", day, out, err)
				}
				if res.Kept != "" {
					a.printf("%s: already exported to %s and complete, and kept: %s\n", res.Day, out, res.Kept)
					return nil
				}
				if res.Skipped {
					a.printf("%s: already exported to %s and complete (the manifest matches the database's row counts); skipped\n", res.Day, out)
					return nil
				}
				for _, t := range res.Manifest.Tables {
					a.printf("%s: %d rows, %d bytes\n", t.File, t.Rows, t.Bytes)
				}
				a.printf("%s: exported to %s (complete: %t)\n", res.Day, out, res.Manifest.Complete)
				return nil
			})(cmd, args)
		},
	}
	f := cmd.Flags()
	f.StringVar(&day, "day", "", "the UTC day to export, YYYY-MM-DD")
	f.StringVar(&out, "out", "", "the directory to write the day's files to (made if missing)")
	f.StringVar(&format, "format", "parquet", "parquet or csv")
	f.BoolVar(&partial, "partial", false, "export a day still in progress, or one retention.* may have deleted rows of; its manifest says \"complete\": false")
	return cmd
}
