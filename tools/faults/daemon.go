package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"
)

// hasRun reports whether the binary has the daemon (`collector run`, issue 7).
func (h *harness) hasRun(ctx context.Context) bool {
	return exec.CommandContext(ctx, h.bin, "run", "--help").Run() == nil
}

// daemonArgs starts the daemon with its probes and recovery at test speed (a hidden flag: no
// operator turns them, so they are no configuration keys).
var daemonArgs = []string{"run", "--test-timings"}

// daemonEnv makes the daemon react at test speed: short sleeps and leases.
func daemonEnv() []string {
	return []string{
		"COLLECTOR_DAEMON_HTTP_ADDR=127.0.0.1:0",
		"COLLECTOR_DAEMON_MAX_SLEEP=500ms",
		"COLLECTOR_DAEMON_SHUTDOWN_GRACE=5s",
		"COLLECTOR_COLLECT_CONCURRENCY=8",
		"COLLECTOR_COLLECT_LEASE=5s",
	}
}

// statusWatcher records every provider status it sees, polling fast enough to catch a
// RECOVERING phase of a few requests.
type statusWatcher struct {
	mu   sync.Mutex
	seen []string
	stop chan struct{}
	done chan struct{}
}

func watchStatus(ctx context.Context, d *database) *statusWatcher {
	w := &statusWatcher{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			var st string
			if err := d.pool.QueryRow(ctx, `SELECT status FROM provider_status WHERE provider = 'neople'`).Scan(&st); err == nil {
				w.mu.Lock()
				if len(w.seen) == 0 || w.seen[len(w.seen)-1] != st {
					w.seen = append(w.seen, st)
				}
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return w
}

func (w *statusWatcher) history() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.seen...)
}

func (w *statusWatcher) last() string {
	h := w.history()
	if len(h) == 0 {
		return ""
	}
	return h[len(h)-1]
}

func (w *statusWatcher) close() {
	close(w.stop)
	<-w.done
}

// scenarioDaemonMaintenance: the daemon pauses on maintenance, probes, and comes back through
// RECOVERING to HEALTHY by itself, then collects the rest.
func scenarioDaemonMaintenance(ctx context.Context, h *harness, r *report) error {
	if !h.hasRun(ctx) {
		r.skipped = "`collector run` is not in this binary (issue 7)"
		return nil
	}
	const items = 300
	d, err := h.scenarioDB(ctx, "dmaint", items, 100*time.Millisecond)
	if err != nil {
		return err
	}
	w := watchStatus(ctx, d)
	defer w.close()
	p, err := h.start(ctx, "daemon-maint", h.env(d.url, daemonEnv()...), daemonArgs...)
	if err != nil {
		return err
	}
	if err := poll(ctx, time.Minute, 20*time.Millisecond, func() (bool, error) {
		st, err := h.sim.stats(ctx)
		return st.Requests >= 40 || p.exited(), err
	}); err != nil || p.exited() {
		return fmt.Errorf("daemon made no requests (%v): %s", err, p.tail())
	}
	if err := h.sim.maintenance(ctx, true); err != nil {
		return err
	}
	atSwitch, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	if err := poll(ctx, 30*time.Second, 20*time.Millisecond, func() (bool, error) {
		return w.last() == "MAINTENANCE" || p.exited(), nil
	}); err != nil {
		return fmt.Errorf("provider_status never became MAINTENANCE (%v), seen %v: %s", err, w.history(), p.tail())
	}
	paused, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	// Paused: what reaches the provider now are probes. Lift maintenance after two of them.
	if err := poll(ctx, 30*time.Second, 50*time.Millisecond, func() (bool, error) {
		st, err := h.sim.stats(ctx)
		return st.Maintenance >= paused.Maintenance+2 || p.exited(), err
	}); err != nil {
		return fmt.Errorf("no probe reached the provider during maintenance: %w", err)
	}
	during, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	served := (during.Requests - during.Maintenance) - (atSwitch.Requests - atSwitch.Maintenance)
	r.check(served <= 0, "%d requests served normally during maintenance", served)
	leasedDuring, err := d.count(ctx, `SELECT count(*) FROM tracked_items WHERE lease_expires_at > now()`)
	if err != nil {
		return err
	}
	if err := h.sim.maintenance(ctx, false); err != nil {
		return err
	}
	t0 := time.Now()
	if err := poll(ctx, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
		n, err := d.count(ctx, `SELECT count(DISTINCT item_id) FROM auction_snapshots`)
		return (n == items && w.last() == "HEALTHY") || p.exited(), err
	}); err != nil {
		r.check(false, "not HEALTHY with every item collected after maintenance ended (%v); statuses %v", err, w.history())
	}
	recovered := time.Since(t0)
	hist := w.history()
	r.check(strings.Contains(strings.Join(hist, ">"), "MAINTENANCE>RECOVERING>HEALTHY"), "status history %v, want ... MAINTENANCE > RECOVERING > HEALTHY", hist)
	r.check(leasedDuring == 0, "%d live leases while paused", leasedDuring)

	scraped, err := h.scrapeDaemon(ctx, p)
	r.check(err == nil, "scrape daemon: %v", err)
	p.signal(syscall.SIGTERM)
	code, err := p.wait(ctx, 30*time.Second)
	r.check(err == nil && code == 0, "daemon exit %d %v after SIGTERM: %s", code, err, p.tail())
	r.num("/metrics+/healthz+/readyz %d KiB saved for the key scan", scraped>>10)
	end, err := d.state(ctx)
	if err != nil {
		return err
	}
	r.check(end.withSnapshot == items && end.leased == 0, "%d/%d collected, %d leased", end.withSnapshot, items, end.leased)
	r.num("statuses %s", strings.Join(hist, ">"))
	r.num("served normally during maintenance %d, 503s until paused %d, then %d probes before lifting", served, paused.Maintenance, during.Maintenance-paused.Maintenance)
	r.num("HEALTHY and all %d collected %s after maintenance ended; SIGTERM exit %d", items, recovered.Round(100*time.Millisecond), code)
	return nil
}

// scenarioDaemonPG: the daemon's database connections are terminated repeatedly; it carries on
// unaided, collects everything, and still answers items made due afterwards.
func scenarioDaemonPG(ctx context.Context, h *harness, r *report) error {
	if !h.hasRun(ctx) {
		r.skipped = "`collector run` is not in this binary (issue 7)"
		return nil
	}
	const items = 300
	d, err := h.scenarioDB(ctx, "dpg", items, 100*time.Millisecond)
	if err != nil {
		return err
	}
	p, err := h.start(ctx, "daemon-pg", h.env(d.url, daemonEnv()...), daemonArgs...)
	if err != nil {
		return err
	}
	terminated, rounds := 0, 0
	for progress := 10; rounds < 4; progress += 30 {
		if _, err := d.waitSnapshots(ctx, p, progress, time.Minute); err != nil {
			return fmt.Errorf("no progress before termination %d: %w", rounds+1, err)
		}
		if p.exited() {
			return fmt.Errorf("daemon exited (%d) after %d terminations: %s", p.code, rounds, p.tail())
		}
		n, err := d.count(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = 'duecollector' AND datname = $1`, d.name)
		if err != nil {
			return err
		}
		terminated += n
		rounds++
	}
	t0 := time.Now()
	if err := poll(ctx, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
		n, err := d.count(ctx, `SELECT count(DISTINCT item_id) FROM auction_snapshots`)
		return n == items || p.exited(), err
	}); err != nil {
		r.check(false, "not every item collected: %v", err)
	}
	caughtUp := time.Since(t0)
	r.check(!p.exited(), "daemon exited (%d) instead of recovering: %s", p.code, p.tail())

	// Work made due after the last termination is still picked up by the same process.
	before, err := d.count(ctx, `SELECT count(*) FROM auction_snapshots`)
	if err != nil {
		return err
	}
	if err := d.makeDue(ctx, h.catalog[:50]); err != nil {
		return err
	}
	if _, err := d.waitSnapshots(ctx, p, before+50, time.Minute); err != nil {
		r.check(false, "items made due after the terminations were not collected: %v", err)
	}
	scraped, err := h.scrapeDaemon(ctx, p)
	r.check(err == nil, "scrape daemon: %v", err)
	p.signal(syscall.SIGTERM)
	code, err := p.wait(ctx, 30*time.Second)
	r.check(err == nil && code == 0, "daemon exit %d %v after SIGTERM: %s", code, err, p.tail())
	r.num("/metrics+/healthz+/readyz %d KiB saved for the key scan", scraped>>10)
	end, err := d.state(ctx)
	if err != nil {
		return err
	}
	r.check(end.withSnapshot == items && end.leased == 0 && end.due == 0, "%d/%d collected, %d leased, %d due", end.withSnapshot, items, end.leased, end.due)
	r.num("%d backends terminated in %d rounds, daemon alive", terminated, rounds)
	r.num("all %d collected %s after the last termination; +50 re-due collected", items, caughtUp.Round(100*time.Millisecond))
	r.num("snapshots %d, leased %d, due %d, SIGTERM exit %d", end.snapshots, end.leased, end.due, code)
	return nil
}

var daemonHTTPRE = regexp.MustCompile(`"http":"([^"]+)"`)

// scrapeDaemon saves the daemon's /metrics, /healthz and /readyz answers next to the process
// outputs, so scenario 7 searches them for the key too. It returns the bytes saved.
func (h *harness) scrapeDaemon(ctx context.Context, p *proc) (int, error) {
	addr, err := p.waitLog(ctx, 10*time.Second, daemonHTTPRE)
	if err != nil {
		return 0, fmt.Errorf("daemon HTTP address not in its log: %w", err)
	}
	var all []byte
	for _, path := range []string{"/metrics", "/healthz", "/readyz"} {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return 0, err
		}
		resp, err := adminHTTP.Do(req)
		if err != nil {
			return 0, fmt.Errorf("GET %s: %w", path, err)
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return 0, fmt.Errorf("GET %s: %w", path, err)
		}
		all = append(all, fmt.Sprintf("== GET %s: %d\n", path, resp.StatusCode)...)
		all = append(all, b...)
	}
	return len(all), os.WriteFile(filepath.Join(h.dir, "http-"+p.name+".log"), all, 0o600)
}
