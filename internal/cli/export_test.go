package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/export"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// collector export refuses a bad --day or --format and a missing --out as usage errors naming
// the flag, before touching the database; an --out it cannot write and a day in progress fail
// naming what to change, and nothing is left under the out directory.
func TestExportCommandErrorsNameTheFlag(t *testing.T) {
	t.Setenv("COLLECTOR_CONFIG", "")
	out := t.TempDir()
	for _, tc := range []struct {
		args []string
		flag string
	}{
		{[]string{"--day", "03/12/2026", "--out", out}, "--day"},
		{[]string{"--day", "2026-12-03", "--out", out, "--format", "xlsx"}, "--format"},
		{[]string{"--day", "2026-12-03"}, "--out"},
	} {
		_, _, err := runCollector(t, append([]string{"export", "--database-url", "postgres://nowhere.invalid/x"}, tc.args...)...)
		if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), tc.flag) {
			t.Errorf("export %v: %v (exit %d); want a usage error naming %s", tc.args, err, exitCode(err), tc.flag)
		}
	}

	_, db := storetest.NewPool(t)
	blocker := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := runCollector(t, "export", "--database-url", db, "--day", "2026-01-01", "--out", filepath.Join(blocker, "day"))
	if err == nil || !strings.Contains(err.Error(), "--out") || !strings.Contains(err.Error(), "out directory") {
		t.Errorf("export to an unwritable --out: %v; want an error naming --out", err)
	}
	today := time.Now().UTC().Format(time.DateOnly)
	_, _, err = runCollector(t, "export", "--database-url", db, "--day", today, "--out", out)
	if err == nil || !strings.Contains(err.Error(), "--partial") {
		t.Errorf("export of today: %v; want a refusal naming --partial", err)
	}
	stdout, _, err := runCollector(t, "export", "--database-url", db, "--day", "2026-01-01", "--out", out, "--format", "csv")
	if err != nil || !strings.Contains(stdout, "exported") {
		t.Fatalf("export of a past day: %q, %v", stdout, err)
	}
	stdout, _, err = runCollector(t, "export", "--database-url", db, "--day", "2026-01-01", "--out", out, "--format", "csv")
	if err != nil || !strings.Contains(stdout, "skipped") {
		t.Fatalf("a re-run of a complete day: %q, %v; want it skipped, saying so", stdout, err)
	}
	entries, _ := os.ReadDir(out)
	if len(entries) != 4 {
		t.Errorf("the out directory holds %d entries, want 3 files and the manifest", len(entries))
	}
}

// signalWriter collects what is written and closes seen once it holds want.
type signalWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	want string
	seen chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, _ := w.buf.Write(p)
	if strings.Contains(w.buf.String(), w.want) {
		w.once.Do(func() { close(w.seen) })
	}
	return n, nil
}

func (w *signalWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.buf.String()
}

// collector export that finds another export writing the day waits for it and then judges the
// day again, so that its success means the day is there for what runs next (an upload).
func TestExportCommandWaitsForAnotherExportOfTheDay(t *testing.T) {
	t.Setenv("COLLECTOR_CONFIG", "")
	_, db := storetest.NewPool(t)
	out := t.TempDir()
	other := holdDayLock(t, out)
	stderr := &signalWriter{want: "waiting for it", seen: make(chan struct{})} // a diagnostic: not on stdout
	stdout := &signalWriter{want: "exported", seen: make(chan struct{})}
	done := make(chan error, 1)
	go func() {
		cmd := newRootCmd(stdout, stderr)
		cmd.SetArgs([]string{"export", "--database-url", db, "--day", "2026-01-01", "--out", out, "--format", "csv", "--log-format=console"})
		done <- cmd.ExecuteContext(context.Background())
	}()
	select {
	case <-stderr.seen:
	case err := <-done:
		t.Fatalf("with the day locked by another export it ended: %v, %q; want it waiting", err, stderr.String())
	}
	other.Close() // the other export ends
	if err := <-done; err != nil || !strings.Contains(stdout.String(), "exported") {
		t.Fatalf("once the other let go: %v, %q; want the day exported", err, stdout.String())
	}
	if _, err := os.Stat(filepath.Join(out, export.ManifestName)); err != nil {
		t.Fatalf("the manifest: %v", err)
	}
}

// The wait for another export of the day is bounded: one frozen while holding the lock fails
// the command, naming the lock, instead of piling cron runs up behind it.
func TestExportCommandWaitsForAnotherExportOnlySoLong(t *testing.T) {
	t.Setenv("COLLECTOR_CONFIG", "")
	defer func(d time.Duration) { exportBusyWait = d }(exportBusyWait)
	exportBusyWait = 300 * time.Millisecond
	_, db := storetest.NewPool(t)
	out := t.TempDir()
	holdDayLock(t, out)
	_, _, err := runCollector(t, "export", "--database-url", db, "--day", "2026-01-01", "--out", out, "--format", "csv")
	if err == nil || exitCode(err) != exitRuntime || !strings.Contains(err.Error(), export.LockName) {
		t.Fatalf("with the day locked for good: %v; want a failure naming the lock", err)
	}
	if _, err := os.Stat(filepath.Join(out, export.ManifestName)); err == nil {
		t.Fatal("a manifest was written beside the other export")
	}
}

// holdDayLock locks the day's directory as another export writing it does, until the test ends
// or the returned file is closed (its process ending).
func holdDayLock(t *testing.T, dir string) *os.File {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(dir, export.LockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	return f
}
