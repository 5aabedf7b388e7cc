package main

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// benchDaemon runs the process benchmarks (procs.go), then internal/daemon's BenchmarkSteadyState (two in-process daemons over 20,000
// items across the tiers, simulator over httptest) and takes its figures.
func benchDaemon(ctx context.Context, e *env, sz sizes, rep *report) error {
	if err := benchDaemonProcs(ctx, e, sz, rep); err != nil {
		return err
	}
	if sz.daemonWindow == 0 {
		rep.note("daemon steady state (due→claim lag, load flatness, 2-daemon budget utilisation) is not run in BENCH_QUICK mode")
		return nil
	}
	res, out, err := goBenchOutput(ctx, "./internal/daemon/", "^BenchmarkSteadyState$", "1x",
		"DUECOLLECTOR_BENCH_DURATION="+sz.daemonWindow.String())
	if err != nil {
		return err
	}
	busiest := busiestSeconds(out)
	how := fmt.Sprintf("BenchmarkSteadyState (internal/daemon): 2 daemons in one process, budget sharing on, concurrency 32, batch 100, over 20,000 items (10%% HOT, 20%% ACTIVE, 30%% WARM, 40%% COLD) on their phase-pinned slots, simulator over httptest; measured for %s after a 5 s warm-up", sz.daemonWindow)
	for i, c := range []struct{ name, budget string }{{"ample", "500"}, {"short", "100"}} {
		m := res["BenchmarkSteadyState/"+c.name]
		if m == nil {
			return fmt.Errorf("BenchmarkSteadyState/%s reported nothing:\n%s", c.name, out)
		}
		label := fmt.Sprintf("budget %s req/s (%s)", c.budget, c.name)
		rep.add("Due→claim lag p50 / p99, "+label, fmt.Sprintf("%.0f / %.0f ms", m["lag-p50-ms"], m["lag-p99-ms"]),
			how+"; last_claimed_at − last_due_at of every claim in the window")
		flat := "n/a"
		if i < len(busiest) && m["req/s"] > 0 {
			flat = fmt.Sprintf("%.2f (busiest %d/s, mean %.1f/s)", float64(busiest[i])/m["req/s"], busiest[i], m["req/s"])
		}
		rep.add("Load flatness (busiest second / mean), "+label, flat, "requests per second the simulator served the shared key (its per-second stats)")
		rep.add("Budget utilisation, "+label, fmt.Sprintf("%.0f%% of %s req/s", m["%budget"], c.budget),
			"requests the simulator served the key ÷ window ÷ budget; worst second is the busiest second above")
	}
	rep.note("the steady-state budget rows above are 2 daemons in one process (the daemon package's benchmark); the 3-process budget fidelity rows are separate `collector run` processes")
	return nil
}

var busiestRE = regexp.MustCompile(`busiest second (\d+)`)

// busiestSeconds returns the "busiest second N" of each case's log line, in order.
func busiestSeconds(out string) []int {
	var r []int
	for _, line := range strings.Split(out, "\n") {
		if m := busiestRE.FindStringSubmatch(line); m != nil {
			n, _ := strconv.Atoi(m[1])
			r = append(r, n)
		}
	}
	return r
}
