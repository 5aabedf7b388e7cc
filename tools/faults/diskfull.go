package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// tmpfsTablespace is a small tmpfs mounted for one scenario, with a tablespace on it.
type tmpfsTablespace struct {
	dir, name string
}

// mountTablespace mounts a tmpfs of size bytes, owned by the server's user, and creates the
// tablespace name on it. It returns a skip reason when the machine does not allow it.
func (h *harness) mountTablespace(ctx context.Context, name string, size int64) (*tmpfsTablespace, string, error) {
	if os.Geteuid() != 0 {
		return nil, "mounting a tmpfs needs root", nil
	}
	pg, err := user.Lookup("postgres")
	if err != nil {
		return nil, "no postgres user to own the tablespace (is the server local?): " + err.Error(), nil
	}
	uid, _ := strconv.Atoi(pg.Uid)
	gid, _ := strconv.Atoi(pg.Gid)
	dir, err := os.MkdirTemp("", "faults-tmpfs-")
	if err != nil {
		return nil, "", err
	}
	if out, err := exec.CommandContext(ctx, "mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0755", size), "tmpfs", dir).CombinedOutput(); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Sprintf("cannot mount a tmpfs: %v: %s", err, bytes.TrimSpace(out)), nil
	}
	t := &tmpfsTablespace{dir: dir}
	// The server walks to the tablespace from /: the temporary directory must be open to it.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.unmount()
		return nil, "", err
	}
	loc := filepath.Join(dir, "ts")
	err = os.Mkdir(loc, 0o700)
	if err == nil {
		err = os.Chown(loc, uid, gid)
	}
	if err != nil {
		t.unmount()
		return nil, "", err
	}
	q := fmt.Sprintf("CREATE TABLESPACE %s LOCATION '%s'", pgx.Identifier{name}.Sanitize(), loc)
	if _, err := h.admin.Exec(ctx, q); err != nil {
		t.unmount()
		return nil, fmt.Sprintf("the server cannot use a tablespace at %s (not on this machine?): %v", loc, err), nil
	}
	t.name = name
	return t, "", nil
}

// fill writes a file until the tmpfs has no byte left.
func (t *tmpfsTablespace) fill() (int64, error) {
	f, err := os.Create(filepath.Join(t.dir, "filler"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		w, err := f.Write(buf)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

func (t *tmpfsTablespace) free() error { return os.Remove(filepath.Join(t.dir, "filler")) }

// drop drops the tablespace, once the harness has dropped the database on it, and unmounts.
func (h *harness) dropTablespace(t *tmpfsTablespace) {
	if h.o.keep {
		fmt.Printf("tablespace %s kept on the tmpfs at %s\n", t.name, t.dir)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := h.admin.Exec(ctx, "DROP TABLESPACE IF EXISTS "+pgx.Identifier{t.name}.Sanitize()); err != nil {
		fmt.Fprintf(os.Stderr, "faults: drop tablespace %s: %v\n", t.name, err)
	}
	t.unmount()
}

func (t *tmpfsTablespace) unmount() {
	if out, err := exec.Command("umount", t.dir).CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "faults: umount %s: %v: %s; detaching it lazily\n", t.dir, err, bytes.TrimSpace(out))
		_ = exec.Command("umount", "-l", t.dir).Run()
	}
	_ = os.Remove(t.dir)
}

// readySampler asks /readyz every 100 ms until stopped and counts answers that are not the
// full disk's 503: while the disk is full, not one may say ready.
type readySampler struct {
	stop    chan struct{}
	wg      sync.WaitGroup
	samples int
	other   []string
}

func sampleReady(ctx context.Context, addr, want string) *readySampler {
	s := &readySampler{stop: make(chan struct{})}
	s.wg.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			c, body := httpGet(ctx, "http://"+addr+"/readyz")
			s.samples++
			if c != http.StatusServiceUnavailable || !strings.Contains(body, want) {
				s.other = append(s.other, fmt.Sprintf("%d %s", c, strings.TrimSpace(body)))
			}
			select {
			case <-s.stop:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	return s
}

func (s *readySampler) end() {
	close(s.stop)
	s.wg.Wait()
}

// scenarioDaemonDiskFull: the tablespace under a running daemon's tables fills up and is freed
// again. Updates in place still succeed on the full disk, and must not end the state: /readyz
// says 503 naming disk_full in every sample while it is full, the metrics read 0, status
// --check exits 1 naming it, the provider hears nothing, and it is logged once when it starts
// and once when it ends; once freed the daemon is ready by itself and every item is fetched
// once and stored once.
func scenarioDaemonDiskFull(ctx context.Context, h *harness, r *report) error {
	if !h.hasRun(ctx) {
		r.skipped = "`collector run` is not in this binary (issue 7)"
		return nil
	}
	var tplSize int64
	if err := h.admin.QueryRow(ctx, `SELECT pg_database_size($1)`, h.tpl).Scan(&tplSize); err != nil {
		return err
	}
	ts, skip, err := h.mountTablespace(ctx, h.prefix+"_ts", tplSize+32<<20)
	if err != nil || skip != "" {
		r.skipped = skip
		return err
	}
	// The database stays for scenario 7's key scan; the harness drops it, then the tablespace.
	h.mu.Lock()
	h.afterDrop = append(h.afterDrop, func() { h.dropTablespace(ts) })
	h.mu.Unlock()
	defer func() { _ = ts.free() }() // on every path: the key scan reads the database later
	const items = 300
	d, err := h.scenarioDB(ctx, "ddiskfull", items, 100*time.Millisecond, "TABLESPACE "+pgx.Identifier{ts.name}.Sanitize())
	if err != nil {
		return err
	}
	p, addr, err := h.startWriteDaemon(ctx, d, "daemon-diskfull", d.url)
	if err != nil {
		return err
	}
	defer p.kill() // before the database is dropped, whatever happens

	filled, err := ts.fill()
	if err != nil {
		return fmt.Errorf("fill the tmpfs: %w", err)
	}
	const want = "database refuses writes (disk_full)"
	notReady, last, err := waitReady(ctx, addr, http.StatusServiceUnavailable, want, 30*time.Second)
	r.check(err == nil, "/readyz did not report %q within 30s of the disk filling: last %s", want, last)
	sampler := sampleReady(ctx, addr, want)
	_, metrics := httpGet(ctx, "http://"+addr+"/metrics")
	r.check(strings.Contains(metrics, "collector_database_writable 0") &&
		strings.Contains(metrics, `collector_database_write_refused{cause="disk_full"} 1`), "metrics while the disk is full lack writable 0 / refused{disk_full} 1")

	st, err := h.start(ctx, "status-check-diskfull", h.env(d.url), "status", "--check")
	if err != nil {
		sampler.end()
		return err
	}
	stCode, err := st.wait(ctx, time.Minute)
	stLine := lastErrorLine(st.output())
	r.check(err == nil && stCode == 1 && strings.Contains(stLine, want), "status --check while the disk is full: exit %d %v %q, want 1 naming %q", stCode, err, stLine, want)

	before, err := h.sim.stats(ctx)
	if err != nil {
		sampler.end()
		return err
	}
	select {
	case <-ctx.Done():
		sampler.end()
		return ctx.Err()
	case <-time.After(refusedFor):
	}
	during, err := h.sim.stats(ctx)
	sampler.end()
	if err != nil {
		return err
	}
	sent := during.Requests - before.Requests
	r.check(sent == 0, "%d provider requests while the disk was full", sent)
	r.check(len(sampler.other) == 0, "/readyz answered otherwise %d of %d times while the disk was full (first: %s)",
		len(sampler.other), sampler.samples, strings.Join(append(sampler.other, "")[:1], ""))
	r.check(!p.exited(), "daemon exited while the disk was full: %s", p.tail())

	if err := ts.free(); err != nil {
		return err
	}
	ready, last, err := waitReady(ctx, addr, http.StatusOK, "ready", 30*time.Second)
	r.check(err == nil, "/readyz not ready within 30s of the disk freed: last %s", last)
	caughtUp := collectedAll(ctx, r, d, p, items)
	retried := bytes.Count(p.output(), []byte(`"msg":"write-back failed; retrying"`))
	exit, scraped, err := h.stopWriteDaemon(ctx, r, d, p, items)
	if err != nil {
		return err
	}
	starts := bytes.Count(p.output(), []byte(`"msg":"the database refuses writes`))
	ends := bytes.Count(p.output(), []byte(`"msg":"the database takes writes again`))
	r.check(starts == 1 && ends == 1, "logged %d starts and %d ends of the refusal, want 1 and 1", starts, ends)
	r.num("tmpfs filled (%d MiB); /readyz 503 %q after %s, then in %d of %d samples over %s full",
		filled>>20, want, notReady.Round(100*time.Millisecond), sampler.samples-len(sampler.other), sampler.samples, refusedFor)
	r.num("status --check exit %d; %d provider requests while full; %d start and %d end logged", stCode, sent, starts, ends)
	r.num("ready %s after the disk was freed, all %d collected %s later, %d write-back retries, SIGTERM exit %d",
		ready.Round(100*time.Millisecond), items, caughtUp.Round(100*time.Millisecond), retried, exit)
	r.num("/metrics+/healthz+/readyz %d KiB saved for the key scan", scraped>>10)
	return nil
}
