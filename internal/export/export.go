// Package export writes one UTC day of the collected history (snapshots, sales, hourly and
// daily candles) to files a consumer loads as they are: one Parquet or CSV file per table and
// a manifest.json of row counts and checksums, like EVE Ref's totals.json, so a consumer can
// tell a complete day from a partial one. Files carry only data, read in key order, so a
// re-run writes the same bytes; each file goes to a temporary name and is renamed into place,
// and the manifest goes last, so a day with a complete manifest is a complete day.
package export

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store"
)

// Formats are the file formats an export writes.
var Formats = config.ExportFormats

// SettleDefault is how long after midnight a day counts as complete: a write-back that
// claimed before midnight commits within it, and an hour's candle is written by the
// snapshots of the hour.
const SettleDefault = time.Hour

// CatchUpWaitDefault is how long after its end a day waits for collection to catch up past
// it (every item tried since) before it counts as complete all the same.
const CatchUpWaitDefault = 24 * time.Hour

// ManifestName is the file a complete export ends with.
const ManifestName = "manifest.json"

// ErrInProgress: the day asked for is not over yet (or not settled), and Partial was not set.
var ErrInProgress = errors.New("day still in progress")

// ErrPastRetention: retention may already have deleted some of the day's rows, and Partial
// was not set.
var ErrPastRetention = errors.New("day partly past retention")

// Options says which day to export, where and how.
type Options struct {
	Day    time.Time // the UTC day's start (ParseDay)
	Dir    string
	Format string // one of Formats
	// Partial allows a day still in progress, or one retention may have deleted rows of; its
	// manifest says "complete": false.
	Partial bool
	// Retention is what retention.* deletes: a day that began before one of its ages ago may
	// have lost rows, so its export cannot be complete.
	Retention config.RetentionConfig
	// Version is the collector's version, recorded in the manifest.
	Version string
	// Settle is how long after the day's end it counts as complete; 0 = SettleDefault.
	Settle time.Duration
	// BusyWait, when set, is how long Run waits for another export writing the day (the
	// daemon's, a CronJob's), judging the day again once it is done, so that success means
	// the day is there for what runs next (an upload). Past it Run fails, naming the lock:
	// one frozen while holding it must not pile every cron run up behind it. 0 = leave the
	// day to the other (Result.Busy), as the daemon's catch-up does.
	BusyWait time.Duration
	// OnBusy, when set, is called once when Run starts waiting for another export.
	OnBusy func()
	// skipEmpty leaves a day without rows unwritten (the daemon's catch-up).
	skipEmpty bool
	// afterCount, when set, runs once the day's rows are counted (tests).
	afterCount func()
	// afterTable, when set, runs once each table's file is written, before it is in place (tests).
	afterTable func()
	// beforeLock, when set, runs once the day is judged to need writing, before its lock (tests).
	beforeLock func()
}

// Result says what Run did.
type Result struct {
	Day     string
	Skipped bool // a complete export was already there and is kept (Kept says why if its counts differ)
	// Busy: another export was writing the day's directory; this run wrote nothing and left
	// the day to it.
	Busy bool
	// Kept, when set, is why a complete export was kept although the database's counts differ
	// from it: the database no longer holds some of its rows (retention dropped them), and an
	// export is never rewritten with less than it holds.
	Kept     string
	Manifest Manifest
	// Behind, when set, is how many items had not been collected since the day ended when it
	// was written complete all the same (CatchUpWaitDefault passed).
	Behind int64
}

// Manifest describes one day's export. Every field is derived from the data and the options,
// never the wall clock, so a re-run writes the same manifest.
type Manifest struct {
	Day              string      `json:"day"`
	Format           string      `json:"format"`
	Complete         bool        `json:"complete"`
	SchemaVersion    int32       `json:"schema_version"`
	CollectorVersion string      `json:"collector_version"`
	CreatedBy        string      `json:"created_by"`
	Tables           []TableFile `json:"tables"`
}

// TableFile is one table's file in a manifest.
type TableFile struct {
	Table  string `json:"table"`
	File   string `json:"file"`
	Rows   int64  `json:"rows"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// ParseDay reads YYYY-MM-DD as a UTC day.
func ParseDay(s string) (time.Time, error) {
	d, err := time.Parse(time.DateOnly, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not a day: want YYYY-MM-DD", s)
	}
	return d, nil
}

// CheckFormat refuses a format export does not write.
func CheckFormat(f string) error {
	if !slices.Contains(Formats, f) {
		return fmt.Errorf("%q: allowed parquet, csv", f)
	}
	return nil
}

// DB is what an export reads: a pool, a connection or a transaction.
type DB interface {
	history.Reader
}

// CaughtUpAfter is how long past a day's end every collected item must have been tried for
// the day to count as caught up: a collection leaves the sales of history.SalesSettle before
// its sales page was answered for the next, and the attempt is recorded after its calls (a
// pack's, budget waits included). The attempt is on the database's clock and the sales on the
// provider's: the minute is also how far the provider's clock may trail the database's (the
// collector warns from 30 s; sales are stored right whatever the skew, only the day's
// completeness assumes it).
const CaughtUpAfter = history.SalesSettle + time.Minute

// BusyWaitDefault is `collector export`'s Options.BusyWait: a day takes seconds to write.
const BusyWaitDefault = 30 * time.Minute

// busyBackoff spaces the looks at a day another export is writing.
var busyBackoff = backoff.Policy{Min: 200 * time.Millisecond, Max: 5 * time.Second}

// Run exports one day. It refuses a day in progress or partly past retention unless
// opts.Partial, skips a day whose complete manifest matches the database's counts, and
// otherwise (re)writes every file. Given a pool or a connection, it reads the counts and
// every table in one REPEATABLE READ snapshot, so a write or a retention drop during the
// export cannot make the files disagree with the manifest's counts. Another export writing
// the day is waited for up to opts.BusyWait.
func Run(ctx context.Context, db DB, opts Options) (Result, error) {
	waitUntil := time.Now().Add(opts.BusyWait)
	for attempt := 1; ; attempt++ {
		res, err := runOnce(ctx, db, opts)
		if err != nil || !res.Busy || opts.BusyWait <= 0 {
			return res, err
		}
		if attempt == 1 && opts.OnBusy != nil {
			opts.OnBusy()
		}
		if time.Now().After(waitUntil) {
			return res, fmt.Errorf("another export has been writing the day for over %s (its lock, %s, goes when its process ends): nothing written",
				opts.BusyWait, filepath.Join(opts.Dir, LockName))
		}
		if !backoff.Sleep(ctx, busyBackoff.Delay(attempt)) {
			return res, fmt.Errorf("stopped while another export was writing the day: %w", context.Cause(ctx))
		}
	}
}

// runOnce is Run without waiting for another export.
func runOnce(ctx context.Context, db DB, opts Options) (res Result, err error) {
	res = Result{Day: opts.Day.Format(time.DateOnly)}
	if err := CheckFormat(opts.Format); err != nil {
		return res, fmt.Errorf("format %w", err)
	}
	if opts.Settle == 0 {
		opts.Settle = SettleDefault
	}
	if b, ok := db.(interface {
		BeginTx(context.Context, pgx.TxOptions) (pgx.Tx, error)
	}); ok {
		tx, err := b.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			return res, fmt.Errorf("begin the export's snapshot: %w", err)
		}
		defer func() { _ = tx.Rollback(context.WithoutCancel(ctx)) }() // read-only: nothing to commit
		// Between tables the snapshot waits on the files (a Parquet writer's last row group,
		// fsyncs, slow or network storage), longer than the pool's bound on idle
		// transactions; it locks no rows, so a longer one only holds back vacuum.
		if _, err := tx.Exec(ctx, `SELECT set_config('idle_in_transaction_session_timeout', $1, true)`, exportIdleBound); err != nil {
			return res, fmt.Errorf("bound the export's snapshot: %w", err)
		}
		db = tx
	}
	now, err := store.Now(ctx, db)
	if err != nil {
		return res, err
	}
	end := opts.Day.AddDate(0, 0, 1)
	complete := !now.Before(end.Add(opts.Settle))
	if !complete && !opts.Partial {
		return res, fmt.Errorf("%w until %s (the database's clock says %s); --partial exports it anyway",
			ErrInProgress, end.Add(opts.Settle).Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	counts, err := history.CountDay(ctx, db, opts.Day)
	if err != nil {
		return res, err
	}
	if opts.afterCount != nil {
		opts.afterCount()
	}
	if opts.skipEmpty && counts == (history.DayCounts{}) {
		return res, nil
	}
	if old, ok := readManifest(opts.Dir); ok && complete && old.Complete {
		whole := intact(opts.Dir, old)
		if lost := lostRows(old, counts); lost != "" {
			if !whole {
				lost += "; some of its files are missing or changed: restore them, or remove " + ManifestName +
					" to write the day from what the database holds"
			}
			res.Skipped, res.Kept, res.Manifest = true, lost, old
			return res, nil
		}
		if whole && old.Format == opts.Format && sameCounts(old, counts) {
			// A run in another format killed between its manifest and the removal below left
			// that format's files, which a glob over the directory would read twice. Not while
			// another export writes the day: they may be its own.
			if unlock, busy := lockDir(opts.Dir); !busy {
				_ = removeOtherFormats(opts.Dir, opts.Format)
				removeTemps(opts.Dir)
				unlock()
			}
			res.Skipped, res.Manifest = true, old
			return res, nil
		}
	}
	if complete {
		// The clock is not enough: sales are stored at an item's next collection, which a
		// provider pause or a backlog can hold past the settle time. Waited for up to
		// CatchUpWaitDefault: past it, collection may have stopped for good (a refused key, an
		// archive), and the day is as complete as it will get (late rows rewrite it).
		behind, err := catalog.NotAttemptedSince(ctx, db, end.Add(CaughtUpAfter))
		if err != nil {
			return res, err
		}
		switch {
		case behind == 0:
		case now.Before(end.Add(CatchUpWaitDefault)):
			complete = false
			if !opts.Partial {
				return res, fmt.Errorf("%w: %d tracked items have not been collected since the day ended, and their sales of the day may still come (waited for until %s); --partial exports it anyway",
					ErrInProgress, behind, end.Add(CatchUpWaitDefault).Format(time.RFC3339))
			}
		default:
			res.Behind = behind
		}
	}
	if past := pastRetention(now, opts.Day, opts.Retention); past != "" {
		if !opts.Partial {
			return res, fmt.Errorf("%w: %s, so the database may no longer hold all of the day's rows; --partial writes what is left, marked \"complete\": false",
				ErrPastRetention, past)
		}
		complete = false
	}
	if !complete {
		// Never trade a complete export for a partial one: once it is replaced, nothing would
		// guard the day against a later partial run with fewer rows.
		if old, ok := readManifest(opts.Dir); ok && old.Complete && intact(opts.Dir, old) {
			res.Skipped, res.Manifest = true, old
			res.Kept = "a complete export of the day is kept: a partial one never replaces it (remove " + ManifestName + " to write the day as the database holds it now)"
			return res, nil
		}
	}
	// Only a day to write needs a writable directory: one kept as it is does not.
	if opts.beforeLock != nil {
		opts.beforeLock()
	}
	unlock, busy := lockDir(opts.Dir)
	if busy {
		res.Busy = true
		return res, nil
	}
	defer unlock()
	// Judged again under the lock: another run may have written the day since it was judged
	// above, from a later snapshot; it is kept as the checks above keep one.
	if old, ok := readManifest(opts.Dir); ok && old.Complete && intact(opts.Dir, old) {
		if lost := lostRows(old, counts); lost != "" || !complete || old.Format == opts.Format && sameCounts(old, counts) {
			res.Skipped, res.Manifest = true, old
			if lost != "" || !complete {
				res.Kept = "a complete export of the day, written by another run meanwhile, is kept"
			}
			return res, nil
		}
	}
	if err := writable(opts.Dir); err != nil {
		return res, err
	}
	removeTemps(opts.Dir)
	version, err := store.CurrentVersion(ctx, db)
	if err != nil {
		return res, err
	}
	m := Manifest{Day: res.Day, Format: opts.Format, Complete: complete, SchemaVersion: version,
		CollectorVersion: opts.Version, CreatedBy: "duecollector collector export"}
	// Every table is written in full before anything of the day's current export is touched:
	// a full disk, a kill or a stop during the long part leaves that export as it was.
	var temps []string
	defer func() {
		for _, tmp := range temps {
			os.Remove(tmp) // those not renamed into place
		}
	}()
	for _, t := range tables {
		f, tmp, err := writeTable(ctx, db, opts, t)
		if err != nil {
			return res, err
		}
		temps = append(temps, tmp)
		if opts.afterTable != nil {
			opts.afterTable()
		}
		if want := dayCount(counts, t.name); f.Rows != want {
			return res, fmt.Errorf("%s: wrote %d rows, the day holds %d: the manifest is not written", f.File, f.Rows, want)
		}
		m.Tables = append(m.Tables, f)
	}
	// The old manifest goes first: until the new one is written, the day is not complete.
	if err := os.Remove(filepath.Join(opts.Dir, ManifestName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, fmt.Errorf("remove the old manifest: %w", err)
	}
	for i, f := range m.Tables {
		if err := os.Rename(temps[i], filepath.Join(opts.Dir, f.File)); err != nil {
			return res, fmt.Errorf("write %s: %w", f.File, err)
		}
	}
	temps = nil
	if err := syncDir(opts.Dir); err != nil {
		return res, fmt.Errorf("write %s: %w", opts.Dir, err)
	}
	body, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return res, fmt.Errorf("encode the manifest: %w", err)
	}
	if err := writeFile(opts.Dir, ManifestName, func(w io.Writer) error {
		_, err := w.Write(append(body, '\n'))
		return err
	}); err != nil {
		return res, err
	}
	// The other formats' files go last, so a reader globbing the directory reads each table
	// once, also after a switch of format whose first run was killed.
	if err := removeOtherFormats(opts.Dir, opts.Format); err != nil {
		return res, err
	}
	res.Manifest = m
	return res, nil
}

// removeOtherFormats removes the day's files in the formats other than format.
func removeOtherFormats(dir, format string) error {
	for _, t := range tables {
		for _, f := range Formats {
			if f == format {
				continue
			}
			if err := os.Remove(filepath.Join(dir, t.name+"."+f)); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("remove %s.%s, which the new %s files replace: %w", t.name, f, format, err)
			}
		}
	}
	return nil
}

// writable makes dir and proves a file can be created in it before anything is removed.
func writable(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("out directory: %w", err)
	}
	// A new day's directory is an entry of its parent: until that is synced, a crash of the
	// machine can lose the whole day, manifest and all.
	_ = syncDir(filepath.Dir(dir))
	f, err := os.CreateTemp(dir, ".probe-*")
	if err != nil {
		return fmt.Errorf("out directory %s is not writable: %w", dir, err)
	}
	f.Close()
	return os.Remove(f.Name())
}

func readManifest(dir string) (Manifest, bool) {
	var m Manifest
	body, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil || json.Unmarshal(body, &m) != nil {
		return m, false
	}
	return m, true
}

// intact says whether a manifest's files are all there, of the recorded sizes.
func intact(dir string, m Manifest) bool {
	if len(m.Tables) != len(tables) {
		return false
	}
	for _, t := range m.Tables {
		st, err := os.Stat(filepath.Join(dir, t.File))
		if err != nil || st.Size() != t.Bytes {
			return false
		}
	}
	return true
}

func dayCount(c history.DayCounts, table string) int64 {
	switch table {
	case "auction_snapshots":
		return c.Snapshots
	case "auction_sales":
		return c.Sales
	case "price_candles":
		return c.Candles
	}
	return -1
}

// sameCounts says whether a manifest's row counts are those the database holds now.
func sameCounts(m Manifest, c history.DayCounts) bool {
	for _, t := range m.Tables {
		if dayCount(c, t.Table) != t.Rows {
			return false
		}
	}
	return true
}

// lostRows names the tables of which the database now holds fewer rows than the export:
// retention dropped them, and only the export still has them.
func lostRows(m Manifest, c history.DayCounts) string {
	var lost []string
	for _, t := range m.Tables {
		if n := dayCount(c, t.Table); n < t.Rows {
			lost = append(lost, fmt.Sprintf("%s %d of %d rows", t.Table, max(n, 0), t.Rows))
		}
	}
	if len(lost) == 0 {
		return ""
	}
	return fmt.Sprintf("the database now holds %s (retention dropped the rest); the export keeps them and is not rewritten", strings.Join(lost, ", "))
}

// pastRetention names the retention ages by which rows of day may already be deleted: those
// that reach back past its start (snapshot and sales partitions go whole, so it may say so
// a little early for them; candles go row by row).
func pastRetention(now, day time.Time, r config.RetentionConfig) string {
	var past []string
	for _, a := range []struct {
		key string
		age time.Duration
	}{
		{"retention.snapshots", r.Snapshots}, {"retention.sales", r.Sales},
		{"retention.candles_hourly", r.CandlesHourly}, {"retention.candles_daily", r.CandlesDaily},
	} {
		if a.age > 0 && day.Before(now.Add(-a.age)) {
			past = append(past, fmt.Sprintf("%s (%s) deletes what is older than %s", a.key, a.age, now.Add(-a.age).UTC().Format(time.RFC3339)))
		}
	}
	return strings.Join(past, ", ")
}

// removeTemps deletes the temporary files an interrupted export left; a day is written by one
// exporter at a time (lockDir).
func removeTemps(dir string) {
	entries, _ := os.ReadDir(dir) // not a glob: the directory's own name may hold [ * ?
	for _, e := range entries {
		n := e.Name()
		if strings.HasPrefix(n, ".probe-") || strings.HasPrefix(n, ".") && strings.Contains(n, ".tmp-") {
			os.Remove(filepath.Join(dir, n))
		}
	}
}

// writeFile writes name in dir through a temporary file renamed into place, so a reader or
// a crash never sees a half-written file under the final name.
func writeFile(dir, name string, write func(io.Writer) error) error {
	tmp, err := writeTemp(dir, name, write)
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		if tmp != "" {
			os.Remove(tmp)
		}
		return fmt.Errorf("write %s: %w", name, err)
	}
	return nil
}

// writeTemp writes what is to become name in dir to a hidden temporary file there, synced,
// and returns its path; on an error it leaves nothing behind.
func writeTemp(dir, name string, write func(io.Writer) error) (string, error) {
	f, err := os.CreateTemp(dir, "."+name+".tmp-*")
	if err != nil {
		return "", err
	}
	tmp := f.Name()
	err = write(f)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err != nil {
		os.Remove(tmp)
		return "", err
	}
	return tmp, nil
}

// syncDir makes a rename in dir durable: until the directory is synced, a crash of the
// machine may bring back the old name, or none, under a manifest that lists the new file.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// counter counts and hashes what passes through it.
type counter struct {
	w    io.Writer
	n    int64
	hash hashWriter
}

type hashWriter interface {
	io.Writer
	Sum([]byte) []byte
}

func (c *counter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.hash.Write(p[:n])
	return n, err
}

// exportIdleBound is how long the export's snapshot may wait on its files between tables.
const exportIdleBound = "15min"

func writeTable(ctx context.Context, db DB, opts Options, t table) (TableFile, string, error) {
	tf := TableFile{Table: t.name, File: t.name + "." + opts.Format}
	tmp, err := writeTemp(opts.Dir, tf.File, func(w io.Writer) error {
		c := &counter{w: w, hash: sha256.New()}
		n, err := t.write(ctx, db, opts.Day, opts.Format, c)
		tf.Rows, tf.Bytes, tf.SHA256 = n, c.n, hex.EncodeToString(c.hash.Sum(nil))
		return err
	})
	if err != nil {
		return tf, "", fmt.Errorf("write %s: %w", tf.File, err)
	}
	return tf, tmp, nil
}
