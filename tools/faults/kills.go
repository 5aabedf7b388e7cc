package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/health"
)

// The kill matrix (scenario K): every role that holds something is killed with SIGKILL at
// seeded moments, then restarted (or re-run, as cron would), and the database and the topic
// are checked: every snapshot published once it is deduplicated, each item's events chained,
// the sales in events equal to the sales rows, nothing stored twice, no holder left past its
// lease, no partition missing, overlapping or half detached. Each kill's recovery time (kill
// → the dead holder's work done by another) is printed; the target is the role's lease + 5 s.

const (
	killLease      = 3 * time.Second // collect.lease and kafka.lease in the matrix
	killSlack      = 5 * time.Second // what a takeover may take past the lease
	killItems      = 240
	killSimLatency = 40 * time.Millisecond
)

// killEnv is the environment of every process of the matrix: short leases, so that a takeover
// is seconds away, and the run's broker.
func killEnv(broker string) []string {
	return append(append(daemonEnv(), relayEnv(broker)...),
		"COLLECTOR_COLLECT_LEASE="+killLease.String(),
		"COLLECTOR_KAFKA_LEASE="+killLease.String(),
		"COLLECTOR_KAFKA_WRITE_TIMEOUT=1s",
		"COLLECTOR_KAFKA_TOPIC="+topic,
		// A one-shot claims its next batch when the last one is done, so a dead holder's
		// items wait for their lease and then one batch: with the default 2m lease a batch of
		// 100 is nothing beside it, with this 3 s lease and a budget in slow start it is not.
		"COLLECTOR_COLLECT_BATCH_SIZE=25",
	)
}

// killRole is one role of the matrix. run kills it once at moment (its seeded share of the
// role's window) and returns the recovery time.
type killRole struct {
	name   string
	target time.Duration // recovery target: the lease it holds + killSlack
	run    func(ctx context.Context, k *killRun, moment float64) (time.Duration, error)
	// oneShot: the moments are shares of a calibration run's duration (moment -1).
	oneShot bool
}

var killRoles = []killRole{
	{"run", killLease + killSlack, killDaemon, false},
	{"run (probing)", health.TestTimings.ProbeLease + killSlack, killProber(daemonArgs), false},
	{"collect-due (probing)", health.TestTimings.ProbeLease + killSlack, killProber(cronCollect), false},
	{"collect-due", killLease + killSlack, killCollectDue, false},
	{"collect ITEM_ID", killLease + killSlack, killCollectOne, false},
	{"relay-outbox", killLease + killSlack, killRelayFollow, false},
	{"relay-outbox --once", killLease + killSlack, killRelayOnce, false},
	{"prune (mid-drop)", killSlack, killPrune.run, true},
	{"partitions (mid-drop)", killSlack, killPartitions.run, true},
	{"import-items", killSlack, killImport.run, true},
	{"migrate up", killSlack, killMigrate.run, true},
	{"recalculate-popularity", killSlack, killRecalculate.run, true},
	{"seed:synthetic", killSlack, killSeed.run, true},
	{"export", killSlack, killExport.run, true},
}

// roleSeed is the second half of a role's seed: its name hashed.
func roleSeed(name string) uint64 {
	f := fnv.New64a()
	_, _ = f.Write([]byte(name))
	return f.Sum64()
}

// killRun is one kill of one role: its database, its broker and its environment.
type killRun struct {
	h        *harness
	r        *report
	label    string
	seq      int  // which of the role's moments this is
	hit      int  // kills that found the process alive
	heldWork bool // the kill left leases, lanes or pending events to take over
	// drained is how long after the kill everything the dead holder left was done.
	drained time.Duration
	// window is a one-shot role's calibrated duration: its kill moments are shares of it.
	window time.Duration
	// salesDropped: retention dropped sales partitions, so the sales rows left are fewer
	// than the sales the events counted.
	salesDropped bool
	d            *database
	broker       string
	env          []string
}

// scenarioKillMatrix kills every role at -kill-moments seeded moments.
func scenarioKillMatrix(ctx context.Context, h *harness, r *report) error {
	if !h.hasRun(ctx) {
		r.skipped = "`collector run` is not in this binary"
		return nil
	}
	worst, worstDrained := map[string]time.Duration{}, map[string]time.Duration{}
	for _, role := range killRoles {
		if h.o.killRoles != nil && !h.o.killRoles[role.name] {
			continue
		}
		var window time.Duration
		if role.oneShot {
			var err error
			if _, window, err = h.killOnce(ctx, r, role, role.name+" calibration", 0, -1, 0); err != nil {
				r.check(false, "%s calibration: %v", role.name, err)
				continue
			}
			h.logf("kill matrix: %s runs %s uninterrupted", role.name, window.Round(time.Millisecond))
		}
		// Seeded by the role's name, not its place in the list: adding a role keeps every
		// other role's moments, so a seed printed by an older run still replays.
		rng := rand.New(rand.NewPCG(h.o.killSeed, roleSeed(role.name)))
		met := 0
		for m := range h.o.killMoments {
			moment := rng.Float64()
			label := fmt.Sprintf("%s #%d (seed %d, moment %.2f)", role.name, m+1, h.o.killSeed, moment)
			h.logf("kill matrix: %s", label)
			k, took, err := h.killOnce(ctx, r, role, label, m, moment, window)
			if k.hit > 0 && (role.oneShot || k.heldWork) {
				met++
			}
			if err != nil {
				r.check(false, "%s: %v", label, err)
				continue
			}
			r.check(took <= role.target, "%s: recovered in %s, target %s", label, took.Round(100*time.Millisecond), role.target)
			worst[role.name] = max(worst[role.name], took)
			worstDrained[role.name] = max(worstDrained[role.name], k.drained)
		}
		// A matrix whose kills all missed (the process done, or holding nothing yet) tested
		// no takeover: at least one kill per role must meet a live holder.
		r.check(met > 0, "%s: none of %d kills met the process alive and holding work", role.name, h.o.killMoments)
	}
	for _, role := range killRoles {
		if w, ok := worst[role.name]; ok {
			r.num("%s %s (all done %s)", role.name, w.Round(100*time.Millisecond), worstDrained[role.name].Round(100*time.Millisecond))
		}
	}
	r.num("worst recovery (kill → work resumed) per role over %d moments (seed %d; -kill-seed replays), target the role's lease (%s; the probe's %s) + %s",
		h.o.killMoments, h.o.killSeed, killLease, health.TestTimings.ProbeLease, killSlack)
	return nil
}

// killOnce kills role once at moment and returns the run (what the kill met) and its recovery.
func (h *harness) killOnce(ctx context.Context, r *report, role killRole, label string, seq int, moment float64, window time.Duration) (k *killRun, took time.Duration, err error) {
	defer h.killAll()
	k = &killRun{h: h, r: r, label: label, seq: seq, window: window}
	if k.d, err = h.scenarioDB(ctx, "k"+randHex(3), killItems, killSimLatency); err != nil {
		return k, 0, err
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(4, topic))
	if err != nil {
		return k, 0, fmt.Errorf("start kfake: %w", err)
	}
	defer cluster.Close()
	k.broker = cluster.ListenAddrs()[0]
	k.env = h.env(k.d.url, killEnv(k.broker)...)
	if took, err = role.run(ctx, k, moment); err != nil {
		return k, took, err
	}
	k.drained = max(k.drained, took)
	h.killAll()
	return k, took, k.verify(ctx)
}

// start runs `collector args...` in the run's environment.
func (k *killRun) start(ctx context.Context, name string, args ...string) (*proc, error) {
	return k.h.start(ctx, name, k.env, args...)
}

// finish runs `collector args...` to a zero exit.
func (k *killRun) finish(ctx context.Context, name string, args ...string) error {
	p, err := k.start(ctx, name, args...)
	if err != nil {
		return err
	}
	if code, err := p.wait(ctx, 3*time.Minute); err != nil || code != 0 {
		return fmt.Errorf("collector %s: exit %d %v: %s", strings.Join(args, " "), code, err, p.tail())
	}
	return nil
}

// killAt waits for p's first sign of work, then moment of window, and kills it with SIGKILL.
// It returns when the process is gone.
func (k *killRun) killAt(ctx context.Context, p *proc, started func() (bool, error), window time.Duration, moment float64) (time.Time, error) {
	at, err := k.signalAt(ctx, p, started, window, moment, syscall.SIGKILL)
	if err == nil {
		<-p.done
	}
	return at, err
}

// signalAt waits for p's first sign of work, then moment of window, and sends it sig.
func (k *killRun) signalAt(ctx context.Context, p *proc, started func() (bool, error), window time.Duration, moment float64, sig syscall.Signal) (time.Time, error) {
	// Often: for some roles what they hold lasts a few hundred milliseconds.
	if err := poll(ctx, time.Minute, 5*time.Millisecond, func() (bool, error) {
		ok, err := started()
		return ok || p.exited(), err
	}); err != nil {
		return time.Time{}, fmt.Errorf("%s never started working: %w: %s", p.name, err, p.tail())
	}
	select {
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	case <-time.After(time.Duration(moment * float64(window))):
	}
	if p.exited() {
		k.h.logf("%s: %s had exited before its kill", k.label, p.name)
	} else {
		k.hit++
	}
	p.signal(sig)
	return time.Now(), nil
}

func (k *killRun) snapshotsAtLeast(ctx context.Context, n int) func() (bool, error) {
	return func() (bool, error) {
		got, err := k.d.count(ctx, `SELECT count(*) FROM auction_snapshots`)
		return got >= n, err
	}
}

// heldAtKill is what a dead process held: the leases of items and lanes live at the kill
// (the dead process's among them), and the highest outbox id pending then.
type heldAtKill struct {
	items, lanes []string // lease tokens
	pending      int64
}

func (k *killRun) held(ctx context.Context) (heldAtKill, error) {
	var w heldAtKill
	err := k.d.pool.QueryRow(ctx, `
		SELECT coalesce((SELECT array_agg(lease_token::text) FROM tracked_items WHERE lease_token IS NOT NULL), '{}'),
		       coalesce((SELECT array_agg(lease_token::text) FROM outbox_relay_lanes WHERE lease_token IS NOT NULL), '{}'),
		       coalesce((SELECT max(id) FROM outbox_pending), 0)`).Scan(&w.items, &w.lanes, &w.pending)
	k.heldWork = len(w.items) > 0 || len(w.lanes) > 0 || w.pending > 0
	return w, err
}

// taken waits until every item and lane lease live at the kill was taken over (or handed
// back) and every outbox row pending then was published. It returns how long after the kill
// the first of that happened (work resumed: the recovery the matrix holds to its target) and
// the last (everything the dead holder left done, which a backlog in front of it also takes).
func (k *killRun) taken(ctx context.Context, w heldAtKill, killed time.Time, survivor *proc) (first, all time.Duration, err error) {
	initial := -1
	err = poll(ctx, 2*time.Minute, 20*time.Millisecond, func() (bool, error) {
		if survivor != nil && survivor.exited() {
			return false, fmt.Errorf("%s exited (%d): %s", survivor.name, survivor.code, survivor.tail())
		}
		n, err := k.d.count(ctx, `
			SELECT (SELECT count(*) FROM tracked_items WHERE lease_token::text = ANY ($1))
			     + (SELECT count(*) FROM outbox_relay_lanes l WHERE lease_token::text = ANY ($2)
			          AND EXISTS (SELECT FROM outbox_pending p WHERE p.lane = l.lane))
			     + (SELECT count(*) FROM outbox_pending WHERE id <= $3)`, w.items, w.lanes, w.pending)
		if err != nil {
			return false, err
		}
		if initial < 0 {
			initial = n
		}
		if first == 0 && (n < initial || n == 0) {
			first = time.Since(killed)
		}
		return n == 0, nil
	})
	return first, time.Since(killed), err
}

// killDaemon: `collector run` with collection, relay, planner and partition upkeep, killed
// while collecting and publishing, then started again.
func killDaemon(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
	p, err := k.start(ctx, "k-run", daemonArgs...)
	if err != nil {
		return 0, err
	}
	killed, err := k.killAt(ctx, p, k.snapshotsAtLeast(ctx, 1), 3*time.Second, moment)
	if err != nil {
		return 0, err
	}
	w, err := k.held(ctx)
	if err != nil {
		return 0, err
	}
	again, err := k.start(ctx, "k-run-again", daemonArgs...)
	if err != nil {
		return 0, err
	}
	took, all, err := k.taken(ctx, w, killed, again)
	k.drained = all
	if err != nil {
		return took, err
	}
	if err := k.allCollectedAndPublished(ctx, again); err != nil {
		return took, err
	}
	k.checkNoStuckHolder(ctx)
	k.checkShareTakenOver(ctx, again, killed)
	again.signal(syscall.SIGTERM)
	if code, err := again.wait(ctx, 30*time.Second); err != nil || code != 0 {
		return took, fmt.Errorf("restarted daemon: exit %d %v after SIGTERM: %s", code, err, again.tail())
	}
	return took, nil
}

// shareChangedRE is the daemon's log line when the number of instances sharing its key
// changes: its time and the new number.
var shareChangedRE = regexp.MustCompile(`"ts":"([^"]+)"[^\n]*"msg":"budget share changed"[^\n]*"instances":(\d+)`)

// checkShareTakenOver: the dead daemon's live-instance row stops counting within its 3
// heartbeats, so the restarted daemon, which counted it on joining, takes the whole key's
// budget; the time is the restarted daemon's log line saying so. (A restart that joined after
// the row had gone stale never counted it, and has nothing to take over.)
func (k *killRun) checkShareTakenOver(ctx context.Context, again *proc, killed time.Time) {
	first := shareChangedRE.FindSubmatch(again.output())
	if first == nil || string(first[2]) == "1" {
		k.h.logf("%s: the restarted daemon never counted the dead one", k.label)
		return
	}
	target := 3*budget.HeartbeatDefault + killSlack
	var at time.Time
	err := poll(ctx, target, 50*time.Millisecond, func() (bool, error) {
		for _, m := range shareChangedRE.FindAllSubmatch(again.output(), -1) {
			if string(m[2]) == "1" {
				var err error
				at, err = time.Parse("2006-01-02T15:04:05.000Z0700", string(m[1]))
				return true, err
			}
		}
		return false, nil
	})
	took := at.Sub(killed)
	k.r.check(err == nil && took <= target, "%s: the dead daemon's budget share was still counted %s after the kill (target %s): %v",
		k.label, took.Round(100*time.Millisecond), target, err)
	k.h.logf("%s: the dead daemon's budget share taken over %s after the kill", k.label, took.Round(100*time.Millisecond))
}

// killProber(args): `collector args` killed while it holds the provider's probe
// (provider_probe): the provider is DEGRADED and every answer hangs, so the probe's request is
// in flight. The killed holder is a daemon's health monitor (`run`) or a one-shot's gate
// (`collect-due` beside no daemon). The survivor must take the probe once the dead one's lease
// has run out, not before, bring the provider back and then collect and publish everything: a
// daemon started again (even moments), or only collect-due from cron (odd moments: no daemon
// is left to watch the provider, so the one-shots' own probe must end the pause and
// RECOVERING). Recovery: kill → the provider out of DEGRADED.
func killProber(args []string) func(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
	return func(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
		return k.killProbing(ctx, args, moment)
	}
}

// degradeHanging pauses the provider (DEGRADED a minute ago, so the first probe is due at once:
// a one-shot that finds it not yet due exits without holding anything) and makes every answer
// hang until the caller gives up.
func (k *killRun) degradeHanging(ctx context.Context) error {
	if _, err := k.d.pool.Exec(ctx, `UPDATE provider_status SET status = 'DEGRADED', reason = 'kill matrix: every answer hangs',
		since = now() - interval '1 minute', updated_at = now() WHERE provider = 'neople'`); err != nil {
		return err
	}
	return k.h.sim.setFaults(ctx, simFaults{Latency: killSimLatency.String(), TimeoutRate: 1})
}

// probeHeld is a start signal for signalAt: the provider's probe is leased.
func (k *killRun) probeHeld(ctx context.Context) func() (bool, error) {
	return func() (bool, error) {
		n, err := k.d.count(ctx, `SELECT count(*) FROM provider_probe WHERE lease_expires_at > now()`)
		return n > 0, err
	}
}

// probeHeldUntil is the end of the live probe lease (nil: none), which the stopped process held.
func (k *killRun) probeHeldUntil(ctx context.Context, what string) (*time.Time, error) {
	var until *time.Time
	if err := k.d.pool.QueryRow(ctx, `SELECT max(lease_expires_at) FILTER (WHERE lease_expires_at > now()) FROM provider_probe`).
		Scan(&until); err != nil {
		return nil, err
	}
	k.heldWork = until != nil
	k.h.logf("%s: the stopped %s held the probe until %v", k.label, what, until)
	return until, nil
}

// providerIs waits until the provider's status satisfies want, and says whether it left its
// pause before heldUntil (a second probe while the first was held).
func (k *killRun) providerIs(ctx context.Context, survivor *proc, heldUntil *time.Time, want func(status string) bool) (early bool, err error) {
	err = poll(ctx, time.Minute, 20*time.Millisecond, func() (bool, error) {
		if survivor != nil && survivor.exited() {
			return false, fmt.Errorf("%s exited (%d): %s", survivor.name, survivor.code, survivor.tail())
		}
		var st string
		err := k.d.pool.QueryRow(ctx, `SELECT status, $1::timestamptz IS NOT NULL AND since < $1 FROM provider_status
			WHERE provider = 'neople'`, heldUntil).Scan(&st, &early)
		return want(st), err
	})
	return early, err
}

func (k *killRun) killProbing(ctx context.Context, args []string, moment float64) (time.Duration, error) {
	if err := k.degradeHanging(ctx); err != nil {
		return 0, err
	}
	defer func() { _ = k.h.sim.setLatency(context.WithoutCancel(ctx), killSimLatency) }()
	p, err := k.start(ctx, "k-probe", args...)
	if err != nil {
		return 0, err
	}
	// The probe's request may take half the lease; the kill lands in the first half of that.
	killed, err := k.killAt(ctx, p, k.probeHeld(ctx), health.TestTimings.ProbeLease/4, moment)
	if err != nil {
		return 0, err
	}
	deadUntil, err := k.probeHeldUntil(ctx, args[0])
	if err != nil {
		return 0, err
	}
	if err := k.h.sim.setLatency(ctx, killSimLatency); err != nil {
		return 0, err
	}
	var again *proc
	var cron *cronJob
	if k.seq%2 == 1 {
		cron, err = k.cron(ctx, "k-probe-cron", cronCollect...)
		defer cron.stop()
	} else {
		again, err = k.start(ctx, "k-probe-again", daemonArgs...)
	}
	if err != nil {
		return 0, err
	}
	providerIs := func(want func(status string) bool) (bool, error) { return k.providerIs(ctx, again, deadUntil, want) }
	early, err := providerIs(func(st string) bool { return st != "DEGRADED" })
	took := time.Since(killed)
	if err != nil {
		return took, fmt.Errorf("the provider stayed DEGRADED after its prober died: %w", err)
	}
	k.r.check(!early, "%s: the provider recovered before the dead holder's probe lease ran out (%s): a second probe while it was held", k.label, deadUntil)
	if cron != nil {
		// RECOVERING ends by time in a run without a monitor; then everything is collected.
		if _, err := providerIs(func(st string) bool { return st == "HEALTHY" }); err != nil {
			return took, fmt.Errorf("collect-due from cron left the provider RECOVERING: %w", err)
		}
		cron.stop()
		if err := k.finish(ctx, "k-probe-collect", cronCollect...); err != nil {
			return took, err
		}
		if err := k.finish(ctx, "k-probe-relay", "relay-outbox", "--once"); err != nil {
			return took, err
		}
		if err := k.allCollectedAndPublished(ctx, nil); err != nil {
			return took, err
		}
		k.checkNoStuckHolder(ctx)
		return took, nil
	}
	if err := k.allCollectedAndPublished(ctx, again); err != nil {
		return took, err
	}
	k.checkNoStuckHolder(ctx)
	again.signal(syscall.SIGTERM)
	if code, err := again.wait(ctx, 30*time.Second); err != nil || code != 0 {
		return took, fmt.Errorf("restarted daemon: exit %d %v after SIGTERM: %s", code, err, again.tail())
	}
	return took, nil
}

// cronCollect is collect-due as cron runs it beside no daemon, probing a paused provider at
// test speed.
var cronCollect = []string{"collect-due", "--test-timings", "--concurrency", "8"}

// killCollectDue: collect-due killed mid-batch; cron runs it again every half second.
//
// A third of the items, each answered slowly: the recovery measured is the takeover of the dead
// run's leases, not how long a fresh budget's slow start takes over a large backlog (a re-run
// takes the expired leases in whichever batch reaches them, all being equally due).
func killCollectDue(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
	if _, err := k.d.pool.Exec(ctx, `DELETE FROM tracked_items WHERE item_id NOT IN (
		SELECT item_id FROM tracked_items ORDER BY item_id LIMIT $1)`, killItems/3); err != nil {
		return 0, err
	}
	if err := k.h.sim.setLatency(ctx, 150*time.Millisecond); err != nil {
		return 0, err
	}
	p, err := k.start(ctx, "k-collect", "collect-due", "--concurrency", "4")
	if err != nil {
		return 0, err
	}
	killed, err := k.killAt(ctx, p, k.snapshotsAtLeast(ctx, 1), 2*time.Second, moment)
	if err != nil {
		return 0, err
	}
	return k.cronCollectsTheRest(ctx, "k-collect", killed, nil)
}

// cronCollectsTheRest: after a collector's kill, collect-due from cron alone (every half second)
// takes the dead one's item leases once they run out and collects everything; then a relay
// publishes it. before, when set, runs between reading what the dead one held and the cron job.
func (k *killRun) cronCollectsTheRest(ctx context.Context, name string, killed time.Time, before func() error) (time.Duration, error) {
	w, err := k.held(ctx)
	if err != nil {
		return 0, err
	}
	w.pending = 0 // no relay runs beside the cron job: its events go at the end
	if before != nil {
		if err := before(); err != nil {
			return 0, err
		}
	}
	cron, err := k.cron(ctx, name+"-cron", "collect-due", "--concurrency", "8")
	if err != nil {
		return 0, err
	}
	defer cron.stop()
	took, all, err := k.taken(ctx, w, killed, nil)
	k.drained = all
	if err != nil {
		return took, err
	}
	if err := poll(ctx, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
		n, err := k.d.count(ctx, `SELECT count(*) FROM tracked_items t WHERE NOT synthetic_item(item_id)
			AND NOT EXISTS (SELECT FROM auction_snapshots s WHERE s.item_id = t.item_id)`)
		return n == 0, err
	}); err != nil {
		return took, fmt.Errorf("collect-due from cron left items uncollected: %w", err)
	}
	cron.stop()
	if err := k.finish(ctx, name+"-relay", "relay-outbox", "--once"); err != nil {
		return took, err
	}
	return took, k.allCollectedAndPublished(ctx, nil)
}

// killCollectOne: `collect ITEM_ID` (an operator collecting one item now) killed while its
// call is at the provider, the item under its lease; cron's collect-due takes the item once the
// lease has run out. The item's answer is slow (1 s) until the kill, so the kill meets the call
// in flight; five items only, so that cron's runs are short and the takeover is the lease's
// expiry, not a backlog's; then every item is collected and published.
func killCollectOne(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
	p, calling, err := k.collectOneSlowly(ctx, "k-collect-one")
	if err != nil {
		return 0, err
	}
	killed, err := k.killAt(ctx, p, calling, 800*time.Millisecond, moment)
	if err != nil {
		return 0, err
	}
	return k.cronCollectsTheRest(ctx, "k-collect-one", killed, func() error { return k.h.sim.setLatency(ctx, killSimLatency) })
}

// collectOneSlowly keeps five items, answers slowly (1 s) and starts `collect ITEM_ID` on the
// first; calling says when it holds the item's lease and its request reached the provider
// (counted on arrival, before the latency).
func (k *killRun) collectOneSlowly(ctx context.Context, name string) (p *proc, calling func() (bool, error), err error) {
	if _, err := k.d.pool.Exec(ctx, `DELETE FROM tracked_items WHERE item_id NOT IN (
		SELECT item_id FROM tracked_items ORDER BY item_id LIMIT 5)`); err != nil {
		return nil, nil, err
	}
	var item string
	if err := k.d.pool.QueryRow(ctx, `SELECT item_id FROM tracked_items ORDER BY item_id LIMIT 1`).Scan(&item); err != nil {
		return nil, nil, err
	}
	if err := k.h.sim.setLatency(ctx, time.Second); err != nil {
		return nil, nil, err
	}
	before, err := k.h.sim.stats(ctx)
	if err != nil {
		return nil, nil, err
	}
	if p, err = k.start(ctx, name, "collect", item); err != nil {
		return nil, nil, err
	}
	return p, func() (bool, error) {
		n, err := k.d.count(ctx, `SELECT count(*) FROM tracked_items WHERE item_id = $1 AND lease_expires_at > now()`, item)
		if err != nil || n == 0 {
			return false, err
		}
		st, err := k.h.sim.stats(ctx)
		return st.Requests > before.Requests, err
	}, nil
}

// ballast puts n events of fixture items (seed-…, left out of the snapshot checks) in the
// outbox, so that a relay is still publishing when it is killed and leaves work in its lanes.
func (k *killRun) ballast(ctx context.Context, n int) error {
	_, err := k.d.pool.Exec(ctx, `
		WITH o AS (
		    INSERT INTO outbox (event_type, item_id, payload)
		    SELECT 'auction.snapshot', 'seed-ballast-' || (g % 500), jsonb_build_object('snapshot_id', -g, 'item_id', 'seed-ballast-' || (g % 500))
		    FROM generate_series(1, $1::int) g
		    RETURNING id, lane)
		INSERT INTO outbox_pending (id, lane) SELECT id, lane FROM o`, n)
	if err != nil {
		return fmt.Errorf("outbox ballast: %w", err)
	}
	return nil
}

const relayBallast = 30000

// killRelayFollow: relay-outbox killed while it holds every lane and publishes; what waits in
// the dead relay's lanes, and the events written after the kill, go when a restarted relay
// takes them (even moments) or a relay-outbox --once from cron does (odd moments: it holds
// nothing when it starts, as after the daemon's relay died).
func killRelayFollow(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
	survivor := func(ctx context.Context) (stop func() error, p *proc, err error) {
		if k.seq%2 == 1 {
			cron, err := k.cron(ctx, "k-relay-once-cron", relayOnce...)
			return func() error { cron.stop(); return nil }, nil, err
		}
		again, err := k.start(ctx, "k-relay-again", "relay-outbox")
		return func() error {
			again.signal(syscall.SIGTERM)
			if code, err := again.wait(ctx, 30*time.Second); err != nil || code != 0 {
				return fmt.Errorf("restarted relay: exit %d %v after SIGTERM: %s", code, err, again.tail())
			}
			return nil
		}, again, err
	}
	return k.killRelay(ctx, moment, []string{"relay-outbox"}, survivor)
}

// killRelayOnce: relay-outbox --once killed mid-pass; cron runs it again every half second.
func killRelayOnce(ctx context.Context, k *killRun, moment float64) (time.Duration, error) {
	return k.killRelay(ctx, moment, relayOnce, func(ctx context.Context) (func() error, *proc, error) {
		cron, err := k.cron(ctx, "k-once-cron", relayOnce...)
		return func() error { cron.stop(); return nil }, nil, err
	})
}

// killRelay kills a relay (args) publishing a backlog once it holds lanes, starts the survivor
// at once, writes more events into the dead relay's lanes, and measures the takeover.
func (k *killRun) killRelay(ctx context.Context, moment float64, args []string,
	survivor func(context.Context) (stop func() error, p *proc, err error)) (time.Duration, error) {
	if err := k.finish(ctx, "k-fill", "collect-due", "--concurrency", "8"); err != nil {
		return 0, err
	}
	if err := k.ballast(ctx, relayBallast); err != nil {
		return 0, err
	}
	p, err := k.start(ctx, "k-relay", args...)
	if err != nil {
		return 0, err
	}
	// A pass publishes the ballast in about half a second: kill within its first quarter.
	killed, err := k.killAt(ctx, p, k.lanesHeld(ctx), 250*time.Millisecond, moment)
	if err != nil {
		return 0, err
	}
	w, err := k.held(ctx)
	if err != nil {
		return 0, err
	}
	stop, again, err := survivor(ctx)
	if err != nil {
		return 0, err
	}
	if err := k.d.makeDue(ctx, k.h.catalog[:killItems/2]); err != nil {
		_ = stop()
		return 0, err
	}
	if err := k.finish(ctx, "k-more", "collect-due", "--concurrency", "8"); err != nil {
		_ = stop()
		return 0, err
	}
	took, all, err := k.taken(ctx, w, killed, again)
	k.drained = all
	if err == nil {
		err = k.allCollectedAndPublished(ctx, again)
	}
	if err == nil && again != nil {
		k.checkNoStuckHolder(ctx)
	}
	return took, errors.Join(err, stop())
}

// cronJob runs a one-shot command again and again, one at a time, as an overlapping-safe
// scheduler would, until stopped.
type cronJob struct {
	stopCh chan struct{}
	done   chan struct{}
}

func (k *killRun) cron(ctx context.Context, name string, args ...string) (*cronJob, error) {
	c := &cronJob{stopCh: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for i := 0; ; i++ {
			if p, err := k.start(ctx, fmt.Sprintf("%s-%d", name, i), args...); err == nil {
				_, _ = p.wait(ctx, 2*time.Minute)
			}
			select {
			case <-c.stopCh:
				return
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return c, nil
}

func (c *cronJob) stop() {
	select {
	case <-c.stopCh:
	default:
		close(c.stopCh)
	}
	<-c.done
}

func (k *killRun) lanesHeld(ctx context.Context) func() (bool, error) {
	return func() (bool, error) {
		n, err := k.d.count(ctx, `SELECT count(*) FROM outbox_relay_lanes WHERE lease_expires_at > now()`)
		return n > 0, err
	}
}

// allCollectedAndPublished waits until every tracked (non-fixture) item has a snapshot and
// nothing is pending in the outbox.
func (k *killRun) allCollectedAndPublished(ctx context.Context, survivor *proc) error {
	return poll(ctx, 2*time.Minute, 100*time.Millisecond, func() (bool, error) {
		if survivor != nil && survivor.exited() {
			return false, fmt.Errorf("%s exited (%d): %s", survivor.name, survivor.code, survivor.tail())
		}
		n, err := k.d.count(ctx, `
			SELECT (SELECT count(*) FROM tracked_items t WHERE NOT synthetic_item(item_id)
			          AND NOT EXISTS (SELECT FROM auction_snapshots s WHERE s.item_id = t.item_id))
			     + (SELECT count(*) FROM outbox_pending)`)
		return n == 0, err
	})
}

// checkNoStuckHolder: while a survivor runs, nothing is held past its lease plus killSlack
// where work waits for it.
func (k *killRun) checkNoStuckHolder(ctx context.Context) {
	n, err := k.d.count(ctx, `
		SELECT (SELECT count(*) FROM tracked_items
		        WHERE lease_expires_at < now() - $1 * interval '1 millisecond' AND next_collect_at <= now())
		     + (SELECT count(*) FROM outbox_relay_lanes l
		        WHERE l.lease_expires_at < now() - $1 * interval '1 millisecond'
		          AND EXISTS (SELECT FROM outbox_pending p WHERE p.lane = l.lane))`, killSlack.Milliseconds())
	k.r.check(err == nil && n == 0, "%s: %d leases or lanes held past their expiry + %s with work waiting (%v)", k.label, n, killSlack, err)
}

// verify checks what every kill must leave, once its processes are gone.
func (k *killRun) verify(ctx context.Context) error {
	d, r, label := k.d, k.r, k.label
	var twice, salesRows, salesInSnapshots, overdue, stuck, pending int
	err := d.pool.QueryRow(ctx, `
		SELECT (SELECT count(*) FROM (SELECT FROM auction_snapshots GROUP BY item_id, collected_at HAVING count(*) > 1) x),
		       (SELECT count(*) FROM auction_sales WHERE NOT synthetic_item(item_id)),
		       (SELECT coalesce(sum(sales_count), 0) FROM auction_snapshots WHERE NOT synthetic_item(item_id)),
		       (SELECT count(*) FROM tracked_items t
		        WHERE t.next_collect_at < now() - $1 * interval '1 millisecond' - CASE t.collection_tier
		            WHEN 'HOT_1M' THEN interval '1 minute' WHEN 'ACTIVE_3M' THEN interval '3 minutes'
		            WHEN 'WARM_5M' THEN interval '5 minutes' ELSE interval '10 minutes' END),
		       (SELECT count(*) FROM outbox_relay_lanes WHERE lease_expires_at < now() - $1 * interval '1 millisecond'
		          AND EXISTS (SELECT FROM outbox_pending p WHERE p.lane = outbox_relay_lanes.lane)),
		       (SELECT count(*) FROM outbox_pending)`,
		(killLease+killSlack).Milliseconds()).Scan(&twice, &salesRows, &salesInSnapshots, &overdue, &stuck, &pending)
	if err != nil {
		return fmt.Errorf("verify: %w", err)
	}
	r.check(twice == 0, "%s: %d item instants stored twice", label, twice)
	r.check(k.salesDropped || salesRows == salesInSnapshots, "%s: %d sales rows, %d counted in snapshots", label, salesRows, salesInSnapshots)
	r.check(overdue == 0, "%s: %d items overdue past their lease plus their interval", label, overdue)
	r.check(stuck == 0, "%s: %d lanes with work held past their lease", label, stuck)
	r.check(pending == 0, "%s: %d events unpublished", label, pending)
	if err := k.verifyLocks(ctx); err != nil {
		return err
	}
	if err := d.verifyPartitions(ctx, r, label); err != nil {
		return err
	}
	return k.verifyEvents(ctx)
}

// verifyLocks: with every process gone, no session of theirs holds an advisory lock (the
// drop lock, the recalculation lock) a few seconds on.
func (k *killRun) verifyLocks(ctx context.Context) error {
	var held int
	err := poll(ctx, killSlack, 100*time.Millisecond, func() (bool, error) {
		var err error
		held, err = k.d.count(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database
			WHERE l.locktype = 'advisory' AND d.datname = $1`, k.d.name)
		return held == 0, err
	})
	k.r.check(err == nil, "%s: %d advisory locks held %s after every process was gone (%v)", k.label, held, killSlack, err)
	return nil
}

// verifyPartitions: each history table's partitions follow each other with no gap and no
// overlap, none is half detached, and no detached history table is left behind.
func (d *database) verifyPartitions(ctx context.Context, r *report, label string) error {
	for _, table := range []string{"auction_snapshots", "auction_sales"} {
		rows, err := d.pool.Query(ctx, `
			SELECT pg_get_expr(c.relpartbound, c.oid), i.inhdetachpending FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid
			WHERE i.inhparent = $1::regclass`, table)
		if err != nil {
			return err
		}
		type bound struct{ from, to string }
		var bounds []bound
		var pendingDetach int
		var b string
		var detach bool
		_, err = pgx.ForEachRow(rows, []any{&b, &detach}, func() error {
			m := boundRE.FindStringSubmatch(b)
			if m == nil {
				return fmt.Errorf("%s: partition bound %q", table, b)
			}
			bounds = append(bounds, bound{m[1], m[2]})
			if detach {
				pendingDetach++
			}
			return nil
		})
		if err != nil {
			return err
		}
		slices.SortFunc(bounds, func(a, b bound) int {
			return cmp.Or(-cmp.Compare(boolInt(a.from == "MINVALUE"), boolInt(b.from == "MINVALUE")), strings.Compare(a.from, b.from))
		})
		gaps := 0
		for i := 1; i < len(bounds); i++ {
			if bounds[i].from != bounds[i-1].to {
				gaps++
			}
		}
		r.check(gaps == 0, "%s: %s partitions have %d gaps or overlaps", label, table, gaps)
		r.check(pendingDetach == 0, "%s: %s has %d partitions half detached", label, table, pendingDetach)
		stray, err := d.count(ctx, `
			SELECT count(*) FROM pg_class c WHERE c.relkind = 'r' AND c.relname LIKE $1 || '\_%'
			  AND NOT EXISTS (SELECT FROM pg_inherits i WHERE i.inhrelid = c.oid)`, table)
		if err != nil {
			return err
		}
		r.check(stray == 0, "%s: %d detached %s tables left behind", label, stray, table)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

var boundRE = regexp.MustCompile(`FROM \((.+?)\) TO \((.+?)\)`)

// oldPartitions replaces the history tables' partitions by one a day from `from` to `to` days
// from today, as a database kept without retention for a while has.
func (d *database) oldPartitions(ctx context.Context, from, to int) error {
	_, err := d.pool.Exec(ctx, `
		DO $$
		DECLARE t text; p text; today timestamptz := date_bin('1 day', now(), '2000-01-01 00:00:00+00');
		BEGIN
		  FOREACH t IN ARRAY ARRAY['auction_snapshots', 'auction_sales'] LOOP
		    FOR p IN SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = t::regclass LOOP
		      EXECUTE format('DROP TABLE %I', p);
		    END LOOP;
		    FOR d IN `+fmt.Sprint(from)+`..`+fmt.Sprint(to-1)+` LOOP
		      EXECUTE format('CREATE TABLE %I PARTITION OF %I FOR VALUES FROM (%L) TO (%L)',
		        t || '_kday' || (d + 100), t, today + d * interval '1 day', today + (d + 1) * interval '1 day');
		    END LOOP;
		  END LOOP;
		END $$`)
	if err != nil {
		return fmt.Errorf("old partitions in %s: %w", d.name, err)
	}
	return nil
}

// event is what the matrix reads of a published snapshot event.
type event struct {
	SnapshotID       int64      `json:"snapshot_id"`
	ItemID           string     `json:"item_id"`
	CollectedAt      time.Time  `json:"collected_at"`
	PreviousSnapshot *time.Time `json:"previous_snapshot_at"`
	SalesCount       int        `json:"sales_count"`
}

// verifyEvents reads the topic with a real consumer: every stored snapshot's event is there
// (deduplicated by snapshot_id), first delivered in its item's order, each item's events chain
// (previous_snapshot_at is the previous event's collected_at) and the sales they count equal
// the sales rows.
func (k *killRun) verifyEvents(ctx context.Context) error {
	var stored []int64
	rows, err := k.d.pool.Query(ctx, `SELECT snapshot_id FROM auction_snapshots WHERE NOT synthetic_item(item_id)`)
	if err != nil {
		return err
	}
	if stored, err = pgx.CollectRows(rows, pgx.RowTo[int64]); err != nil {
		return err
	}
	events, err := consumeEvents(ctx, k.broker, len(stored))
	if err != nil {
		return err
	}
	byItem := map[string][]event{}
	for _, e := range events {
		byItem[e.ItemID] = append(byItem[e.ItemID], e)
	}
	missing, broken, sales := 0, 0, 0
	seen := map[int64]bool{}
	for _, e := range events {
		seen[e.SnapshotID] = true
		sales += e.SalesCount
	}
	for _, id := range stored {
		if !seen[id] {
			missing++
		}
	}
	for _, evs := range byItem {
		slices.SortFunc(evs, func(a, b event) int { return a.CollectedAt.Compare(b.CollectedAt) })
		for i, e := range evs {
			switch {
			case i == 0 && e.PreviousSnapshot != nil:
				broken++
			case i > 0 && (e.PreviousSnapshot == nil || !e.PreviousSnapshot.Equal(evs[i-1].CollectedAt)):
				broken++
			}
		}
	}
	// What a consumer reads in the partition's order: each item's first deliveries come in the
	// order they were collected (a redelivery may come later; consumeEvents dropped it).
	misordered := 0
	last := map[string]time.Time{}
	for _, e := range events {
		if t, ok := last[e.ItemID]; ok && !e.CollectedAt.After(t) {
			misordered++
		}
		last[e.ItemID] = e.CollectedAt
	}
	salesRows, err := k.d.count(ctx, `SELECT count(*) FROM auction_sales WHERE NOT synthetic_item(item_id)`)
	if err != nil {
		return err
	}
	k.r.check(misordered == 0, "%s: %d events first delivered after a newer event of their item", k.label, misordered)
	k.r.check(missing == 0, "%s: %d of %d stored snapshots never published", k.label, missing, len(stored))
	k.r.check(len(seen) == len(stored), "%s: %d distinct events for %d snapshots", k.label, len(seen), len(stored))
	k.r.check(broken == 0, "%s: %d events whose previous_snapshot_at is not the previous event's collected_at", k.label, broken)
	k.r.check(k.salesDropped || sales == salesRows, "%s: events count %d sales, the database holds %d", k.label, sales, salesRows)
	return nil
}

// consumeEvents reads the topic from the start until want distinct snapshots arrived or
// nothing new came in five polls; duplicates (redeliveries) are dropped by snapshot_id, and
// fixture items' events (seed-…, the relays' ballast) left out.
func consumeEvents(ctx context.Context, broker string, want int) ([]event, error) {
	var out []event
	seen := map[int64]bool{}
	quiet := 0
	more := func() bool { quiet++; return len(seen) < want && quiet <= 5 }
	err := readTopic(ctx, broker, more, func(rec *kgo.Record) error {
		quiet = 0
		var e event
		if err := json.Unmarshal(rec.Value, &e); err != nil {
			return fmt.Errorf("event at offset %d: %w", rec.Offset, err)
		}
		if !seen[e.SnapshotID] && !strings.HasPrefix(e.ItemID, catalog.SyntheticPrefix) {
			seen[e.SnapshotID] = true
			out = append(out, e)
		}
		return nil
	})
	return out, err
}

// killMomentsDefault: the full matrix in `make faults`; CI sets FAULTS_KILL_MOMENTS lower.
func killMomentsDefault() int {
	var n int
	if _, err := fmt.Sscan(os.Getenv("FAULTS_KILL_MOMENTS"), &n); err == nil && n > 0 {
		return n
	}
	return 3
}
