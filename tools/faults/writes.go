package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
)

// refusedFor is how long the database refuses writes (or is gone) in scenarios 9 and 9b: well
// within the lease those scenarios give the daemon (writeLease), so results fetched when it
// went are still ours when it comes back.
const (
	refusedFor = 10 * time.Second
	writeLease = 45 * time.Second
)

// waitReady polls path until the answer has code and contains want; it returns how long that took.
func waitReady(ctx context.Context, addr string, code int, want string, timeout time.Duration) (time.Duration, string, error) {
	t0 := time.Now()
	var last string
	err := poll(ctx, timeout, 50*time.Millisecond, func() (bool, error) {
		c, body := httpGet(ctx, "http://"+addr+"/readyz")
		last = fmt.Sprintf("%d %s", c, strings.TrimSpace(body))
		return c == code && strings.Contains(body, want), nil
	})
	return time.Since(t0), last, err
}

// setReadOnly switches the database's new sessions to read-only or back. Switching on cuts
// the collectors' sessions, as a failover does, so they reconnect into the read-only state;
// switching back cuts nothing: the daemon must notice by itself.
func (h *harness) setReadOnly(ctx context.Context, d *database, on bool) (int, error) {
	q := "ALTER DATABASE " + pgx.Identifier{d.name}.Sanitize() + " RESET default_transaction_read_only"
	if on {
		q = "ALTER DATABASE " + pgx.Identifier{d.name}.Sanitize() + " SET default_transaction_read_only = on"
	}
	if _, err := h.admin.Exec(ctx, q); err != nil {
		return 0, fmt.Errorf("%s: %w", q, err)
	}
	if !on {
		return 0, nil
	}
	return d.count(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
		WHERE application_name = 'duecollector' AND datname = $1`, d.name)
}

// onceEach checks every item was fetched once and has exactly one snapshot: nothing fetched
// when writes stopped was dropped and fetched again, nothing stored twice.
func (h *harness) onceEach(ctx context.Context, r *report, d *database, items int) error {
	st, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	refetched := 0
	for _, it := range h.catalog[:items] {
		if st.Items[it.ItemID].Auction != 1 {
			refetched++
		}
	}
	end, err := d.state(ctx)
	if err != nil {
		return err
	}
	r.check(refetched == 0, "%d of %d items fetched other than once (results dropped and fetched again?)", refetched, items)
	r.check(end.withSnapshot == items && end.snapshots == items, "%d snapshots of %d items, want one each of %d", end.snapshots, end.withSnapshot, items)
	r.check(end.leased == 0 && end.due == 0, "%d leased, %d due at the end", end.leased, end.due)
	return nil
}

// startWriteDaemon starts `collector run` on dbURL with env and the lease writeLease, and
// waits for its HTTP address and some progress.
func (h *harness) startWriteDaemon(ctx context.Context, d *database, name, dbURL string, env ...string) (*proc, string, error) {
	p, err := h.start(ctx, name, h.env(dbURL, append(append(daemonEnv(), env...), "COLLECTOR_COLLECT_LEASE="+writeLease.String())...), daemonArgs...)
	if err != nil {
		return nil, "", err
	}
	addr, err := p.waitLog(ctx, 30*time.Second, daemonHTTPRE)
	if err != nil {
		return nil, "", fmt.Errorf("daemon HTTP address: %w: %s", err, p.tail())
	}
	if _, err := d.waitSnapshots(ctx, p, 60, time.Minute); err != nil || p.exited() {
		return nil, "", fmt.Errorf("no progress before the fault (%v): %s", err, p.tail())
	}
	return p, addr, nil
}

// collectedAll waits until every one of items has a snapshot and returns how long that took.
func collectedAll(ctx context.Context, r *report, d *database, p *proc, items int) time.Duration {
	t0 := time.Now()
	if err := poll(ctx, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
		n, err := d.count(ctx, `SELECT count(DISTINCT item_id) FROM auction_snapshots`)
		return n == items || p.exited(), err
	}); err != nil {
		r.check(false, "not every item collected after the database came back: %v", err)
	}
	return time.Since(t0)
}

// stopWriteDaemon saves the daemon's HTTP answers for the key scan, stops it with SIGTERM (it
// must exit 0), and checks every item was fetched and stored once.
func (h *harness) stopWriteDaemon(ctx context.Context, r *report, d *database, p *proc, items int) (exit, scraped int, err error) {
	scraped, serr := h.scrapeDaemon(ctx, p)
	r.check(serr == nil, "scrape daemon: %v", serr)
	p.signal(syscall.SIGTERM)
	exit, werr := p.wait(ctx, 30*time.Second)
	r.check(werr == nil && exit == 0, "daemon exit %d %v after SIGTERM: %s", exit, werr, p.tail())
	return exit, scraped, h.onceEach(ctx, r, d, items)
}

// scenarioDaemonReadOnly: the database under a running daemon turns read-only (its sessions
// cut, as a failover does). /readyz turns 503 naming the cause within seconds while /healthz
// stays 200, `collector status --check` fails naming it, the provider hears nothing; when
// writes come back the daemon resumes by itself, and what it had fetched is written, not
// fetched again.
func scenarioDaemonReadOnly(ctx context.Context, h *harness, r *report) error {
	if !h.hasRun(ctx) {
		r.skipped = "`collector run` is not in this binary (issue 7)"
		return nil
	}
	const items = 300
	d, err := h.scenarioDB(ctx, "dro", items, 100*time.Millisecond)
	if err != nil {
		return err
	}
	p, addr, err := h.startWriteDaemon(ctx, d, "daemon-ro", d.url)
	if err != nil {
		return err
	}
	cut, err := h.setReadOnly(ctx, d, true)
	if err != nil {
		return err
	}
	const want = "database refuses writes (read_only)"
	notReady, last, err := waitReady(ctx, addr, http.StatusServiceUnavailable, want, 30*time.Second)
	r.check(err == nil, "/readyz did not report %q within 30s: last %s", want, last)
	r.check(notReady <= 5*time.Second, "/readyz took %s to report the read-only database, want a few seconds", notReady.Round(100*time.Millisecond))
	code, body := httpGet(ctx, "http://"+addr+"/healthz")
	r.check(code == http.StatusOK, "/healthz while read-only: %d %s, want 200", code, body)
	_, metrics := httpGet(ctx, "http://"+addr+"/metrics")
	r.check(strings.Contains(metrics, "collector_database_writable 0") &&
		strings.Contains(metrics, `collector_database_write_refused{cause="read_only"} 1`), "metrics while read-only lack writable 0 / refused{read_only} 1")

	st, err := h.start(ctx, "status-check-ro", h.env(d.url), "status", "--check")
	if err != nil {
		return err
	}
	stCode, err := st.wait(ctx, time.Minute)
	stLine := lastErrorLine(st.output())
	r.check(err == nil && stCode == 1 && strings.Contains(stLine, want), "status --check while read-only: exit %d %v %q, want 1 naming %q", stCode, err, stLine, want)

	// What was in flight at the switch has ended by now; from here the provider hears nothing.
	before, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	snapsBefore, err := d.count(ctx, `SELECT count(*) FROM auction_snapshots`)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(refusedFor):
	}
	during, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	snapsAfter, err := d.count(ctx, `SELECT count(*) FROM auction_snapshots`)
	if err != nil {
		return err
	}
	rc, body := httpGet(ctx, "http://"+addr+"/readyz")
	r.check(rc == http.StatusServiceUnavailable, "/readyz turned %d (%s) while still read-only", rc, strings.TrimSpace(body))
	sent := during.Requests - before.Requests
	r.check(sent == 0, "%d provider requests while the database refused writes", sent)
	r.check(!p.exited(), "daemon exited while read-only: %s", p.tail())

	if _, err := h.setReadOnly(ctx, d, false); err != nil {
		return err
	}
	ready, last, err := waitReady(ctx, addr, http.StatusOK, "ready", 30*time.Second)
	r.check(err == nil, "/readyz not ready within 30s of writes coming back: last %s", last)
	caughtUp := collectedAll(ctx, r, d, p, items)
	retried := bytes.Count(p.output(), []byte(`"msg":"write-back failed; retrying"`))
	exit, scraped, err := h.stopWriteDaemon(ctx, r, d, p, items)
	if err != nil {
		return err
	}
	r.num("%d sessions cut; /readyz 503 %q after %s, /healthz %d", cut, want, notReady.Round(100*time.Millisecond), code)
	r.check(snapsAfter == snapsBefore, "%d snapshots stored while the database was read-only", snapsAfter-snapsBefore)
	r.num("status --check exit %d; %d provider requests in %s read-only", stCode, sent, refusedFor)
	r.num("ready %s after writes came back, all %d collected %s later, %d write-back retries, SIGTERM exit %d",
		ready.Round(100*time.Millisecond), items, caughtUp.Round(100*time.Millisecond), retried, exit)
	r.num("/metrics+/healthz+/readyz %d KiB saved for the key scan", scraped>>10)
	return nil
}

// pgProxy stands between collectors and PostgreSQL: down closes every connection and the
// listening port, so new connections are refused, and up listens again on the same port. That
// is what a full restart of the server looks like from the collectors' side, without
// restarting the machine's shared cluster.
type pgProxy struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        map[net.Conn]bool
	wg           sync.WaitGroup
}

func startPGProxy(target string) (*pgProxy, error) {
	p := &pgProxy{target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p.addr = ln.Addr().String()
	p.serve(ln)
	return p, nil
}

func (p *pgProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Go(func() { p.pipe(c) })
		}
	})
}

func (p *pgProxy) pipe(c net.Conn) {
	s, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil {
		_ = c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // went down meanwhile
		p.mu.Unlock()
		_ = c.Close()
		_ = s.Close()
		return
	}
	p.conns[c], p.conns[s] = true, true
	p.mu.Unlock()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go cp(s, c)
	go cp(c, s)
	<-done
	_ = c.Close()
	_ = s.Close()
	<-done
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// down closes the port and every connection through it; it returns how many were cut.
func (p *pgProxy) down() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		_ = p.ln.Close()
		p.ln = nil
	}
	n := len(p.conns) / 2
	for c := range p.conns {
		_ = c.Close()
	}
	return n
}

// up listens on the same port again.
func (p *pgProxy) up() error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("proxy listen again on %s: %w", p.addr, err)
	}
	p.serve(ln)
	return nil
}

func (p *pgProxy) close() {
	p.down()
	p.wg.Wait()
}

// via is u with its host the proxy's.
func (p *pgProxy) via(u string) (string, error) {
	parsed, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	parsed.Host = p.addr
	return parsed.String(), nil
}

// scenarioPGRestart: PostgreSQL goes away entirely under a running daemon and its relay — every
// connection cut, new ones refused for refusedFor — and comes back. The daemon reports not
// ready meanwhile and stays live, sends the provider nothing, and without a restart collects
// everything, writes what it had fetched instead of fetching it again, leaves no lease behind,
// and its relay publishes every outbox event (at least once, per item in order).
func scenarioPGRestart(ctx context.Context, h *harness, r *report) error {
	if !h.hasRun(ctx) {
		r.skipped = "`collector run` is not in this binary (issue 7)"
		return nil
	}
	const items = 300
	d, err := h.scenarioDB(ctx, "drestart", items, 100*time.Millisecond)
	if err != nil {
		return err
	}
	pg, err := url.Parse(d.url)
	if err != nil {
		return err
	}
	proxy, err := startPGProxy(pg.Host)
	if err != nil {
		return err
	}
	defer proxy.close()
	viaProxy, err := proxy.via(d.url)
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	broker := fmt.Sprintf("127.0.0.1:%d", port)
	cluster, err := kfake.NewCluster(kfake.Ports(port), kfake.SeedTopics(6, topic))
	if err != nil {
		return fmt.Errorf("start kfake on %s: %w", broker, err)
	}
	defer cluster.Close()

	p, addr, err := h.startWriteDaemon(ctx, d, "daemon-restart", viaProxy, relayEnv(broker)...)
	if err != nil {
		return err
	}

	// FAULTS_PG_RESTART=real (CI sets it: nothing else uses the cluster while the suite runs)
	// stops and starts the real cluster; otherwise the proxy models the restart, so a developer's
	// other work on the shared cluster goes on undisturbed.
	real := os.Getenv("FAULTS_PG_RESTART") == "real"
	var cut int
	if real {
		if err := pgCluster(ctx, "stop", "-m", "fast"); err != nil {
			return err
		}
	} else {
		cut = proxy.down()
	}
	downAt := time.Now()
	notReady, last, err := waitReady(ctx, addr, http.StatusServiceUnavailable, "database", 30*time.Second)
	r.check(err == nil, "/readyz did not report the database gone within 30s: last %s", last)
	code, body := httpGet(ctx, "http://"+addr+"/healthz")
	r.check(code == http.StatusOK, "/healthz while the database is down: %d %s, want 200", code, body)
	// Calls in flight at the cut (100 ms each) have ended a second later; from then on the
	// provider hears nothing.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(downAt.Add(time.Second))):
	}
	before, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Until(downAt.Add(refusedFor))):
	}
	during, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	sent := during.Requests - before.Requests
	r.check(sent == 0, "%d provider requests while the database was down", sent)
	r.check(!p.exited(), "daemon exited while the database was down: %s", p.tail())
	if real {
		// The restart closed the harness's own admin connection too.
		if err = pgCluster(ctx, "start"); err == nil {
			err = h.reconnectAdmin(ctx)
		}
	} else {
		err = proxy.up()
	}
	if err != nil {
		return err
	}
	downFor := time.Since(downAt)

	ready, last, err := waitReady(ctx, addr, http.StatusOK, "ready", time.Minute)
	r.check(err == nil, "/readyz not ready within a minute of the database coming back: last %s", last)
	caughtUp := collectedAll(ctx, r, d, p, items)
	total, err := d.count(ctx, `SELECT count(*) FROM outbox`)
	if err != nil {
		return err
	}
	if err := poll(ctx, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
		n, err := d.count(ctx, `SELECT count(*) FROM outbox_events WHERE state <> 'published'`)
		return n == 0 || p.exited(), err
	}); err != nil {
		r.check(false, "outbox not drained after the restart: %v", err)
	}
	exit, scraped, err := h.stopWriteDaemon(ctx, r, d, p, items)
	if err != nil {
		return err
	}
	consumed, err := consumeAll(ctx, broker, total)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		r.check(false, "consume: %v", err)
	}
	lost, dupes, misordered, err := compareOutbox(ctx, d, consumed)
	if err != nil {
		return err
	}
	r.check(total == items, "%d outbox events, want one per snapshot (%d)", total, items)
	r.check(lost == 0, "%d events lost", lost)
	r.check(misordered == 0, "%d items out of order", misordered)
	model := fmt.Sprintf("proxy model of a restart: %d connections cut", cut)
	if real {
		model = "real restart (pg_ctlcluster stop -m fast, then start)"
	}
	r.num("%s, down for %s; /readyz 503 after %s, /healthz %d",
		model, downFor.Round(100*time.Millisecond), notReady.Round(100*time.Millisecond), code)
	r.num("%d provider requests while down; ready %s after, all %d collected %s after", sent, ready.Round(100*time.Millisecond), items, caughtUp.Round(100*time.Millisecond))
	r.num("%d events, %d consumed, lost %d, duplicates %d, out of order %d; SIGTERM exit %d", total, len(consumed), lost, dupes, misordered, exit)
	r.num("/metrics+/healthz+/readyz %d KiB saved for the key scan", scraped>>10)
	return nil
}

// pgCluster runs pg_ctlcluster on the local cluster (the first version under /etc/postgresql),
// as .ci/run starts it.
func pgCluster(ctx context.Context, action string, args ...string) error {
	versions, err := os.ReadDir("/etc/postgresql")
	if err != nil || len(versions) == 0 {
		return fmt.Errorf("FAULTS_PG_RESTART=real needs a local cluster under /etc/postgresql: %v", err)
	}
	argv := append([]string{"--skip-systemctl-redirect", versions[0].Name(), "main", action}, args...)
	if out, err := exec.CommandContext(ctx, "pg_ctlcluster", argv...).CombinedOutput(); err != nil {
		return fmt.Errorf("pg_ctlcluster %s: %w\n%s", strings.Join(argv, " "), err, out)
	}
	return nil
}
