// Command bench is `make bench`: a reproducible benchmark suite on the local PostgreSQL that
// prints one table and (full mode) writes it to BENCHMARKS.md with the machine, the server's
// settings and the date.
//
// Every section creates its own fresh databases (bench_*), so runs are independent of what is
// in the developer's database, and drops them afterwards. BENCH_QUICK=1 runs a small version
// (CI keeps the harness from rotting with it); it prints the table and writes it only to
// $BENCH_OUT if set.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"time"
)

// sizes is what a run measures; quick mode shrinks every figure so CI finishes in ~2 minutes.
type sizes struct {
	cycle        []cycleSize   // tables for the claim+reschedule cycle, smallest first
	slowLatency  time.Duration // provider latency in the connection-occupancy section
	pgbenchSecs  int           // pgbench run length without and with the collector
	relayN       int           // outbox rows for relay vs raw writer
	latencyN     int           // events for commit→Kafka latency (at 500/s)
	rss          rssSize       // collect-due peak RSS
	daemonWindow time.Duration // steady-state window per budget case; 0 = skip
	hotRun       time.Duration // issue #30's HOT-under-backlog run per packing case
	fresh        freshSize     // freshness: realistic market size and replay horizon
	history      histSize      // stored history the retention and read figures run on
	historyDay   histDaySize   // the simulated stretch collected in both history modes
	console      consoleSize   // the catalog and history the console pages are timed on
	wal          walSize       // the HOT items whose collections' WAL is measured
	exportItems  int           // HOT items in the exported day
	api          apiSize       // the read API's polled market and stored history
}

// cycleSize is one cycle measurement: a table of tracked items, all due, and how many of them
// each contender (collector, raw-SQL ceiling, River) claims and completes while timed. timed
// below tracked measures the rate at that table size without paying to drain it all, which
// is what keeps the 1M row inside the 15-minute budget.
type cycleSize struct{ tracked, timed int }

// rssSize: collect-due runs over a table of tracked items, all due, and its pass is capped at
// collected items (whole batches), the ones the simulator knows.
type rssSize struct{ tracked, collected int }

func sizesFor(quick bool) sizes {
	if quick {
		// The second cycle size is a partial one so CI exercises the bounded path too. The
		// history day plans a catalog large enough for the budget to bind, so CI collects every
		// tier, over more than twice the heartbeat.
		return sizes{cycle: []cycleSize{{10_000, 10_000}, {50_000, 10_000}}, slowLatency: 2 * time.Second, pgbenchSecs: 5,
			relayN: 2_000, latencyN: 500, rss: rssSize{20_000, 2_000}, hotRun: 20 * time.Second, fresh: freshSize{2_000, 4, 300, 30 * time.Second},
			history: histSize{items: 2_000, days: 4, rows: 200_000, reads: 100}, historyDay: histDaySize{items: 200, passes: 150, planned: 150_000},
			console: consoleSize{items: 5_000, rows: 50_000, requests: 50}, wal: walSize{200, 35 * time.Second, 25 * time.Second, true},
			exportItems: 500,
			api:         apiSize{items: envInt("BENCH_API_ITEMS", 2_000), window: 8 * time.Second, series: histSize{items: 500, days: 30, rows: 150_000}, reads: 200}}
	}
	large := envInt("BENCH_ITEMS_LARGE", 1_000_000)
	return sizes{cycle: []cycleSize{{100_000, 100_000}, {large, timedClaims(large, envInt("BENCH_CYCLE_TIMED", 200_000))}},
		slowLatency: 7 * time.Second, pgbenchSecs: 15, relayN: 20_000, latencyN: 5_000,
		rss: rssSize{envInt("BENCH_RSS_ITEMS", 1_000_000), rssBatch * rssMaxBatches}, daemonWindow: 2 * time.Minute, hotRun: 90 * time.Second,
		fresh:   freshSize{envInt("BENCH_FRESH_ITEMS", 20_000), envInt("BENCH_FRESH_HOURS", 12), 2_000, 5 * time.Minute},
		history: histSize{items: 20_000, days: 30, rows: envInt("BENCH_HISTORY_ROWS", 20_000_000), reads: 1_000},
		historyDay: histDaySize{items: envInt("BENCH_HISTORY_DAY_ITEMS", 200), passes: int(24 * time.Hour / histDayStep),
			planned: envInt("BENCH_HISTORY_DAY_PLAN_ITEMS", dayScaleItems)},
		console:     consoleSize{items: envInt("BENCH_CONSOLE_ITEMS", 1_000_000), rows: envInt("BENCH_CONSOLE_ROWS", 20_000_000), requests: 200},
		wal:         walSize{envInt("BENCH_WAL_ITEMS", 2_000), 2 * time.Minute, 2 * time.Minute, false},
		exportItems: envInt("BENCH_EXPORT_ITEMS", dayScaleItems),
		// /timeseries reads the history section's stored volume: 30 days of every item.
		api: apiSize{items: envInt("BENCH_API_ITEMS", 20_000), window: 30 * time.Second,
			series: histSize{items: 20_000, days: 30, rows: envInt("BENCH_HISTORY_ROWS", 20_000_000)}, reads: 2_000}}
}

// timedClaims rounds up to whole claim batches, so the collector's MaxBatches pass and the
// ceiling's loops take exactly the same number of items, and caps it at the table.
func timedClaims(tracked, timed int) int {
	return min(tracked, (timed+cycleBatch-1)/cycleBatch*cycleBatch)
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// row is one line of the table: what, the figure, and how it was measured.
type row struct{ Measure, Value, How string }

type report struct {
	rows  []row
	notes []string
}

func (r *report) add(measure, value, how string) {
	r.rows = append(r.rows, row{measure, value, how})
	fmt.Fprintf(os.Stderr, "  %-55s %s\n", measure, value)
}

func (r *report) note(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	r.notes = append(r.notes, s)
	fmt.Fprintln(os.Stderr, "  note:", s)
}

func main() {
	quick := os.Getenv("BENCH_QUICK") == "1"
	out := flag.String("out", cmp.Or(os.Getenv("BENCH_OUT"), map[bool]string{false: "BENCHMARKS.md"}[quick]),
		"write the report here (empty: print only)")
	only := flag.String("only", os.Getenv("BENCH_ONLY"), "comma-separated sections to run (cycle,occupancy,relay,rss,daemon,freshness,adaptive,requests,history,console,wal,export,api); empty = all")
	flag.Parse()
	log.SetFlags(0)
	log.SetPrefix("bench: ")

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	db, err := newEnv(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer db.close()
	sz := sizesFor(quick)
	if quick {
		cycleRounds = envInt("BENCH_CYCLE_ROUNDS", 1)
	}
	rep := &report{}
	sections := []struct {
		name string
		run  func(context.Context, *env, sizes, *report) error
	}{
		{"cycle", benchCycle},
		{"occupancy", benchOccupancy},
		{"relay", benchRelay},
		{"rss", benchRSS},
		{"daemon", benchDaemon},
		{"freshness", benchFreshness},
		{"adaptive", benchAdaptive},
		{"requests", benchRequests},
		{"history", benchHistory},
		{"console", benchConsole},
		{"wal", benchWAL},
		{"export", benchExport},
		{"api", benchAPI},
	}
	var failed []string
	for _, s := range sections {
		if *only != "" && !strings.Contains(","+*only+",", ","+s.name+",") {
			continue
		}
		t0 := time.Now()
		fmt.Fprintf(os.Stderr, "== %s\n", s.name)
		if err := s.run(ctx, db, sz, rep); err != nil {
			failed = append(failed, s.name)
			rep.note("section %s failed: %v", s.name, err)
		}
		fmt.Fprintf(os.Stderr, "   (%s took %s)\n", s.name, time.Since(t0).Round(time.Second))
	}
	md := render(db, rep, quick, time.Since(start))
	fmt.Print(md)
	if *out != "" {
		if err := os.WriteFile(*out, []byte(md), 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Fprintf(os.Stderr, "wrote %s\n", *out)
	}
	if len(failed) > 0 {
		// Last on stderr, so CI's log ends with what broke rather than with the table.
		log.Printf("FAIL: section(s) %s failed; the error is in the notes above", strings.Join(failed, ", "))
		os.Exit(1)
	}
}

func render(e *env, rep *report, quick bool, took time.Duration) string {
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	b.WriteString("Produced by `make bench` (tools/bench; River in bench/river, its own Go module). ")
	if quick {
		b.WriteString("**BENCH_QUICK=1: small sizes, for keeping the harness alive, not for quoting.** ")
	}
	fmt.Fprintf(&b, "Run %s, took %s; load average at the end %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 MST"), took.Round(time.Second), loadAvg())
	b.WriteString("Reproduce: `make bench` (about 25 min on 2 cores; fresh `bench_*` databases on the local server, dropped afterwards). " +
		"`BENCH_QUICK=1 make bench` runs small sizes in ~2 min and only prints. Knobs: `BENCH_ITEMS_LARGE` (second cycle table, default 1000000), " +
		"`BENCH_CYCLE_TIMED` (claims timed on it, default 200000), `BENCH_CYCLE_ROUNDS` (interleaved rounds per cycle size, rows are medians; default 3, 1 with BENCH_QUICK), `BENCH_RSS_ITEMS` (collect-due RSS table, default 1000000), " +
		"`BENCH_DAEMON_RSS_ITEMS` (daemon RSS table, default 1000000), `BENCH_FRESH_ITEMS` / `BENCH_FRESH_HOURS` (freshness replay, default 20000 items, 12 h simulated), " +
		"`BENCH_HISTORY_ROWS` (stored snapshot rows under the history section's retention and reads, default 20000000), `BENCH_HISTORY_DAY_ITEMS` / `BENCH_HISTORY_DAY_PLAN_ITEMS` (the simulated day collected in both history modes: its items, default 200, a sample of a realistic catalog of default 20000 planned with the default budget), `BENCH_CONSOLE_ITEMS` / `BENCH_CONSOLE_ROWS` (the catalog and stored snapshots the console pages are timed on, default 1000000 items, 20000000 rows), `BENCH_WAL_ITEMS` (HOT items whose collections' WAL is measured, default 2000), `BENCH_EXPORT_ITEMS` (HOT items in the exported day, default 20000), `BENCH_API_ITEMS` (HOT items collected while the read API's /latest is polled, default 20000; /timeseries reads `BENCH_HISTORY_ROWS` stored rows), `BENCH_ONLY=cycle,occupancy,relay,rss,daemon,freshness,adaptive,requests,history,console,wal,export,api` (or `-only`: run those sections), `BENCH_OUT`. " +
		"Every figure is one run, not a best-of: on a shared 2-core machine expect ±30 % between runs (the load average is recorded).\n\n")
	b.WriteString("| Machine | |\n|---|---|\n")
	for _, kv := range e.facts {
		fmt.Fprintf(&b, "| %s | %s |\n", kv[0], kv[1])
	}
	b.WriteString("\n| Measure | Value | How it was measured |\n|---|---|---|\n")
	for _, r := range rep.rows {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", r.Measure, r.Value, strings.ReplaceAll(r.How, "|", `\|`))
	}
	if len(rep.notes) > 0 {
		b.WriteString("\nNotes:\n\n")
		for _, n := range rep.notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
	}
	return b.String()
}
