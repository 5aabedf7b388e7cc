package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"
)

// scenarioHostileAnswers: a share of the answers carry hostile text (NUL, EUC-KR, gzip bytes,
// 20,000 Korean characters), rows dated 2099 or 2001, or another item's rows. Proves: the run
// exits 0, every item is stored or rescheduled with a clean last_error, no impossible date
// reaches the database or last_sale_at, the output stays readable; then a maintenance answer
// with NUL and EUC-KR bytes in its message still sets MAINTENANCE.
func scenarioHostileAnswers(ctx context.Context, h *harness, r *report) error {
	const items = 300
	d, err := h.scenarioDB(ctx, "hostile", items, 0)
	if err != nil {
		return err
	}
	if err := h.sim.setFaults(ctx, simFaults{HostileRate: 0.15, FutureRate: 0.1, AncientRate: 0.05, ForeignRate: 0.05}); err != nil {
		return err
	}
	p, err := h.collectDue(ctx, d, "hostile", nil, "--concurrency", "16")
	if err != nil {
		return err
	}
	code, err := p.wait(ctx, 3*time.Minute)
	r.check(err == nil && code == 0, "collect-due exit %d %v: %s", code, err, p.tail())
	end, err := d.state(ctx)
	if err != nil {
		return err
	}
	r.check(end.withSnapshot+end.failedStreak == items, "collected %d + failed %d != %d items", end.withSnapshot, end.failedStreak, items)
	r.check(end.leased == 0 && end.due == 0, "%d leased, %d still due", end.leased, end.due)
	var replaced, longest, badSales, future int
	err = d.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM tracked_items WHERE last_error LIKE '%' || chr(65533) || '%'),
		       (SELECT coalesce(max(char_length(last_error)), 0) FROM tracked_items),
		       (SELECT count(*) FROM auction_sales WHERE sold_at < '2005-01-01' OR sold_at > now() + interval '1 day'),
		       (SELECT count(*) FROM tracked_items WHERE last_sale_at > now() + interval '1 day')`).
		Scan(&replaced, &longest, &badSales, &future)
	if err != nil {
		return err
	}
	rejected, err := d.count(ctx, `SELECT count(*) FROM tracked_items WHERE last_outcome = 'rows_rejected'`)
	if err != nil {
		return err
	}
	r.check(replaced > 0, "no last_error holds U+FFFD: the hostile text was not injected or not cleaned")
	r.check(longest <= 501, "a last_error of %d characters (cap 500)", longest)
	r.check(badSales == 0 && future == 0, "%d sales and %d last_sale_at with impossible dates stored", badSales, future)
	r.check(rejected > 0, "no item failed with rows_rejected: the foreign rows were not injected")
	out := p.output()
	r.check(utf8.Valid(out) && !bytes.ContainsRune(out, 0), "collect-due's output is not clean UTF-8")
	r.num("collected %d, failed+rescheduled %d (rows_rejected %d), last_error with U+FFFD %d, longest %d",
		end.withSnapshot, end.failedStreak, rejected, replaced, longest)

	// Maintenance whose message is NUL and EUC-KR bytes.
	if err := h.sim.setFaults(ctx, simFaults{HostileMaintenance: true}); err != nil {
		return err
	}
	if err := h.sim.maintenance(ctx, true); err != nil {
		return err
	}
	defer func() { _ = h.sim.maintenance(context.WithoutCancel(ctx), false) }()
	if _, err := d.pool.Exec(ctx, `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
		return err
	}
	sum := h.runCollectDue(ctx, r, d, "hostile-maint", time.Minute, nil, "--concurrency", "4")
	var status, reason string
	if err := d.pool.QueryRow(ctx, `SELECT status, reason FROM provider_status WHERE provider = 'neople'`).Scan(&status, &reason); err != nil {
		return fmt.Errorf("provider_status after a hostile DNF980: %w", err)
	}
	leased, err := d.count(ctx, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL`)
	if err != nil {
		return err
	}
	r.check(status == "MAINTENANCE", "provider_status %s after a DNF980 with NUL/EUC-KR bytes, want MAINTENANCE", status)
	r.check(leased == 0, "%d leases left after the maintenance stop", leased)
	r.num("hostile DNF980: %s (%q), claimed %d released %d", status, truncate(reason, 60), sum.claimed, sum.released)
	return nil
}

// scenarioRetryAfter: every answer is 429 with Retry-After: 999999999. Proves: the key cools
// down for at most provider.MaxRetryAfterDefault (5m), collect-due exits 0 at once saying until
// when, and a second run facing that cool-down (longer than its leases) exits 0 at once too,
// sending nothing.
func scenarioRetryAfter(ctx context.Context, h *harness, r *report) error {
	const items = 50
	d, err := h.scenarioDB(ctx, "retryafter", items, 0)
	if err != nil {
		return err
	}
	if err := h.sim.setFaults(ctx, simFaults{RetryAfterRate: 1}); err != nil {
		return err
	}
	t0 := time.Now()
	p, err := h.collectDue(ctx, d, "retryafter", nil, "--concurrency", "4")
	if err != nil {
		return err
	}
	code, err := p.wait(ctx, time.Minute)
	first := time.Since(t0)
	r.check(err == nil && code == 0, "collect-due exit %d %v: %s", code, err, p.tail())
	r.check(bytes.Contains(p.output(), []byte("the key cools down until")), "the run does not say until when the key cools down: %s", p.tail())
	var left float64
	if err := d.pool.QueryRow(ctx, `SELECT coalesce(max(extract(epoch FROM until - now())), 0) FROM budget_cooldowns`).Scan(&left); err != nil {
		return err
	}
	r.check(left > 0 && left <= 5*60+5, "cool-down %.0fs after Retry-After 999999999, want 0 < it <= 300s", left)
	before, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	t1 := time.Now()
	p2, err := h.collectDue(ctx, d, "retryafter-again", nil, "--concurrency", "4")
	if err != nil {
		return err
	}
	code, err = p2.wait(ctx, time.Minute)
	second := time.Since(t1)
	after, err2 := h.sim.stats(ctx)
	if err2 != nil {
		return err2
	}
	r.check(err == nil && code == 0, "second collect-due exit %d %v: %s", code, err, p2.tail())
	r.check(bytes.Contains(p2.output(), []byte("the key cools down until")), "the second run does not say until when: %s", p2.tail())
	r.check(after.Requests == before.Requests, "%d requests sent during the cool-down", after.Requests-before.Requests)
	leased, err := d.count(ctx, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL`)
	if err != nil {
		return err
	}
	r.check(leased == 0, "%d leases left", leased)
	r.num("cool-down %.0fs; runs exited 0 after %s and %s; requests during the cool-down %d",
		left, first.Round(100*time.Millisecond), second.Round(100*time.Millisecond), after.Requests-before.Requests)
	return nil
}

// scenarioRefusedKey: the daemon runs 30 s with a key the provider refuses. Proves: it sends
// a handful of requests (not one storm per pass), /readyz says why, one error line, and
// SIGTERM still exits 0.
func scenarioRefusedKey(ctx context.Context, h *harness, r *report) error {
	if !h.hasRun(ctx) {
		r.skipped = "`collector run` is not in this binary"
		return nil
	}
	const items, window = 100, 30 * time.Second
	d, err := h.scenarioDB(ctx, "refused", items, 0)
	if err != nil {
		return err
	}
	before, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	env := append(daemonEnv(), "NEOPLE_MARKET_API_KEY=refused-"+randHex(8))
	p, err := h.start(ctx, "daemon-refused", h.env(d.url, env...), daemonArgs...)
	if err != nil {
		return err
	}
	addr, err := p.waitLog(ctx, 30*time.Second, daemonHTTPRE)
	if err != nil {
		return fmt.Errorf("daemon HTTP address not in its log: %w: %s", err, p.tail())
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(window):
	}
	after, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	code, body := httpGet(ctx, "http://"+addr+"/readyz")
	errLines := bytes.Count(p.output(), []byte("the provider refuses the market key"))
	p.signal(syscall.SIGTERM)
	exit, werr := p.wait(ctx, 30*time.Second)
	sent := after.Requests - before.Requests
	r.check(sent <= 20, "%d requests in %s with a refused key (want a handful: one pass and its check of another item, then one re-check per daemon.KeyRecheckDefault)", sent, window)
	r.check(code == http.StatusServiceUnavailable && strings.Contains(body, "refuses the market key"), "/readyz %d %q, want 503 naming the refused key", code, truncate(body, 120))
	r.check(errLines == 1, "%d error lines for the refused key in %s, want 1", errLines, window)
	r.check(werr == nil && exit == 0, "daemon exit %d %v after SIGTERM: %s", exit, werr, p.tail())
	r.num("%d requests in %s, /readyz %d, %d error line(s), SIGTERM exit %d", sent, window, code, errLines, exit)
	return nil
}

// scenarioWriteBackKilled: collect-due's write-back transactions have their connection
// terminated mid-transaction, ten times. Proves: the write-backs are retried, so one run
// stores every item and leaves no lease.
func scenarioWriteBackKilled(ctx context.Context, h *harness, r *report) error {
	// Fewer kills than the dispatcher's write attempts per group (8): when the others have
	// finished, the killer can catch one group's every attempt, and a group killed on every
	// attempt rightly gives up (its items handed back) instead of retrying forever.
	const items, kills = 300, 6
	d, err := h.scenarioDB(ctx, "wbkill", items, 20*time.Millisecond)
	if err != nil {
		return err
	}
	p, err := h.collectDue(ctx, d, "wbkill", nil, "--concurrency", "8")
	if err != nil {
		return err
	}
	killed := 0
	for killed < kills && !p.exited() && ctx.Err() == nil {
		var n int
		err := h.admin.QueryRow(ctx, `
			SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE datname = $1 AND pid <> pg_backend_pid()
			  AND (query LIKE '%INSERT INTO auction_snapshots%' OR query LIKE '%UPDATE tracked_items t%SET next_collect_at%' OR query LIKE '%FOR UPDATE OF t%')
			  AND state IN ('active', 'idle in transaction')`, d.name).Scan(&n)
		if err != nil {
			return err
		}
		killed += n
		time.Sleep(5 * time.Millisecond)
	}
	code, err := p.wait(ctx, 3*time.Minute)
	r.check(err == nil && code == 0, "collect-due exit %d %v: %s", code, err, p.tail())
	end, err := d.state(ctx)
	if err != nil {
		return err
	}
	retried := bytes.Count(p.output(), []byte("write-back failed; retrying"))
	r.check(killed > 0, "no write-back was caught mid-transaction")
	r.check(end.withSnapshot == items, "%d/%d items stored by the one run", end.withSnapshot, items)
	r.check(end.leased == 0, "%d leases left", end.leased)
	r.num("write-back connections killed %d, retries logged %d, stored %d/%d, leased %d", killed, retried, end.withSnapshot, items, end.leased)
	return nil
}

func httpGet(ctx context.Context, url string) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err.Error()
	}
	resp, err := adminHTTP.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
