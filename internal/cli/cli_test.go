package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// A database that was never migrated gets one line naming it and `migrate up` from every
// command that needs the schema, before anything is printed.
func TestUnmigratedDatabaseSaysMigrateUp(t *testing.T) {
	catalogEnv(t, true)
	db := storetest.NewEmptyDatabase(t)
	latest, err := store.LatestVersion()
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("the database at %s is at schema version 0 of %d: migrations are pending; run `collector migrate up`", store.Where(db), latest)
	for _, args := range [][]string{{"collect-due"}, {"status"}, {"items"}, {"provider", "status"}, {"collect", "x"}, {"outbox", "list"}} {
		out, _, err := runCollector(t, append(args, "--database-url", db)...)
		if err == nil || err.Error() != want {
			t.Errorf("%v: err = %v, want %q", args, err, want)
		}
		if out != "" {
			t.Errorf("%v printed %q before the error", args, out)
		}
		if exitCode(err) != exitRuntime {
			t.Errorf("%v: exit code %d, want %d", args, exitCode(err), exitRuntime)
		}
	}
	// After migrate up the same command works.
	if _, _, err := runCollector(t, "migrate", "up", "--database-url", db); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCollector(t, "status", "--database-url", db)
	if err != nil {
		t.Fatalf("status after migrate up: %v", err)
	}
	// Nothing pending has no oldest.
	if !strings.Contains(out, "outbox: 0 unpublished, 0 failed") {
		t.Fatalf("status of an empty outbox:\n%s", out)
	}
}

// A database that does not answer is named by host, port and name, never with its password.
func TestUnreachableDatabaseIsNamed(t *testing.T) {
	catalogEnv(t, true)
	const url = "postgres://someone:hunter2-secret@127.0.0.1:1/shopdb?sslmode=disable&connect_timeout=2"
	for _, args := range [][]string{{"status"}, {"migrate", "status"}, {"migrate", "up"}} {
		_, _, err := runCollector(t, append(args, "--database-url", url)...)
		if err == nil || !strings.Contains(err.Error(), "127.0.0.1:1/shopdb") {
			t.Errorf("%v: err = %v, want it to name 127.0.0.1:1/shopdb", args, err)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%v: the password leaked: %v", args, err)
		}
	}
}

// Configuration and keys are checked before the database is touched: with a bad flag, no
// market key and an unreachable database, the error is about the first two.
func TestConfigCheckedBeforeDatabase(t *testing.T) {
	catalogEnv(t, false)
	const url = "postgres://u@127.0.0.1:1/nodb?connect_timeout=2"
	_, _, err := runCollector(t, "collect-due", "--database-url", url, "--batch-size", "-3")
	if err == nil || !strings.Contains(err.Error(), "--batch-size -3") || strings.Contains(err.Error(), "nodb") {
		t.Fatalf("err = %v, want the bad --batch-size and no database error", err)
	}
	for _, args := range [][]string{{"collect-due"}, {"collect", "x"}, {"run"}} {
		_, _, err = runCollector(t, append(args, "--database-url", url)...)
		if err == nil || !strings.Contains(err.Error(), "NEOPLE_MARKET_API_KEY") {
			t.Errorf("%v: err = %v, want the missing NEOPLE_MARKET_API_KEY before the database", args, err)
		}
	}
}

func TestBadLogFormatNamesWhereItCameFrom(t *testing.T) {
	catalogEnv(t, true)
	var out, errOut strings.Builder
	cmd := newRootCmd(&out, &errOut)
	cmd.SetArgs([]string{"status", "--log-format", "xml"})
	err := cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "--log-format xml: allowed: json, console") {
		t.Fatalf("from the flag: %v", err)
	}
	t.Setenv("COLLECTOR_LOG_FORMAT", "yaml")
	cmd = newRootCmd(&out, &errOut)
	cmd.SetArgs([]string{"status"})
	err = cmd.Execute()
	if err == nil || !strings.Contains(err.Error(), "config log.format (env COLLECTOR_LOG_FORMAT, flag --log-format) = yaml") {
		t.Fatalf("from the environment: %v", err)
	}
}

func TestCollectArgumentMessages(t *testing.T) {
	db := catalogEnv(t, true)
	_, _, err := runCollector(t, "collect", "--database-url", db)
	if err == nil || !strings.Contains(err.Error(), "missing ITEM_ID") || !strings.Contains(err.Error(), "collector items") {
		t.Fatalf("collect without an argument: %v", err)
	}
	if exitCode(err) != exitUsage || usageHint(err) != "Run 'collector collect --help' for usage." {
		t.Fatalf("collect without an argument: exit %d, hint %q", exitCode(err), usageHint(err))
	}
	out, _, err := runCollector(t, "collect", "no-such-item", "--database-url", db)
	if err == nil || !strings.Contains(err.Error(), "no-such-item") {
		t.Fatalf("collect of an unknown item: %v", err)
	}
	if out != "" {
		t.Fatalf("collect of an unknown item printed %q before its error", out)
	}
}

// Usage errors exit 2 with a hint; a command that ran and failed exits 1.
func TestExitCodes(t *testing.T) {
	catalogEnv(t, true)
	for _, args := range [][]string{
		{"no-such-command"}, {"status", "--no-such-flag"}, {"status", "extra"}, {"collect"},
		{"touch", "a", "b"}, {"outbox", "nope"}, {"provider", "set"}, {"collect-due", "--batch-size", "many"},
		{"migrate", "nope"}, {"items", "a", "b"},
	} {
		_, _, err := runCollector(t, args...)
		if code := exitCode(err); code != exitUsage {
			t.Errorf("%v: exit %d (%v), want %d", args, code, err, exitUsage)
		}
	}
	_, _, err := runCollector(t, "demo")
	if code, hint := exitCode(err), usageHint(err); code != exitUsage || !strings.Contains(hint, "go run ./cmd/collector-dev demo") {
		t.Errorf("demo in the shipped binary: exit %d, hint %q; want %d and where it went", code, hint, exitUsage)
	}
	_, _, err = runCollector(t, "status", "--database-url", "postgres://u@127.0.0.1:1/x?connect_timeout=2")
	if code := exitCode(err); code != exitRuntime {
		t.Errorf("unreachable database: exit %d (%v), want %d", code, err, exitRuntime)
	}
	if code := exitCode(nil); code != 0 {
		t.Errorf("success: exit %d", code)
	}
}

func TestEveryCommandHasAnExample(t *testing.T) {
	walk(newRootCmd(&strings.Builder{}, &strings.Builder{}), func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		if !strings.Contains(c.Example, "collector ") {
			t.Errorf("%s has no Example: section (add it to examples in examples.go)", c.CommandPath())
		}
		var help strings.Builder
		c.SetOut(&help)
		_ = c.Help()
		if !strings.Contains(help.String(), "Examples:\n") {
			t.Errorf("%s --help shows no examples", c.CommandPath())
		}
	})
}

func TestCompletionOffersFixedChoices(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"items", "--tier", ""}, []string{"HOT_1M", "DORMANT"}},
		{[]string{"status", "--log-format", ""}, []string{"json", "console"}},
		{[]string{"status", "--log-level", ""}, []string{"debug", "error"}},
		{[]string{"provider", "set", ""}, []string{"HEALTHY", "MAINTENANCE", "auto"}},
		{[]string{"migrate", ""}, []string{"up", "status"}},
	} {
		var out strings.Builder
		cmd := newRootCmd(&out, &strings.Builder{})
		cmd.SetArgs(append([]string{cobra.ShellCompRequestCmd}, tc.args...))
		if err := cmd.Execute(); err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !regexp.MustCompile(`(?m)^` + w + `(\t|$)`).MatchString(out.String()) {
				t.Errorf("completing %q: %q not offered in\n%s", tc.args, w, out.String())
			}
		}
	}
}

func help(t *testing.T, args ...string) string {
	t.Helper()
	out, _, err := runCollector(t, append(args, "--help")...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestHelpRendering(t *testing.T) {
	if h := help(t, "provider", "set"); !strings.Contains(h, "--for DURATION") || strings.Contains(h, "--for provider") {
		t.Errorf("provider set --help renders --for badly:\n%s", h)
	}
	if h := help(t, "outbox", "retry"); strings.Contains(h, "int64Slice") || strings.Contains(h, "(default [])") {
		t.Errorf("outbox retry --help:\n%s", h)
	}
	h := help(t, "collect-due")
	for _, want := range []string{`--batch-size int +items claimed per statement \(collect.batch_size\) \(default 100\)`,
		`--database-url URL +PostgreSQL URL.*\(default "postgres://postgres@127.0.0.1:5432/duecollector\?sslmode=disable"\)`} {
		if !regexp.MustCompile(want).MatchString(h) {
			t.Errorf("collect-due --help lacks %q:\n%s", want, h)
		}
	}
	if h := help(t, "version"); strings.Contains(h, "--database-url") {
		t.Errorf("version --help shows --database-url, which it never uses")
	}
	if h := help(t, "status"); !strings.Contains(h, "--database-url") {
		t.Error("hiding database flags from version leaked into other commands")
	}
	root := help(t)
	if !strings.Contains(root, "collector-dev demo") {
		t.Error("root help does not point to demo")
	}
	for _, dev := range []string{"\n  demo ", "\n  sim "} {
		if strings.Contains(root, dev) {
			t.Errorf("the shipped collector lists the development command%s", strings.TrimRight(dev, " "))
		}
	}
	if strings.Contains(root, "Additional Commands:") {
		t.Errorf("a command has no group in root help (add it to groupOf in cli.go):\n%s", root)
	}
	if !regexp.MustCompile(`\n  outbox .*\n  relay-outbox `).MatchString(root) {
		t.Errorf("relay-outbox is not listed next to outbox:\n%s", root)
	}
}

func TestConfigPrintShowsSources(t *testing.T) {
	file := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(file, []byte("collect:\n  concurrency: 7\nkafka:\n  sasl:\n    mechanism: PLAIN\n    username: u\n    password: file-secret-pw\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("COLLECTOR_CONFIG", "")
	t.Setenv("COLLECTOR_COLLECT_LEASE", "90s")
	t.Setenv("NEOPLE_MARKET_API_KEY", "market-key-sentinel")
	t.Setenv("NEOPLE_ITEM_API_KEY", "")
	t.Setenv("COLLECTOR_API_TOKENS", "api-token-sentinel-0123456789")
	t.Setenv("COLLECTOR_DATABASE_DIRECT_URL", "host=db.example password=dsn-secret-pw dbname=prod")
	t.Setenv("COLLECTOR_DATABASE_READ_URL", "postgres://bob@standby.example/prod?password=query-secret-pw")
	t.Setenv("NEOPLE_API_BASE_URL", "https://proxy:proxy-secret-pw@api.neople.co.kr/")
	out, _, err := runCollector(t, "config", "print", "--config", file, "--log-level", "debug",
		"--database-url", "postgres://bob:url-secret-pw@db.example:5433/prod")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`(?m)^collect\.concurrency +7 +file ` + regexp.QuoteMeta(file) + `$`,
		`(?m)^collect\.lease +90s +env COLLECTOR_COLLECT_LEASE$`,
		`(?m)^log\.level +debug +flag --log-level$`,
		`(?m)^collect\.batch_size +100 +default$`,
		`(?m)^database\.url +postgres://bob:xxxxx@db\.example:5433/prod +flag --database-url$`,
		`(?m)^kafka\.sasl\.password +\[redacted\] +file `,
		`(?m)^NEOPLE_MARKET_API_KEY +\[redacted\] +env NEOPLE_MARKET_API_KEY$`,
		`(?m)^NEOPLE_ITEM_API_KEY +\(not set\) +-$`,
		`(?m)^COLLECTOR_API_TOKENS +\[redacted\] +env COLLECTOR_API_TOKENS$`,
		`(?m)^database\.direct_url +host=db\.example password=xxxxx dbname=prod +env `,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Errorf("config print lacks %s:\n%s", want, out)
		}
	}
	for _, secret := range []string{"market-key-sentinel", "url-secret-pw", "file-secret-pw", "api-token-sentinel", "dsn-secret-pw", "query-secret-pw", "proxy-secret-pw"} {
		if strings.Contains(out, secret) {
			t.Errorf("config print shows the secret %s", secret)
		}
	}
}

// Every flag of every command has a row in docs/configuration.md's command-flags table.
func TestEveryFlagIsDocumented(t *testing.T) {
	b, err := os.ReadFile("../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	root, a := newRoot(&strings.Builder{}, &strings.Builder{})
	for key, f := range a.flagKeys {
		row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(key) + "` \\|.*`[^`|]*--" + regexp.QuoteMeta(f.Name) + "`")
		if !row.MatchString(doc) {
			t.Errorf("docs/configuration.md: the row of %s does not name its flag --%s", key, f.Name)
		}
	}
	walk(root, func(c *cobra.Command) {
		c.LocalFlags().VisitAll(func(f *pflag.Flag) {
			if f.Name == "help" || f.Hidden { // hidden: for tools/faults, not operators
				return
			}
			cmd := strings.TrimPrefix(c.CommandPath(), "collector ")
			if c == root {
				cmd = "(all commands)"
			}
			row := regexp.MustCompile("(?m)^\\| `" + regexp.QuoteMeta(cmd) + "` \\| `--" + regexp.QuoteMeta(f.Name) + "[ `][^|]*\\| *([^|]*?) *\\|")
			m := row.FindStringSubmatch(doc)
			if m == nil {
				t.Errorf("docs/configuration.md has no row | `%s` | `--%s` … | in its command-flags table", cmd, f.Name)
				return
			}
			want := "`" + f.DefValue + "`"
			switch f.DefValue {
			case "", "false", "0", "0s", "[]":
				want = ""
			}
			if m[1] != want {
				t.Errorf("docs/configuration.md: %s --%s: default cell %q, the flag's default is %q", cmd, f.Name, m[1], want)
			}
		})
	})
}

func TestExitCodesDocumented(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"Exit codes", "`2`", "`1`"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("README.md does not document exit codes (%q)", want)
		}
	}
}

// Nonsense values are refused before anything is done; an unknown COLLECTOR_* variable is named.
func TestBadValuesAreRefusedAndUnknownEnvIsNamed(t *testing.T) {
	db := catalogEnv(t, true)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"provider", "set", "maintenance", "--reason", "x", "--for", "-5m"}, "--for -5m0s: must be at least 1s"},
		{[]string{"provider", "set", "maintenance", "--reason", "x", "--for", "0s"}, "--for 0s: must be at least 1s"},
		{[]string{"provider", "set", "maintenance", "--reason", "x", "--for", "500us"}, "--for 500µs: must be at least 1s"}, // stored as no end
		{[]string{"api-check", "--burst", "100000"}, "--burst 100000: allowed 0 (do not provoke) to 1000"},
		{[]string{"api-check", "--burst", "-1"}, "--burst -1: allowed"},
		{[]string{"api-check", "--pace", "-1s"}, "--pace -1s: must not be negative"},
		{[]string{"history", "x", "--since", "213504d"}, "at most 106751d"}, // wrapped to 25m otherwise
		{[]string{"outbox", "retry", "--id", "-3"}, "--id -3: outbox ids are positive"},
		{[]string{"outbox", "retry", "--id", "0"}, "--id 0: outbox ids are positive"},
		{[]string{"outbox", "retry"}, "give either --id (one or more) or --all"},
		{[]string{"outbox", "retry", "--all", "--id", "3"}, "give either --id (one or more) or --all"},
		{[]string{"seed:synthetic", "--items", "0"}, "--items 0: must be between 1 and"},
		{[]string{"seed:synthetic", "--days", "0"}, "--days 0: must be between 1 and"},
		{[]string{"collect-due", "--batch-size", "99999999999999999999"}, "out of range"},
		{[]string{"plan", "--budget", "0"}, "--budget 0: want a positive, finite number"},
		{[]string{"plan", "--budget", "-2"}, "--budget -2: want a positive, finite number"},
		{[]string{"plan", "--budget", "Inf"}, "--budget +Inf: want a positive, finite number"},
		{[]string{"plan", "--budget", "NaN"}, "--budget NaN: want a positive, finite number"},
		{[]string{"items", "pin", "x", "BOGUS"}, `pin item x: tier "BOGUS" cannot be pinned`},
		{[]string{"items", "pin", "x", "DORMANT"}, `pin item x: tier "DORMANT" cannot be pinned`},
	} {
		_, _, err := runCollector(t, append(c.args, "--database-url", db)...)
		if err == nil || !strings.Contains(err.Error(), c.want) || exitCode(err) != exitUsage {
			t.Errorf("%v: %v (exit %d), want a usage error saying %q", c.args, err, exitCode(err), c.want)
		}
	}
	t.Setenv("COLLECTOR_COLECT_BATCH_SIZE", "5")
	_, stderr, err := runCollector(t, "provider", "status", "--database-url", db)
	if err != nil || !strings.Contains(stderr, "COLLECTOR_COLECT_BATCH_SIZE") || !strings.Contains(stderr, "unknown environment variable") {
		t.Fatalf("stderr %q (%v): want a warning naming COLLECTOR_COLECT_BATCH_SIZE", stderr, err)
	}
}

// Every `collector …` command line the docs, the README and the alerts give an operator names a
// command that exists (a runbook that names a missing one fails at the worst moment).
func TestEveryCommandTheDocsNameExists(t *testing.T) {
	root, _ := newRoot(&strings.Builder{}, &strings.Builder{})
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	yml, err := filepath.Glob("../../deploy/*/*.yml")
	if err != nil {
		t.Fatal(err)
	}
	files = append(append(files, "../../README.md"), yml...)
	// A command line is a code span or a fenced block's line that starts with it (after an
	// optional "$ "), or, in the alert rules, a parenthesised one. The rules' sentences also
	// name commands with their flags ("run collector outbox retry --all"): those are checked
	// when their first words name a command (other sentences say "the collector logs …").
	code := regexp.MustCompile("(?s)```.*?```|`[^`\n]+`")
	line := regexp.MustCompile(`(?m)^\s*(?:\$ )?collector((?: [a-z][a-z0-9:-]*)+)(.*)$`)
	paren := regexp.MustCompile(`\(collector((?: [a-z][a-z0-9:-]*)+)([^)]*)`)
	inText := regexp.MustCompile(`\bcollector((?: [a-z][a-z0-9:-]*)+)([^.;,:()"]*)`)
	flag := regexp.MustCompile(`(?:^|[\s\[(])--([a-z][a-z0-9-]*)`)
	checked := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var found, prose [][]string
		if strings.HasSuffix(f, ".md") {
			for _, s := range code.FindAllString(string(b), -1) {
				found = append(found, line.FindAllStringSubmatch(strings.Trim(s, "`"), -1)...)
			}
		} else {
			found = paren.FindAllStringSubmatch(string(b), -1)
			prose = inText.FindAllStringSubmatch(string(b), -1)
		}
		for i, m := range append(found, prose...) {
			words := strings.Fields(m[1])
			if words[0] == "completion" { // cobra adds it when the command runs
				continue
			}
			cmd, rest, err := root.Find(words)
			if err != nil || cmd == root {
				if i < len(found) {
					t.Errorf("%s: `collector%s` names no command", filepath.Base(f), m[1])
				}
				continue
			}
			// A command that only groups others needs one of them next.
			if !cmd.Runnable() && len(rest) > 0 {
				t.Errorf("%s: `collector%s`: %s has no subcommand %q", filepath.Base(f), m[1], cmd.CommandPath(), rest[0])
			}
			// And every flag it is given is one it has (a copied runbook line fails on any other).
			for _, fl := range flag.FindAllStringSubmatch(m[2], -1) {
				if cmd.Flags().Lookup(fl[1]) == nil && cmd.InheritedFlags().Lookup(fl[1]) == nil {
					t.Errorf("%s: `collector%s%s`: %s has no flag --%s", filepath.Base(f), m[1], m[2], cmd.CommandPath(), fl[1])
				}
			}
			checked++
		}
	}
	if checked < 50 {
		t.Fatalf("only %d command lines found: the patterns no longer match the docs", checked)
	}
}

// A one-shot a signal stops before it finished says so, not a bare "context canceled".
func TestAOneShotStoppedBySignalSaysSo(t *testing.T) {
	db := catalogEnv(t, true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the signal, before the import got anywhere
	var stdout, stderr strings.Builder
	code := execute(ctx, []string{"import-items", "--database-url", db, "--targets", "../../configs/import-targets.yaml", "--log-format", "console"}, &stdout, &stderr)
	if code != 1 || !strings.Contains(stderr.String(), "stopped by a signal before it finished") {
		t.Fatalf("exit %d, stderr %q; want 1 saying a signal stopped it", code, stderr.String())
	}
}

// Every new connection of a command's pool moves snapshot ids on to the clock: a failover or a
// restore reconnects every process, so snapshots written after the database lost its last
// commits do not reuse the ids of events the relay had already published.
func TestACommandsConnectionsMoveSnapshotIDsOn(t *testing.T) {
	pool, db := storetest.NewPool(t)
	t.Setenv("COLLECTOR_CONFIG", "")
	ctx := context.Background()
	const seq = `pg_get_serial_sequence('auction_snapshots', 'snapshot_id')`
	var clock int64
	if err := pool.QueryRow(ctx, `SELECT setval(`+seq+`, 1000), (extract(epoch FROM clock_timestamp()) * 1e6)::bigint`).Scan(nil, &clock); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCollector(t, "status", "--database-url", db); err != nil {
		t.Fatalf("status: %v", err)
	}
	var next int64
	if err := pool.QueryRow(ctx, `SELECT nextval(`+seq+`)`).Scan(&next); err != nil {
		t.Fatal(err)
	}
	if next <= clock {
		t.Fatalf("next snapshot id %d after a command connected, want past the clock's %d µs", next, clock)
	}
}
