// Command faults is the fault suite behind `make faults`: it builds the collector, starts real
// processes of it against the simulator (also a real process, of collector-dev: the shipped
// binary does not link it), a fresh database on the local PostgreSQL and an in-process Kafka
// (kfake), injects one fault per scenario and checks what the issue promises: nothing stuck,
// nothing lost, nothing collected twice, keys never leaked.
//
// Scenarios (numbers as printed):
//
//	1  kill -9 of collect-due mid-batch → after lease expiry a re-run collects every item
//	2  8 collect-due one-shots at once on 2,000 due items → each fetched and stored once
//	3  Kafka broker down for 60 s (-kafka-down; shorter for a quick local run) while the
//	   relay follows and more events are written → none lost, per-item order kept, SIGTERM
//	   exits 0; relay-outbox --once with the broker down exits non-zero naming the broker
//	4  simulator maintenance mid-run → collect-due exits 0 within one request per worker,
//	   provider_status MAINTENANCE, no lease left; a run while paused sends nothing
//	4b the same against `collector run`: MAINTENANCE → RECOVERING → HEALTHY by itself
//	5  5xx, truncated, oversized, timed-out and wrongly typed bodies → per-item failures,
//	   rescheduled, no lease left, no panic
//	6  pg_terminate_backend on collect-due's connections → nothing stuck or lost
//	6b the same against `collector run`: it carries on without a restart
//	8  hostile answers (NUL, EUC-KR, gzip bytes, 20,000 Korean characters, rows dated 2099 or
//	   2001, another item's rows) → exit 0, every item stored or rescheduled with a clean
//	   last_error, no impossible date stored; a DNF980 with NUL/EUC-KR bytes → MAINTENANCE
//	8b Retry-After: 999999999 → cool-down capped at 5m, collect-due exits 0 at once saying until
//	   when; a second run in the cool-down sends nothing and exits 0
//	8c the daemon with a refused key for 30 s → a handful of requests, /readyz says why, one
//	   error line, SIGTERM exits 0
//	8d write-back connections terminated mid-transaction → retried: one run stores every item
//	9  the database turns read-only under `collector run` (sessions cut, as in a failover) for
//	   10 s → /readyz 503 naming read_only within seconds, /healthz 200, status --check exits 1
//	   naming it, no provider request; ready again by itself, every item fetched once and
//	   stored once
//	9b PostgreSQL gone for 10 s under `collector run` with its relay: a real restart of the local
//	   cluster with FAULTS_PG_RESTART=real (CI), otherwise a proxy that cuts every connection
//	   and refuses new ones (a restart, without disturbing other work on a shared cluster)
//	   → not ready, live, no provider request; recovers unaided, every item fetched and stored
//	   once, no lease left, every outbox event published, per item in order
//	10 the tablespace under `collector run`'s tables (a small tmpfs) filled up for 10 s while
//	   updates in place still succeed → /readyz 503 naming disk_full in every sample, metrics
//	   writable 0, status --check exits 1 naming it, no provider request, one log line when it
//	   starts and one when it ends; ready again by itself once freed, every item fetched once
//	   and stored once (skipped where a tmpfs cannot be mounted: not root)
//	K  the kill matrix: collector run (collecting; and probing a paused provider), collect-due,
//	   relay-outbox (both modes), prune mid-drop, import-items, migrate up,
//	   recalculate-popularity and seed:synthetic each killed with SIGKILL at seeded moments,
//	   then restarted or re-run → every snapshot published (deduplicated by snapshot_id) and
//	   chained per item, sales in events = sales rows, nothing stored twice, no lease, lane,
//	   probe or lock past its expiry, a dead daemon's budget share taken over within 3
//	   heartbeats, no partition missing, overlapping or half detached; each role's worst
//	   recovery time (kill → its work done by another) printed
//	F  the freeze matrix: collect-due, collect ITEM_ID, relay-outbox (both modes), collector run
//	   and collector run probing a paused provider each stopped with SIGSTOP at seeded moments
//	   (-kill-moments, -kill-seed) while another instance takes their work over once the leases
//	   run out, then resumed with SIGCONT → a resumed one-shot writes nothing and ends by itself
//	   (exit 0 or 1, no panic; collect ITEM_ID's failure names its lease); the resumed prober
//	   records nothing of the probe it lost; a resumed relay or daemon shares the work again and
//	   does it alone once the other stops; the kill matrix's checks hold, and each item's events
//	   are first delivered in order
//	7  a sentinel in both API keys for the whole run, plus runs with the key in the query
//	   string failing every way → not in any output, /_sim/stats, daemon HTTP or DB row
//
// 4b, 6b, 8c, 9, 9b, 10, K and F are skipped when the binary has no `run` command. Every scenario prints PASS or
// FAIL with the numbers it checked; the exit code is non-zero if any failed. Databases,
// processes and the broker are cleaned up on every exit path (logs are kept on failure).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"
)

type options struct {
	adminURL  string
	bin       string
	simBin    string
	only      map[string]bool
	kafkaDown time.Duration
	keep      bool
	verbose   bool
	// The kill matrix: moments per role (FAULTS_KILL_MOMENTS) and the seed that replays them.
	killMoments int
	killSeed    uint64
	killRoles   map[string]bool // nil: every role
}

// scenario is one fault. run returns the numbers it measured; failures go through r.check.
type scenario struct {
	id, name string
	run      func(ctx context.Context, h *harness, r *report) error
}

// report collects one scenario's checks and numbers.
type report struct {
	id, name string
	failures []string
	numbers  []string
	took     time.Duration
	skipped  string
}

func (r *report) check(ok bool, format string, args ...any) {
	if !ok {
		r.failures = append(r.failures, fmt.Sprintf(format, args...))
	}
}

func (r *report) num(format string, args ...any) {
	r.numbers = append(r.numbers, fmt.Sprintf(format, args...))
}

func (r *report) result() string {
	switch {
	case r.skipped != "":
		return "SKIP"
	case len(r.failures) > 0:
		return "FAIL"
	}
	return "PASS"
}

var scenarios = []scenario{
	{"1", "kill -9 mid-batch", scenarioKill9},
	{"2", "8 overlapping collect-due", scenarioOverlap},
	{"3", "kafka broker down", scenarioKafkaDown},
	{"4", "provider maintenance mid-run", scenarioMaintenance},
	{"4b", "daemon: maintenance, recovery", scenarioDaemonMaintenance},
	{"5", "bad provider bodies", scenarioBadBodies},
	{"6", "postgres connections killed", scenarioPGTerminate},
	{"6b", "daemon: postgres conns killed", scenarioDaemonPG},
	{"8", "hostile provider answers", scenarioHostileAnswers},
	{"8b", "absurd Retry-After", scenarioRetryAfter},
	{"8c", "daemon: refused key for 30 s", scenarioRefusedKey},
	{"8d", "write-back conns killed", scenarioWriteBackKilled},
	{"9", "daemon: database read-only", scenarioDaemonReadOnly},
	{"9b", "daemon+relay: postgres restart", scenarioPGRestart},
	{"10", "daemon: disk full under the tables", scenarioDaemonDiskFull},
	{"K", "kill matrix: every holder, SIGKILL", scenarioKillMatrix},
	{"F", "freeze matrix: SIGSTOP, takeover, SIGCONT", scenarioFreezeMatrix},
	{"7", "sentinel API key never leaks", scenarioSentinel},
}

func main() {
	var o options
	var only string
	flag.StringVar(&o.adminURL, "admin-url", envOr("FAULTS_ADMIN_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"),
		"PostgreSQL URL with CREATE DATABASE rights (env FAULTS_ADMIN_URL)")
	flag.StringVar(&o.bin, "bin", "", "use this collector binary instead of building ./cmd/collector")
	flag.StringVar(&o.simBin, "sim-bin", "", "run the simulator from this collector-dev binary instead of building ./cmd/collector-dev")
	flag.StringVar(&only, "only", "", "comma-separated scenarios to run, e.g. 1,4 (4 includes 4b); default all; 7 always runs and scans what ran")
	flag.DurationVar(&o.kafkaDown, "kafka-down", 60*time.Second,
		"how long the broker stays down in scenario 3 (the issue's 60s; CI runs it too)")
	flag.IntVar(&o.killMoments, "kill-moments", killMomentsDefault(), "kill and freeze matrices (K, F): seeded moments per role (env FAULTS_KILL_MOMENTS)")
	var roles string
	flag.StringVar(&roles, "kill-roles", "", "kill and freeze matrices (K, F): comma-separated roles, e.g. 'run (probing)' or 'frozen run'; default every role")
	flag.Uint64Var(&o.killSeed, "kill-seed", 1, "kill and freeze matrices (K, F): the seed of the moments; a failure prints it, so the same kills and freezes replay")
	flag.BoolVar(&o.keep, "keep", false, "keep the databases and the log directory")
	flag.BoolVar(&o.verbose, "v", false, "print progress")
	flag.Parse()
	if only != "" {
		o.only = map[string]bool{}
		for _, s := range strings.Split(only, ",") {
			o.only[strings.TrimSpace(s)] = true
		}
	}
	if roles != "" {
		o.killRoles = map[string]bool{}
		for _, r := range strings.Split(roles, ",") {
			r = strings.TrimSpace(r)
			if !slices.ContainsFunc(killRoles, func(k killRole) bool { return k.name == r }) &&
				!slices.ContainsFunc(freezeRoles, func(f freezeRole) bool { return f.name == r }) {
				fmt.Fprintf(os.Stderr, "faults: -kill-roles: no role %q\n", r)
				os.Exit(2)
			}
			o.killRoles[r] = true
		}
	}
	os.Exit(run(o))
}

func run(o options) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()

	h, err := newHarness(ctx, o)
	if h != nil {
		defer h.cleanup()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "faults: setup:", err)
		return 1
	}
	fmt.Printf("faults: collector %s, simulator %s, logs in %s\n", h.bin, h.simURL, h.dir)

	var reports []*report
	for _, s := range scenarios {
		r := &report{id: s.id, name: s.name}
		reports = append(reports, r)
		if o.only != nil && !o.only[s.id] && !o.only[strings.TrimRight(s.id, "b")] && s.id != "7" {
			r.skipped = "not selected"
			continue
		}
		if ctx.Err() != nil {
			r.failures = append(r.failures, "interrupted")
			continue
		}
		fmt.Printf("--- scenario %s: %s\n", s.id, s.name)
		t0 := time.Now()
		err := h.scenario(ctx, s, r)
		r.took = time.Since(t0)
		if err != nil {
			r.failures = append(r.failures, err.Error())
		}
		fmt.Printf("%s scenario %s (%s) in %s: %s\n", r.result(), s.id, s.name, r.took.Round(100*time.Millisecond), strings.Join(r.numbers, ", "))
		for _, f := range r.failures {
			fmt.Printf("    FAIL: %s\n", f)
		}
	}

	failed := printTable(reports)
	fmt.Printf("total %s\n", time.Since(start).Round(time.Second))
	if failed {
		h.failed = true
		fmt.Printf("logs kept in %s\n", h.dir)
		return 1
	}
	return 0
}

func printTable(reports []*report) (failed bool) {
	fmt.Println()
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "#\tscenario\tresult\tduration\tkey numbers")
	for _, r := range reports {
		if r.result() == "FAIL" {
			failed = true
		}
		nums := strings.Join(r.numbers, ", ")
		if r.skipped != "" {
			nums = r.skipped
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.id, r.name, r.result(), r.took.Round(100*time.Millisecond), nums)
	}
	_ = tw.Flush()
	return failed
}

// scenario runs one scenario and stops every process it left running, so the next starts clean.
func (h *harness) scenario(ctx context.Context, s scenario, r *report) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("harness panic: %v", p)
		}
		h.killAll()
	}()
	if err := h.sim.reset(ctx); err != nil {
		return fmt.Errorf("reset simulator: %w", err)
	}
	err = s.run(ctx, h, r)
	if errors.Is(err, context.Canceled) && ctx.Err() != nil {
		return errors.New("interrupted")
	}
	return err
}

func envOr(k, def string) string {
	if v := os.Getenv(k); v != "" {
		return v
	}
	return def
}
