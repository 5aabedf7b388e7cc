package export

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/duecollector/duecollector/internal/config"
)

// Sizes and pacing of the daemon's exporter no operator needs to turn; tests set Config's
// fields instead.
const (
	// CatchUpDaysDefault is how many past days a turn looks at: a daemon down over a few
	// midnights exports what it missed, and no more (`collector export` does older days).
	CatchUpDaysDefault = config.ExportCatchUpDays
	// IntervalDefault is the pause between the daemon's turns.
	IntervalDefault = 10 * time.Minute
)

// Config is what the daemon's exporter reads (export.*). Zero sizes take the …Default
// constants.
type Config struct {
	// Dir holds one directory per day, named YYYY-MM-DD (export.dir).
	Dir string
	// Format is one of Formats (export.format).
	Format string
	// Version is the collector's version, recorded in each manifest.
	Version string
	// CatchUpDays is how many complete days before today a turn exports; 0 = CatchUpDaysDefault.
	CatchUpDays int
	// Interval is the pause between Start's turns; 0 = IntervalDefault.
	Interval time.Duration
	// Settle is how long after its end a day is complete; 0 = SettleDefault.
	Settle time.Duration
	// Retention is retention.*: configuration validation keeps its ages beyond the days a
	// turn looks at (config.ExportReach), and Run refuses a day they reach into.
	Retention config.RetentionConfig
}

// WithDefaults fills the zero sizes.
func (c Config) WithDefaults() Config {
	c.CatchUpDays = cmp.Or(c.CatchUpDays, CatchUpDaysDefault)
	c.Interval = cmp.Or(c.Interval, IntervalDefault)
	c.Settle = cmp.Or(c.Settle, SettleDefault)
	return c
}

// Validate refuses a configuration that could not export.
func (c Config) Validate() error {
	if c.Dir == "" {
		return fmt.Errorf("export: a directory is required")
	}
	if err := CheckFormat(c.Format); err != nil {
		return fmt.Errorf("export: format %w", err)
	}
	if c.CatchUpDays < 1 || c.Interval <= 0 || c.Settle <= 0 {
		return fmt.Errorf("export: catch-up days %d, interval %s and settle %s must be > 0", c.CatchUpDays, c.Interval, c.Settle)
	}
	return nil
}

// Exporter is the daemon's exporter: each turn exports the complete days of the last
// CatchUpDays that hold rows and are not yet exported, oldest first.
type Exporter struct {
	db  DB
	cfg Config
	// OnTurn, when set before Start, hears every turn's result (logs, metrics, test signals).
	OnTurn func(Turn, error)
}

// Turn is what one pass did: the days it wrote, the days already exported, and the days that
// wait for collection to catch up past their end before they count as complete.
type Turn struct {
	Exported, Skipped, Waiting []string
	// Newest is the newest day of the turn whose export is complete: written now or before, or
	// a day without rows (zero: none).
	Newest time.Time
	// Behind lists the days written complete although collection had not caught up past them
	// within CatchUpWaitDefault, with how many items were behind.
	Behind []string
}

// NewExporter fills cfg's defaults and validates it once.
func NewExporter(db DB, cfg Config) (*Exporter, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	return &Exporter{db: db, cfg: cfg, OnTurn: func(Turn, error) {}}, nil
}

// RunOnce exports the missed days of one turn. Days without rows (before the collector ran)
// are left alone. A day that fails does not hold back the days after it: the turn goes on and
// returns every day's error.
func (e *Exporter) RunOnce(ctx context.Context) (Turn, error) {
	t, err := e.runOnce(ctx)
	e.OnTurn(t, err)
	return t, err
}

func (e *Exporter) runOnce(ctx context.Context) (Turn, error) {
	var t Turn
	var today time.Time
	if err := e.db.QueryRow(ctx, `SELECT date_trunc('day', now() - $1::interval, 'UTC')`, e.cfg.Settle).Scan(&today); err != nil {
		return t, fmt.Errorf("read the database clock: %w", err)
	}
	today = today.UTC()
	var errs []error
	for i := e.cfg.CatchUpDays; i >= 1 && ctx.Err() == nil; i-- {
		day := today.AddDate(0, 0, -i)
		res, err := Run(ctx, e.db, Options{Day: day, Dir: filepath.Join(e.cfg.Dir, day.Format(time.DateOnly)),
			Format: e.cfg.Format, Version: e.cfg.Version, Settle: e.cfg.Settle, Retention: e.cfg.Retention, skipEmpty: true})
		switch {
		case errors.Is(err, ErrInProgress):
			t.Waiting = append(t.Waiting, res.Day) // collection has not caught up past its end
		case err != nil:
			errs = append(errs, fmt.Errorf("export of %s: %w", res.Day, err))
		case res.Busy: // being written by another exporter
			t.Skipped = append(t.Skipped, res.Day)
		case res.Skipped: // kept
			t.Skipped = append(t.Skipped, res.Day)
			t.Newest = day
		case res.Manifest.Day != "":
			t.Exported = append(t.Exported, res.Day)
			t.Newest = day
			if res.Behind > 0 {
				t.Behind = append(t.Behind, fmt.Sprintf("%s (%d items)", res.Day, res.Behind))
			}
		default: // a day without rows: nothing to export
			t.Newest = day
		}
	}
	return t, errors.Join(errs...)
}

// Start runs a turn at once and every Interval after, until ctx ends.
func (e *Exporter) Start(ctx context.Context) {
	for {
		e.RunOnce(ctx)
		t := time.NewTimer(e.cfg.Interval)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
