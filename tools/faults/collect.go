package main

import (
	"bytes"
	"context"
	"fmt"
	"regexp"
	"strconv"
	"syscall"
	"time"
)

// collectDue starts `collector collect-due args...` against d.
func (h *harness) collectDue(ctx context.Context, d *database, name string, extraEnv []string, args ...string) (*proc, error) {
	return h.start(ctx, name, h.env(d.url, extraEnv...), append([]string{"collect-due"}, args...)...)
}

// runCollectDue runs collect-due to the end and checks it exits 0.
func (h *harness) runCollectDue(ctx context.Context, r *report, d *database, name string, timeout time.Duration, extraEnv []string, args ...string) summary {
	p, err := h.collectDue(ctx, d, name, extraEnv, args...)
	if err != nil {
		r.check(false, "%v", err)
		return summary{}
	}
	code, err := p.wait(ctx, timeout)
	r.check(err == nil && code == 0, "%s: exit %d %v: %s", name, code, err, p.tail())
	return parseSummary(p.output())
}

var summaryRE = regexp.MustCompile(`claimed=(\d+) collected=(\d+) failed=(\d+) fenced_out=(\d+) released=(\d+)`)

// summary is the line collect-due prints on stdout.
type summary struct{ claimed, collected, failed, fenced, released int }

func parseSummary(out []byte) summary {
	m := summaryRE.FindSubmatch(out)
	if m == nil {
		return summary{}
	}
	n := func(i int) int { v, _ := strconv.Atoi(string(m[i])); return v }
	return summary{n(1), n(2), n(3), n(4), n(5)}
}

// scenarioKill9: SIGKILL a collector holding leases; after they expire, a second run collects
// everything it held.
func scenarioKill9(ctx context.Context, h *harness, r *report) error {
	const items, lease = 200, 3 * time.Second
	d, err := h.scenarioDB(ctx, "kill9", items, 300*time.Millisecond)
	if err != nil {
		return err
	}
	p, err := h.collectDue(ctx, d, "kill9-victim", nil, "--lease", lease.String(), "--concurrency", "4")
	if err != nil {
		return err
	}
	got, err := d.waitSnapshots(ctx, p, 10, 60*time.Second)
	if err != nil {
		return fmt.Errorf("victim made no progress: %w: %s", err, p.tail())
	}
	if p.exited() {
		return fmt.Errorf("victim finished (exit %d) before it could be killed: %s", p.code, p.tail())
	}
	p.signal(syscall.SIGKILL)
	<-p.done
	at, err := d.state(ctx)
	if err != nil {
		return err
	}
	h.logf("killed after %d snapshots; %d leased", got, at.leased)
	r.check(at.leased > 0, "no lease was held at the kill: not mid-batch")

	t0 := time.Now()
	if err := d.waitLeasesExpired(ctx, 10*lease); err != nil {
		return fmt.Errorf("leases did not expire: %w", err)
	}
	expiredIn := time.Since(t0)
	if err := h.sim.setLatency(ctx, 0); err != nil {
		return err
	}
	sum := h.runCollectDue(ctx, r, d, "kill9-rerun", 2*time.Minute, nil, "--concurrency", "16")
	end, err := d.state(ctx)
	if err != nil {
		return err
	}
	r.check(end.withSnapshot == items, "%d of %d items have a snapshot", end.withSnapshot, items)
	r.check(end.leased == 0, "%d items still leased", end.leased)
	r.check(end.due == 0, "%d items still due", end.due)
	r.check(end.outbox == end.snapshots, "outbox %d != snapshots %d", end.outbox, end.snapshots)
	r.num("killed after %d snapshots holding %d leases", at.snapshots, at.leased)
	r.num("leases expired %s later", expiredIn.Round(100*time.Millisecond))
	r.num("re-run claimed %d", sum.claimed)
	r.num("%d/%d items collected, %d leased, %d due", end.withSnapshot, items, end.leased, end.due)
	return nil
}

// scenarioOverlap: 8 one-shots at once over 2,000 due items; each item fetched exactly once.
func scenarioOverlap(ctx context.Context, h *harness, r *report) error {
	const items, runs = 2000, 8
	d, err := h.scenarioDB(ctx, "overlap", items, 0)
	if err != nil {
		return err
	}
	procs := make([]*proc, runs)
	for i := range procs {
		// Small batches make the eight claim loops interleave for the whole run.
		if procs[i], err = h.collectDue(ctx, d, fmt.Sprintf("overlap-%d", i), nil, "--batch-size", "25", "--concurrency", "8"); err != nil {
			return err
		}
	}
	claimed, total := make([]int, runs), 0
	for i, p := range procs {
		code, err := p.wait(ctx, 3*time.Minute)
		r.check(err == nil && code == 0, "%s: exit %d %v: %s", p.name, code, err, p.tail())
		claimed[i] = parseSummary(p.output()).claimed
		total += claimed[i]
	}
	st, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	var once, twice, never int
	for _, it := range h.catalog[:items] {
		switch c := st.Items[it.ItemID]; {
		case c.Auction == 1 && c.AuctionSold == 1:
			once++
		case c.Auction == 0:
			never++
		default:
			twice++
		}
	}
	end, err := d.state(ctx)
	if err != nil {
		return err
	}
	r.check(once == items, "fetched exactly once: %d of %d (never %d, more than once %d)", once, items, never, twice)
	r.check(end.snapshots == items && end.withSnapshot == items, "snapshots %d for %d items, want %d", end.snapshots, end.withSnapshot, items)
	r.check(total == items, "processes claimed %d in total, want %d", total, items)
	r.check(end.leased == 0 && end.due == 0, "%d leased, %d due after the runs", end.leased, end.due)
	r.num("%d processes claimed %v (sum %d)", runs, claimed, total)
	r.num("sim auction requests once=%d more=%d never=%d", once, twice, never)
	r.num("snapshots %d", end.snapshots)
	if len(r.failures) == 0 {
		h.outboxDB = d
	}
	return nil
}

// scenarioMaintenance: maintenance switched on mid-run pauses every worker within one request.
func scenarioMaintenance(ctx context.Context, h *harness, r *report) error {
	const items, concurrency = 300, 8
	d, err := h.scenarioDB(ctx, "maint", items, 200*time.Millisecond)
	if err != nil {
		return err
	}
	p, err := h.collectDue(ctx, d, "maint", nil, "--concurrency", fmt.Sprint(concurrency))
	if err != nil {
		return err
	}
	if err := poll(ctx, time.Minute, 20*time.Millisecond, func() (bool, error) {
		st, err := h.sim.stats(ctx)
		return st.Requests >= 40 || p.exited(), err
	}); err != nil {
		return fmt.Errorf("collect-due made no requests: %w: %s", err, p.tail())
	}
	if p.exited() {
		return fmt.Errorf("collect-due ended (exit %d) before maintenance: %s", p.code, p.tail())
	}
	if err := h.sim.maintenance(ctx, true); err != nil {
		return err
	}
	// Read after the switch: an upper bound of what was admitted before it.
	atSwitch, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	code, err := p.wait(ctx, time.Minute)
	r.check(err == nil && code == 0, "collect-due exit %d %v, want 0: %s", code, err, p.tail())
	final, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	servedAfter := (final.Requests - final.Maintenance) - (atSwitch.Requests - atSwitch.Maintenance)
	r.check(final.Maintenance <= concurrency, "%d requests hit maintenance, want <= concurrency %d", final.Maintenance, concurrency)
	r.check(servedAfter <= 0, "%d requests served normally after the switch", servedAfter)

	var status string
	if err := d.pool.QueryRow(ctx, `SELECT status FROM provider_status WHERE provider = 'neople'`).Scan(&status); err != nil {
		return err
	}
	end, err := d.state(ctx)
	if err != nil {
		return err
	}
	r.check(status == "MAINTENANCE", "provider_status %s, want MAINTENANCE", status)
	r.check(end.leased == 0, "%d leases left", end.leased)
	r.check(end.withSnapshot+end.due == items, "collected %d + still due %d != %d items: some were lost", end.withSnapshot, end.due, items)

	// While MAINTENANCE, a new run claims nothing and does not touch the provider.
	before := final.Requests
	again := h.runCollectDue(ctx, r, d, "maint-paused", time.Minute, nil)
	after, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	r.check(again.claimed == 0 && after.Requests == before, "paused run claimed %d and made %d requests", again.claimed, after.Requests-before)

	r.num("requests at switch %d, final %d, maintenance answers %d (concurrency %d)", atSwitch.Requests, final.Requests, final.Maintenance, concurrency)
	r.num("collected %d, still due %d, leased %d, status %s", end.withSnapshot, end.due, end.leased, status)
	r.num("paused re-run: %d requests", after.Requests-before)
	return nil
}

// scenarioBadBodies: truncated, oversized, erroring, timing out and wrongly typed answers are
// per-item failures: the run finishes, the items are rescheduled, nothing stays leased.
func scenarioBadBodies(ctx context.Context, h *harness, r *report) error {
	const items = 300
	d, err := h.scenarioDB(ctx, "bodies", items, 0)
	if err != nil {
		return err
	}
	if err := h.sim.setFaults(ctx, simFaults{ErrorRate: 0.1, MalformedRate: 0.1, OversizeRate: 0.02, TimeoutRate: 0.01}); err != nil {
		return err
	}
	proxy, err := startWrongTypeProxy(h.simURL, 0.08)
	if err != nil {
		return err
	}
	defer proxy.close()
	sum := h.runCollectDue(ctx, r, d, "bodies", 3*time.Minute,
		[]string{"NEOPLE_API_BASE_URL=" + proxy.url, "COLLECTOR_PROVIDER_TIMEOUT=2s"}, "--concurrency", "16")
	end, err := d.state(ctx)
	if err != nil {
		return err
	}
	st, err := h.sim.stats(ctx)
	if err != nil {
		return err
	}
	outcomes := map[string]int{}
	rows, err := d.pool.Query(ctx, `SELECT coalesce(last_outcome, 'none'), count(*) FROM tracked_items GROUP BY 1 ORDER BY 1`)
	if err != nil {
		return err
	}
	for rows.Next() {
		var o string
		var n int
		if err := rows.Scan(&o, &n); err != nil {
			return err
		}
		outcomes[o] = n
	}
	if err := rows.Err(); err != nil {
		return err
	}
	r.check(end.failedStreak > 0, "no item failed: the faults were not injected")
	r.check(end.withSnapshot+end.failedStreak == items, "collected %d + failed %d != %d items", end.withSnapshot, end.failedStreak, items)
	r.check(end.failedPastDue == 0, "%d failed items not rescheduled into the future", end.failedPastDue)
	r.check(end.leased == 0, "%d leases left", end.leased)
	r.check(end.due == 0, "%d items still due", end.due)
	r.check(sum.claimed == items, "claimed %d, want %d", sum.claimed, items)
	r.check(!panicked(h.dir), "a process panicked (see logs)")
	r.num("sim faults %d + wrongly typed %d of %d requests", st.Faults, proxy.rewrote.Load(), st.Requests)
	r.num("outcomes %v", outcomes)
	r.num("collected %d, failed+rescheduled %d, leased %d", end.withSnapshot, end.failedStreak, end.leased)
	return nil
}

// scenarioPGTerminate: the collector's database connections are killed mid-run; whatever the
// process does, nothing stays leased past expiry and a re-run collects everything.
func scenarioPGTerminate(ctx context.Context, h *harness, r *report) error {
	const items, lease = 300, 5 * time.Second
	d, err := h.scenarioDB(ctx, "pgkill", items, 200*time.Millisecond)
	if err != nil {
		return err
	}
	p, err := h.collectDue(ctx, d, "pgkill", nil, "--concurrency", "8", "--lease", lease.String(), "--batch-size", "50")
	if err != nil {
		return err
	}
	terminated, rounds := 0, 0
	for progress := 10; rounds < 3 && !p.exited(); progress += 20 {
		if _, err := d.waitSnapshots(ctx, p, progress, time.Minute); err != nil {
			return fmt.Errorf("no progress before termination %d: %w", rounds+1, err)
		}
		if p.exited() {
			break
		}
		n, err := d.count(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
			WHERE application_name = 'duecollector' AND datname = $1`, d.name)
		if err != nil {
			return err
		}
		terminated += n
		rounds++
		h.logf("terminated %d backends", n)
	}
	code, werr := p.wait(ctx, 2*time.Minute)
	r.check(werr == nil, "collect-due did not end: %v", werr)
	first := parseSummary(p.output())
	failedWrites := bytes.Count(p.output(), []byte(`"msg":"write-back failed"`))
	mid, err := d.state(ctx)
	if err != nil {
		return err
	}
	t0 := time.Now()
	if err := d.waitLeasesExpired(ctx, 10*lease); err != nil {
		r.check(false, "leases stuck beyond expiry: %v", err)
	}
	expired := time.Since(t0)
	if err := h.sim.setLatency(ctx, 0); err != nil {
		return err
	}
	sum := h.runCollectDue(ctx, r, d, "pgkill-rerun", 2*time.Minute, nil, "--concurrency", "16")
	end, err := d.state(ctx)
	if err != nil {
		return err
	}
	r.check(terminated > 0, "no backend was terminated")
	r.check(end.withSnapshot == items, "%d of %d items have a snapshot", end.withSnapshot, items)
	r.check(end.leased == 0 && end.due == 0, "%d leased, %d due after the re-run", end.leased, end.due)
	r.num("%d backends terminated in %d rounds", terminated, rounds)
	r.num("first run: exit %d, claimed %d, collected %d, %d write-backs failed, %d leases left (expired %s later)",
		code, first.claimed, first.collected, failedWrites, mid.leased, expired.Round(100*time.Millisecond))
	r.num("re-run claimed %d; %d/%d collected", sum.claimed, end.withSnapshot, items)
	return nil
}
