package main

// The kill matrix's one-shot roles: each a command killed at a share of its own calibrated
// duration, then run again as cron would.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/duecollector/duecollector/internal/export"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/history/partition"
)

// oneShot is a one-shot role: a setup, the command, and what its re-run must leave. Its kill
// moments are shares of the command's own duration, measured by a calibration run on a
// database set up the same way, so that every moment lands somewhere in its work.
type oneShot struct {
	setup func(ctx context.Context, k *killRun) error
	// holding, when set, tells when the command holds what the role is about: the kill
	// moments (and the calibration's duration) count from then, not from its start.
	holding func(ctx context.Context, k *killRun) func() (bool, error)
	args    []string
	rerun   [][]string // what runs after the kill, to the end; the first is the recovery
	check   func(ctx context.Context, k *killRun) error
}

// run calibrates with moment < 0 (runs the command to the end, returns its duration).
func (o oneShot) run(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
	if o.setup != nil {
		if err := o.setup(ctx, k); err != nil {
			return 0, err
		}
	}
	started := func() (bool, error) { return true, nil }
	if o.holding != nil {
		started = o.holding(ctx, k)
	}
	t0 := time.Now()
	p, err := k.start(ctx, "k-"+o.args[0], o.args...)
	if err != nil {
		return 0, err
	}
	if moment < 0 {
		if o.holding != nil {
			if err := poll(ctx, time.Minute, 5*time.Millisecond, started); err != nil {
				return 0, fmt.Errorf("calibration: collector %s never held its work: %w: %s", strings.Join(o.args, " "), err, p.tail())
			}
			t0 = time.Now()
		}
		if code, err := p.wait(ctx, 3*time.Minute); err != nil || code != 0 {
			return 0, fmt.Errorf("calibration: collector %s: exit %d %v: %s", strings.Join(o.args, " "), code, err, p.tail())
		}
		return time.Since(t0), o.finishAll(ctx, k)
	}
	// Within the first 80 % of the calibration's duration: a run a little faster is still met.
	killed, err := k.killAt(ctx, p, started, k.window*4/5, moment)
	if err != nil {
		return 0, err
	}
	if p.code == 0 {
		k.h.logf("%s finished before its kill at %.2f of %s", k.label, moment, k.window)
	}
	if err := k.finish(ctx, "k-again", o.rerun[0]...); err != nil {
		return time.Since(killed), err
	}
	took := time.Since(killed)
	return took, o.finishAll(ctx, k)
}

func (o oneShot) finishAll(ctx context.Context, k *killRun) error {
	for _, args := range o.rerun[1:] {
		if err := k.finish(ctx, "k-then", args...); err != nil {
			return err
		}
	}
	if o.check == nil {
		return nil
	}
	return o.check(ctx, k)
}

var relayOnce = []string{"relay-outbox", "--once"}

func fill(ctx context.Context, k *killRun) error {
	return k.finish(ctx, "k-fill", "collect-due", "--concurrency", "8")
}

// holdingDropLock: the drop pass holds its advisory lock, so a kill moment counts from the
// drop, not from start-up, the partitions created ahead (a lock of their own) or the other
// short advisory locks a process takes.
func holdingDropLock(ctx context.Context, k *killRun) func() (bool, error) {
	return func() (bool, error) {
		// A bigint key is held as classid (its high 32 bits), objid (its low ones), objsubid 1.
		n, err := k.d.count(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			WHERE l.locktype = 'advisory' AND l.granted AND d.datname = $1 AND l.objsubid = 1
			  AND (l.classid::bigint << 32 | l.objid::bigint) = $2`, k.d.name, int64(partition.DropLockKey))
		return n > 0, err
	}
}

// prune past 96h of thirteen months of daily partitions: its drop pass holds its lock on a
// session of its own while it detaches and drops ~800 partitions.
var killPrune = oneShot{
	setup: func(ctx context.Context, k *killRun) error {
		k.salesDropped = true
		if err := k.d.oldPartitions(ctx, -400, 8); err != nil {
			return err
		}
		return fill(ctx, k)
	},
	holding: holdingDropLock,
	args:    []string{"prune", "--snapshots", "96h", "--sales", "96h"},
	rerun:   [][]string{{"partitions"}, {"prune", "--snapshots", "96h", "--sales", "96h"}, relayOnce},
	check: func(ctx context.Context, k *killRun) error {
		old, err := k.d.count(ctx, `
			SELECT count(*) FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent IN ('auction_snapshots'::regclass, 'auction_sales'::regclass)
			  AND substring(pg_get_expr(c.relpartbound, c.oid) FROM 'TO \(''([^'']+)''\)')::timestamptz < now() - interval '120 hours'`)
		k.r.check(err == nil && old == 0, "%s: %d partitions past retention left after the re-run (%v)", k.label, old, err)
		return k.allCollectedAndPublished(ctx, nil)
	},
}

// partitions (as cron runs it where no daemon runs) with retention set, over five months of
// daily partitions: its drop pass is the daemon's hourly upkeep, killed mid-drop.
var killPartitions = oneShot{
	setup: func(ctx context.Context, k *killRun) error {
		k.salesDropped = true
		k.env = append(k.env, "COLLECTOR_RETENTION_SNAPSHOTS=96h", "COLLECTOR_RETENTION_SALES=96h")
		if err := k.d.oldPartitions(ctx, -150, 8); err != nil {
			return err
		}
		return fill(ctx, k)
	},
	holding: holdingDropLock,
	args:    []string{"partitions"},
	rerun:   [][]string{{"partitions"}, relayOnce},
	check:   killPrune.check,
}

// import-items resolving the targets through a slow provider.
var killImport = oneShot{
	setup: func(ctx context.Context, k *killRun) error {
		if _, err := k.d.pool.Exec(ctx, `DELETE FROM tracked_items`); err != nil {
			return err
		}
		return k.h.sim.setLatency(ctx, 150*time.Millisecond)
	},
	args:  []string{"import-items", "--targets", "configs/import-targets.yaml"},
	rerun: [][]string{{"import-items", "--targets", "configs/import-targets.yaml"}},
	check: func(ctx context.Context, k *killRun) error {
		n, err := k.d.count(ctx, `SELECT count(*) FROM tracked_items`)
		k.r.check(err == nil && n >= 12, "%s: %d items tracked after the re-run, want every target's (%v)", k.label, n, err)
		return nil
	},
}

// migrate up on an empty database: the migration lock (advisory, session) and the schema's one
// transaction. The re-run waits on the lock until the dead session's end releases it, and
// applies the schema whole; `migrate status` exits 1 while anything is pending.
var killMigrate = oneShot{
	setup: func(ctx context.Context, k *killRun) error {
		_, err := k.d.pool.Exec(ctx, `DROP SCHEMA public CASCADE; CREATE SCHEMA public`)
		return err
	},
	holding: func(ctx context.Context, k *killRun) func() (bool, error) {
		return func() (bool, error) {
			n, err := k.d.count(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
				WHERE l.locktype = 'advisory' AND l.granted AND d.datname = $1`, k.d.name)
			return n > 0, err
		}
	},
	args:  []string{"migrate", "up"},
	rerun: [][]string{{"migrate", "up"}, {"migrate", "status"}},
	check: func(ctx context.Context, k *killRun) error {
		k.d.pool.Reset() // its sessions had the dropped tables' statements prepared
		n, err := k.d.count(ctx, `SELECT count(*) FROM provider_status`)
		k.r.check(err == nil && n == 1, "%s: %d provider rows after the re-run, want the schema's one (%v)", k.label, n, err)
		return nil
	},
}

// recalculate-popularity in its transaction (under its advisory lock).
var killRecalculate = oneShot{
	setup: fill,
	args:  []string{"recalculate-popularity"},
	rerun: [][]string{{"recalculate-popularity"}, relayOnce},
	check: func(ctx context.Context, k *killRun) error {
		n, err := k.d.count(ctx, `SELECT count(*) FROM tier_forecast`)
		k.r.check(err == nil && n > 0, "%s: no tier forecast after the re-run (%v)", k.label, err)
		return k.allCollectedAndPublished(ctx, nil)
	},
}

// seed:synthetic mid-batch; the re-run completes what was cut short.
var killSeed = oneShot{
	args:  []string{"seed:synthetic", "--items", "200", "--days", "3"},
	rerun: [][]string{{"seed:synthetic", "--items", "200", "--days", "3"}},
	check: func(ctx context.Context, k *killRun) error {
		// One snapshot an hour over its days for every fixture item (give or take the hour
		// a re-run adds), each once.
		var items, minPer, maxPer int
		err := k.d.pool.QueryRow(ctx, `
			SELECT count(*), coalesce(min(n), 0), coalesce(max(n), 0) FROM (
			    SELECT count(*) AS n FROM auction_snapshots WHERE synthetic_item(item_id) GROUP BY item_id) s`).Scan(&items, &minPer, &maxPer)
		k.r.check(err == nil && items == 200 && minPer >= 3*24 && maxPer-minPer <= 1,
			"%s: %d seeded items with %d..%d snapshots each, want 200 with 72+ each and no gaps (%v)", k.label, items, minPer, maxPer, err)
		return nil
	},
}

// export of a seeded day before yesterday (settled at any hour): the killed run has removed
// the day's manifest and may have left files under temporary names; the re-run (the daemon's
// next turn, or the operator's) writes the day whole and removes what the dead run left.
var (
	exportDay  = time.Now().UTC().AddDate(0, 0, -2).Format(time.DateOnly)
	exportDir  = filepath.Join(os.TempDir(), fmt.Sprintf("dc-kill-export-%d", os.Getpid()))
	exportArgs = []string{"export", "--day", exportDay, "--out", exportDir, "--format", "parquet"}
)

var killExport = oneShot{
	setup: func(ctx context.Context, k *killRun) error {
		if err := os.RemoveAll(exportDir); err != nil {
			return err
		}
		if err := k.finish(ctx, "k-export-seed", "seed:synthetic", "--items", "200", "--days", "3"); err != nil {
			return err
		}
		// Exports leave fixtures out: the seeded history is exported under other ids, given
		// back after the check (the matrix's event checks leave fixtures out too).
		return renameSeeded(ctx, k, `'x' || item_id`, `synthetic_item(item_id)`)
	},
	args:  exportArgs,
	rerun: [][]string{exportArgs},
	check: func(ctx context.Context, k *killRun) error {
		defer os.RemoveAll(exportDir)
		defer func() {
			if err := renameSeeded(ctx, k, `substr(item_id, 2)`, `item_id LIKE 'xseed-%'`); err != nil {
				k.r.check(false, "%s: %v", k.label, err)
			}
		}()
		var m export.Manifest
		body, err := os.ReadFile(filepath.Join(exportDir, export.ManifestName))
		if err == nil {
			err = json.Unmarshal(body, &m)
		}
		k.r.check(err == nil && m.Complete && len(m.Tables) == 3, "%s: after the re-run the day's manifest is %+v (%v); want it complete with 3 tables", k.label, m, err)
		for _, t := range m.Tables {
			st, err := os.Stat(filepath.Join(exportDir, t.File))
			k.r.check(err == nil && st.Size() == t.Bytes, "%s: %s is not the manifest's %d bytes (%v)", k.label, t.File, t.Bytes, err)
			if t.Table == "auction_snapshots" {
				day, _ := export.ParseDay(exportDay)
				c, err := history.CountDay(ctx, k.d.pool, day)
				k.r.check(err == nil && c.Snapshots == t.Rows && c.Snapshots > 0, "%s: the export holds %d snapshots, the database %d for %s (%v)",
					k.label, t.Rows, c.Snapshots, exportDay, err)
			}
		}
		temps, _ := filepath.Glob(filepath.Join(exportDir, ".*.tmp-*"))
		k.r.check(len(temps) == 0, "%s: the killed run's temporary files are left after the re-run: %v", k.label, temps)
		return nil
	},
}

// renameSeeded sets the history tables' item_id to to where the predicate holds.
func renameSeeded(ctx context.Context, k *killRun, to, where string) error {
	for _, table := range []string{"auction_snapshots", "auction_sales", "price_candles"} {
		if _, err := k.d.pool.Exec(ctx, `UPDATE `+table+` SET item_id = `+to+` WHERE `+where); err != nil {
			return fmt.Errorf("rename %s's seeded items: %w", table, err)
		}
	}
	return nil
}
