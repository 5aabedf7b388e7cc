package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"syscall"
	"time"

	"github.com/duecollector/duecollector/internal/health"
)

// The freeze matrix (scenario F): a holder stopped with SIGSTOP at a seeded moment, as a
// paused VM or a stalled host stops it, while another instance takes its work over once its
// leases run out; then resumed with SIGCONT. A killed holder is gone; a frozen one comes back
// believing it still holds what it held, with answers, batches and transactions half done.
// Everything it then writes on the strength of what it held must be refused, and it must find
// its feet: a one-shot ends without writing, a daemon or relay takes its share of the work
// again, alone once the other instance stops. The kill matrix's checks (verify) hold after.

type freezeRole struct {
	name   string
	target time.Duration // the takeover's: the lease it holds + killSlack
	run    func(ctx context.Context, k *killRun, moment float64) (time.Duration, error)
}

var freezeRoles = []freezeRole{
	{"frozen collect-due", killLease + killSlack, freezeCollectDue},
	{"frozen collect ITEM_ID", killLease + killSlack, freezeCollectOne},
	{"frozen relay-outbox", killLease + killSlack, freezeRelay},
	{"frozen relay-outbox --once", killLease + killSlack, freezeRelayOnce},
	{"frozen run", killLease + killSlack, freezeDaemon},
	{"frozen run (probing)", health.TestTimings.ProbeLease + killSlack, freezeProber},
}

// freezeIdleInTransaction is the database's idle_in_transaction_session_timeout in the
// matrix: a holder frozen inside a transaction keeps its row locks until the server ends it,
// and at the matrix's 3 s leases the default 60 s bound would be the takeover time.
// (Production leases, 2 minutes, outlast the default.) An operator's bound is kept by the
// collector, so this is also the path an operator takes.
const freezeIdleInTransaction = 2 * time.Second

// scenarioFreezeMatrix freezes every freeze role at -kill-moments seeded moments.
func scenarioFreezeMatrix(ctx context.Context, h *harness, r *report) error {
	if !h.hasRun(ctx) {
		r.skipped = "`collector run` is not in this binary"
		return nil
	}
	worst := map[string]time.Duration{}
	for _, fr := range freezeRoles {
		if h.o.killRoles != nil && !h.o.killRoles[fr.name] {
			continue
		}
		role := killRole{name: fr.name, target: fr.target, run: func(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
			// Before any process connects: the bound is each session's own.
			if _, err := k.d.pool.Exec(ctx, fmt.Sprintf(`ALTER DATABASE %q SET idle_in_transaction_session_timeout = '%dms'`,
				k.d.name, freezeIdleInTransaction.Milliseconds())); err != nil {
				return 0, err
			}
			return fr.run(ctx, k, moment)
		}}
		rng := rand.New(rand.NewPCG(h.o.killSeed, roleSeed(role.name)))
		met := 0
		for m := range h.o.killMoments {
			moment := rng.Float64()
			label := fmt.Sprintf("%s #%d (seed %d, moment %.2f)", role.name, m+1, h.o.killSeed, moment)
			h.logf("freeze matrix: %s", label)
			k, took, err := h.killOnce(ctx, r, role, label, m, moment, 0)
			if k.hit > 0 && k.heldWork {
				met++
			}
			if err != nil {
				r.check(false, "%s: %v", label, err)
				continue
			}
			r.check(took <= role.target, "%s: taken over in %s, target %s", label, took.Round(100*time.Millisecond), role.target)
			worst[role.name] = max(worst[role.name], took)
		}
		r.check(met > 0, "%s: none of %d freezes met the process alive and holding work", role.name, h.o.killMoments)
	}
	for _, fr := range freezeRoles {
		if w, ok := worst[fr.name]; ok {
			r.num("%s %s", fr.name, w.Round(100*time.Millisecond))
		}
	}
	r.num("worst takeover (freeze → work resumed by another; for the prober, the provider out of DEGRADED) per role over %d moments (seed %d), target the lease (%s; the probe's %s) + %s; every resumed holder's writes refused",
		h.o.killMoments, h.o.killSeed, killLease, health.TestTimings.ProbeLease, killSlack)
	return nil
}

// freezeAt stops p with SIGSTOP at moment of window after its first sign of work, and returns
// once the kernel shows it stopped (or it had exited).
func (k *killRun) freezeAt(ctx context.Context, p *proc, started func() (bool, error), window time.Duration, moment float64) (time.Time, error) {
	at, err := k.signalAt(ctx, p, started, window, moment, syscall.SIGSTOP)
	if err != nil {
		return at, err
	}
	return at, poll(ctx, 10*time.Second, 5*time.Millisecond, func() (bool, error) {
		return p.exited() || processState(p.cmd.Process.Pid) == 'T', nil
	})
}

// processState is the state letter of /proc/PID/stat ('T': stopped by a signal).
func processState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name, in parentheses, may hold spaces: the state follows its last ')'.
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2]
	}
	return 0
}

// resume sends SIGCONT to a frozen p.
func (k *killRun) resume(p *proc) {
	p.signal(syscall.SIGCONT)
	k.h.logf("%s: %s resumed", k.label, p.name)
}

// fingerprint is what a one-shot collector may change: every item's row, and the rows of
// history and the outbox.
func (k *killRun) fingerprint(ctx context.Context) (string, error) {
	var f string
	err := k.d.pool.QueryRow(ctx, `
		SELECT md5(coalesce((SELECT string_agg(t::text, '|' ORDER BY item_id) FROM tracked_items t), ''))
		    || ' ' || (SELECT count(*) FROM auction_snapshots) || ' snapshots, '
		    || (SELECT count(*) FROM auction_sales) || ' sales, ' || (SELECT count(*) FROM outbox) || ' events'`).Scan(&f)
	return f, err
}

// checkResumedCleanly: a resumed process that exited did so on its own terms: no panic, and an
// exit code a scheduler reads as "ran" (0) or "a run that failed" (1), never a usage error.
func (k *killRun) checkResumedCleanly(p *proc) {
	out := p.output()
	k.r.check(!bytes.Contains(out, []byte("panic")), "%s: the resumed %s panicked: %s", k.label, p.name, p.tail())
	if p.exited() {
		k.r.check(p.code == 0 || p.code == 1, "%s: the resumed %s exited %d: %s", k.label, p.name, p.code, p.tail())
	}
}

// stopDaemon stops a follower (daemon or relay) with SIGTERM and wants exit 0.
func stopDaemon(ctx context.Context, p *proc, what string) error {
	p.signal(syscall.SIGTERM)
	if code, err := p.wait(ctx, 30*time.Second); err != nil || code != 0 {
		return fmt.Errorf("%s: exit %d %v after SIGTERM: %s", what, code, err, p.tail())
	}
	return nil
}

// freezeCollectDue: collect-due frozen mid-batch, its calls at the provider. Cron's
// collect-due takes its items once their leases run out and collects everything; then the
// frozen run resumes with answers for items no longer its own. It must write nothing (every
// item's row, history and the outbox as cron left them) and end by itself.
func freezeCollectDue(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
	if _, err := k.d.pool.Exec(ctx, `DELETE FROM tracked_items WHERE item_id NOT IN (
		SELECT item_id FROM tracked_items ORDER BY item_id LIMIT $1)`, killItems/3); err != nil {
		return 0, err
	}
	if err := k.h.sim.setLatency(ctx, 150*time.Millisecond); err != nil {
		return 0, err
	}
	p, err := k.start(ctx, "f-collect", "collect-due", "--concurrency", "4")
	if err != nil {
		return 0, err
	}
	frozen, err := k.freezeAt(ctx, p, k.snapshotsAtLeast(ctx, 1), 2*time.Second, moment)
	if err != nil {
		return 0, err
	}
	return k.cronTakesOverFrozen(ctx, p, frozen)
}

// freezeCollectOne: `collect ITEM_ID` frozen with its one call at the provider. Cron's
// collect-due takes the item once its lease runs out; the resumed run must write nothing, and
// if it ends failed (exit 1), say that its lease ran out (collect.lease), not something else.
func freezeCollectOne(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
	p, calling, err := k.collectOneSlowly(ctx, "f-collect-one")
	if err != nil {
		return 0, err
	}
	frozen, err := k.freezeAt(ctx, p, calling, 800*time.Millisecond, moment)
	if err != nil {
		return 0, err
	}
	if err := k.h.sim.setLatency(ctx, killSimLatency); err != nil {
		return 0, err
	}
	took, err := k.cronTakesOverFrozen(ctx, p, frozen)
	if err == nil && p.code == 1 {
		k.r.check(bytes.Contains(p.output(), []byte("collect.lease")),
			"%s: the resumed collect ITEM_ID failed without naming its lease: %s", k.label, p.tail())
	}
	return took, err
}

// cronTakesOverFrozen: cron's collect-due takes over what the frozen one-shot p held and
// collects everything; p is then resumed and must end by itself having written nothing; a
// relay publishes the lot.
func (k *killRun) cronTakesOverFrozen(ctx context.Context, p *proc, frozen time.Time) (time.Duration, error) {
	w, err := k.held(ctx)
	if err != nil {
		return 0, err
	}
	w.pending = 0 // no relay runs until the end
	cron, err := k.cron(ctx, p.name+"-cron", "collect-due", "--concurrency", "8")
	if err != nil {
		return 0, err
	}
	took, all, err := k.taken(ctx, w, frozen, nil)
	k.drained = all
	if err == nil {
		err = poll(ctx, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
			n, err := k.d.count(ctx, `SELECT count(*) FROM tracked_items t WHERE NOT synthetic_item(item_id)
				AND NOT EXISTS (SELECT FROM auction_snapshots s WHERE s.item_id = t.item_id)`)
			return n == 0, err
		})
	}
	cron.stop()
	if err != nil {
		return took, fmt.Errorf("cron's collect-due beside a frozen %s: %w", p.name, err)
	}
	before, err := k.fingerprint(ctx)
	if err != nil {
		return took, err
	}
	k.resume(p)
	if _, err := p.wait(ctx, time.Minute); err != nil {
		return took, fmt.Errorf("the resumed %s never ended: %w: %s", p.name, err, p.tail())
	}
	k.checkResumedCleanly(p)
	after, err := k.fingerprint(ctx)
	if err != nil {
		return took, err
	}
	k.r.check(before == after, "%s: the resumed %s wrote after its leases were taken over: %s, then %s", k.label, p.name, before, after)
	if err := k.finish(ctx, p.name+"-relay", "relay-outbox", "--once"); err != nil {
		return took, err
	}
	return took, k.allCollectedAndPublished(ctx, nil)
}

// freezeRelayOnce: relay-outbox --once frozen mid-pass holding every lane. --once from cron
// takes the lanes once their lease runs out and publishes the backlog and newer events; the
// frozen run then resumes with a batch it no longer holds: it must end by itself, and mark
// nothing it did not publish (every stored snapshot is on the topic).
func freezeRelayOnce(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
	p, frozen, w, err := k.frozenRelay(ctx, moment, "f-once", relayOnce...)
	if err != nil {
		return 0, err
	}
	cron, err := k.cron(ctx, "f-once-cron", relayOnce...)
	if err != nil {
		return 0, err
	}
	defer cron.stop()
	if err := k.collectAgain(ctx, "f-once-more", k.h.catalog[:killItems/2]); err != nil {
		return 0, err
	}
	took, err := k.takenOver(ctx, w, frozen, nil)
	if err != nil {
		return took, err
	}
	cron.stop()
	k.resume(p)
	if _, err := p.wait(ctx, time.Minute); err != nil {
		return took, fmt.Errorf("the resumed relay-outbox --once never ended: %w: %s", err, p.tail())
	}
	k.checkResumedCleanly(p)
	return took, nil
}

// frozenRelay collects every item, adds a backlog of ballast events, starts a relay (args) and
// freezes it at moment of its first quarter second holding lanes: a pass publishes the
// backlog in about half a second. It returns the relay, when it froze and what it held.
func (k *killRun) frozenRelay(ctx context.Context, moment float64, name string, args ...string) (*proc, time.Time, heldAtKill, error) {
	if err := k.finish(ctx, name+"-fill", "collect-due", "--concurrency", "8"); err != nil {
		return nil, time.Time{}, heldAtKill{}, err
	}
	if err := k.ballast(ctx, relayBallast); err != nil {
		return nil, time.Time{}, heldAtKill{}, err
	}
	p, err := k.start(ctx, name, args...)
	if err != nil {
		return nil, time.Time{}, heldAtKill{}, err
	}
	frozen, err := k.freezeAt(ctx, p, k.lanesHeld(ctx), 250*time.Millisecond, moment)
	if err != nil {
		return p, frozen, heldAtKill{}, err
	}
	w, err := k.held(ctx)
	return p, frozen, w, err
}

// freezeRelay: relay-outbox frozen while it holds every lane and publishes a backlog, perhaps
// mid-produce. A second relay takes the lanes once their lease runs out and publishes the
// backlog and newer events; then the frozen one resumes beside it. Its late batch may arrive
// again (deduplicated by the consumer) but never ahead of its item's newer events, and it
// marks nothing it did not publish (every stored snapshot is on the topic). It must then
// share the lanes, and publish alone once the other relay stops.
func freezeRelay(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
	p, frozen, w, err := k.frozenRelay(ctx, moment, "f-relay", "relay-outbox")
	if err != nil {
		return 0, err
	}
	other, err := k.start(ctx, "f-relay-other", "relay-outbox")
	if err != nil {
		return 0, err
	}
	half := k.h.catalog[:killItems/2]
	if err := k.collectAgain(ctx, "f-more", half); err != nil {
		return 0, err
	}
	took, err := k.takenOver(ctx, w, frozen, other)
	if err != nil {
		return took, err
	}
	k.resume(p)
	// Both relays follow the outbox; events written now go through either.
	if err := k.collectAgain(ctx, "f-more-2", k.h.catalog[killItems/2:killItems]); err != nil {
		return took, err
	}
	if err := k.allCollectedAndPublished(ctx, p); err != nil {
		return took, err
	}
	if err := stopDaemon(ctx, other, "the other relay"); err != nil {
		return took, err
	}
	// The resumed relay alone: it publishes what comes next, in every lane.
	if err := k.collectAgain(ctx, "f-more-3", half); err != nil {
		return took, err
	}
	if err := k.allCollectedAndPublished(ctx, p); err != nil {
		return took, fmt.Errorf("the resumed relay, alone: %w", err)
	}
	k.checkResumedCleanly(p)
	return took, stopDaemon(ctx, p, "the resumed relay")
}

// freezeDaemon: `collector run` frozen while it collects and publishes. A second daemon takes
// its items and lanes once their leases run out; then the frozen one resumes beside it, with
// answers for items no longer its own and a budget share counted out. Nothing is stored
// twice, no event is lost or out of order; once the second daemon stops, the resumed one alone
// collects every item made due again and publishes it.
func freezeDaemon(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
	p, err := k.start(ctx, "f-run", daemonArgs...)
	if err != nil {
		return 0, err
	}
	frozen, err := k.freezeAt(ctx, p, k.snapshotsAtLeast(ctx, 1), 3*time.Second, moment)
	if err != nil {
		return 0, err
	}
	w, err := k.held(ctx)
	if err != nil {
		return 0, err
	}
	other, err := k.start(ctx, "f-run-other", daemonArgs...)
	if err != nil {
		return 0, err
	}
	took, err := k.takenOver(ctx, w, frozen, other)
	if err != nil {
		return took, err
	}
	k.resume(p)
	if err := stopDaemon(ctx, other, "the other daemon"); err != nil {
		return took, err
	}
	if err := k.collectedAgainBy(ctx, p); err != nil {
		return took, fmt.Errorf("the resumed daemon, alone: %w", err)
	}
	k.checkNoStuckHolder(ctx)
	k.checkResumedCleanly(p)
	return took, stopDaemon(ctx, p, "the resumed daemon")
}

// takenOver waits until other took over what the frozen holder held (the recovery the matrix
// holds to its target) and everything was collected and published.
func (k *killRun) takenOver(ctx context.Context, w heldAtKill, frozen time.Time, other *proc) (time.Duration, error) {
	took, all, err := k.taken(ctx, w, frozen, other)
	k.drained = all
	if err != nil {
		return took, err
	}
	return took, k.allCollectedAndPublished(ctx, other)
}

// collectAgain makes items due and collects them with a collect-due run.
func (k *killRun) collectAgain(ctx context.Context, name string, items []catalogItem) error {
	if err := k.d.makeDue(ctx, items); err != nil {
		return err
	}
	return k.finish(ctx, name, "collect-due", "--concurrency", "8")
}

// freezeProber: `collector run` frozen while it holds the provider's probe, its request in
// flight (the provider DEGRADED, every answer hanging). A second daemon takes the probe once the
// lease has run out, not before, and brings the provider back. The frozen one then resumes to
// its probe's timeout: it must record nothing (the probe is another's now; the write is fenced
// by its name) and count nothing against the provider (its stalled calls are its own); once
// the second daemon stops it collects every item made due again, alone, the provider HEALTHY.
func freezeProber(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
	if err := k.degradeHanging(ctx); err != nil {
		return 0, err
	}
	defer func() { _ = k.h.sim.setLatency(context.WithoutCancel(ctx), killSimLatency) }()
	p, err := k.start(ctx, "f-probe", daemonArgs...)
	if err != nil {
		return 0, err
	}
	frozen, err := k.freezeAt(ctx, p, k.probeHeld(ctx), health.TestTimings.ProbeLease/4, moment)
	if err != nil {
		return 0, err
	}
	heldUntil, err := k.probeHeldUntil(ctx, "run")
	if err != nil {
		return 0, err
	}
	if err := k.h.sim.setLatency(ctx, killSimLatency); err != nil {
		return 0, err
	}
	other, err := k.start(ctx, "f-probe-other", daemonArgs...)
	if err != nil {
		return 0, err
	}
	early, err := k.providerIs(ctx, other, heldUntil, func(st string) bool { return st != "DEGRADED" })
	took := time.Since(frozen)
	if err != nil {
		return took, fmt.Errorf("the provider stayed DEGRADED while its prober was frozen: %w", err)
	}
	k.r.check(!early, "%s: the provider recovered before the frozen holder's probe lease ran out (%s): a second probe while it was held", k.label, heldUntil)
	if _, err := k.providerIs(ctx, other, nil, func(st string) bool { return st == "HEALTHY" }); err != nil {
		return took, err
	}
	if err := k.allCollectedAndPublished(ctx, other); err != nil {
		return took, err
	}
	k.resume(p)
	if heldUntil != nil {
		if _, err := p.waitLog(ctx, time.Minute, lateProbeRE); err != nil {
			return took, fmt.Errorf("the resumed prober never told its probe was another's: %w: %s", err, p.tail())
		}
	}
	if err := stopDaemon(ctx, other, "the other daemon"); err != nil {
		return took, err
	}
	if err := k.collectedAgainBy(ctx, p); err != nil {
		return took, fmt.Errorf("the resumed prober, alone: %w", err)
	}
	var st string
	if err := k.d.pool.QueryRow(ctx, `SELECT status FROM provider_status WHERE provider = 'neople'`).Scan(&st); err != nil {
		return took, err
	}
	k.r.check(st == "HEALTHY", "%s: after the resumed prober collected everything the provider is %s, want HEALTHY", k.label, st)
	k.checkResumedCleanly(p)
	return took, stopDaemon(ctx, p, "the resumed prober")
}

// lateProbeRE is a prober's log line for a probe that failed after another took it over.
var lateProbeRE = regexp.MustCompile(`(provider probe failed after its lease ran out)`)

// collectedAgainBy makes every item due again and waits until p, alone, collected each (by
// the database's clock) and published everything.
func (k *killRun) collectedAgainBy(ctx context.Context, p *proc) error {
	var since time.Time
	if err := k.d.pool.QueryRow(ctx, `SELECT now()`).Scan(&since); err != nil {
		return err
	}
	if err := k.d.makeDue(ctx, k.h.catalog[:killItems]); err != nil {
		return err
	}
	var left int
	err := poll(ctx, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
		if p.exited() {
			return false, fmt.Errorf("%s exited (%d): %s", p.name, p.code, p.tail())
		}
		var err error
		left, err = k.d.count(ctx, `
			SELECT (SELECT count(*) FROM tracked_items WHERE NOT synthetic_item(item_id) AND collection_tier <> 'DORMANT'
			          AND (last_collected_at IS NULL OR last_collected_at < $1))
			     + (SELECT count(*) FROM outbox_pending)`, since)
		return left == 0, err
	})
	if err != nil {
		return fmt.Errorf("%d items not collected again or events unpublished: %w", left, err)
	}
	return nil
}
