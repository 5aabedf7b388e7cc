package telemetry_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.yaml.in/yaml/v3"

	"github.com/duecollector/duecollector/internal/api"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/tiers"
)

// The files that name the collector's metrics outside the code, relative to this package.
var (
	alertsFile     = filepath.Join("..", "..", "deploy", "prometheus", "alerts.yml")
	alertsTestFile = filepath.Join("..", "..", "deploy", "prometheus", "alerts_test.yml")
	promConfigFile = filepath.Join("..", "..", "deploy", "prometheus", "prometheus.yml")
	dashboardFile  = filepath.Join("..", "..", "deploy", "grafana", "duecollector.json")
	operationsFile = filepath.Join("..", "..", "docs", "operations.md")
)

// registered is every metric name the daemon's registry can expose, with whether it is a
// histogram (whose _bucket, _sum and _count series are the ones queried).
func registered(t *testing.T) map[string]bool {
	t.Helper()
	m := telemetry.NewMetrics()
	m.SetBuildInfo("test", "test")
	m.RegisterRowsRejected(provider.RejectReasons[:], func(string) int64 { return 0 })
	// The pool collector only reads the pool's statistics; a pool that never connects has them.
	pool, err := pgxpool.New(context.Background(), "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	m.RegisterPool(pool)
	m.RegisterReads(func() (time.Duration, bool, bool) { return 0, true, true })

	names := map[string]bool{}
	// What a scrape shows: every family with a series, typed.
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		names[f.GetName()] = f.GetType() == dto.MetricType_HISTOGRAM
	}
	// Label vectors show no family until a series is set, so their descriptors are read from
	// the Metrics fields themselves.
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		c, ok := v.Field(i).Interface().(prometheus.Collector)
		if !ok || v.Field(i).Type() == reflect.TypeFor[*prometheus.Registry]() {
			continue
		}
		_, histogram := c.(*prometheus.HistogramVec)
		if _, ok := c.(prometheus.Histogram); ok {
			histogram = true
		}
		descs := make(chan *prometheus.Desc, 8)
		c.Describe(descs)
		close(descs)
		for d := range descs {
			match := fqName.FindStringSubmatch(d.String())
			if match == nil {
				t.Fatalf("no fqName in %s (Metrics.%s)", d, v.Type().Field(i).Name)
			}
			names[match[1]] = histogram
		}
	}
	return names
}

// The metrics table of docs/operations.md lists every metric the collector exports, and only
// those: an operator writes alerts from it.
func TestOperationsListsEveryMetric(t *testing.T) {
	names := registered(t)
	a, err := api.New(nil, api.Config{}, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range a.Collectors() {
		descs := make(chan *prometheus.Desc, 8)
		c.Describe(descs)
		close(descs)
		for d := range descs {
			if m := regexp.MustCompile(`fqName: "([^"]+)"`).FindStringSubmatch(d.String()); m != nil {
				names[m[1]] = false
			}
		}
	}
	doc, err := os.ReadFile(operationsFile)
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	// A row's first cell names one metric or several, each in full.
	for _, row := range regexp.MustCompile("(?m)^\\| (`collector_[^|]*)\\|").FindAllStringSubmatch(string(doc), -1) {
		for _, m := range regexp.MustCompile("`(collector_[a-z0-9_]+)`").FindAllStringSubmatch(row[1], -1) {
			listed[m[1]] = true
		}
	}
	for n := range names {
		if strings.HasPrefix(n, "collector_") && !listed[n] {
			t.Errorf("%s is exported but not in docs/operations.md's metrics table", n)
		}
	}
	for n := range listed {
		if _, ok := names[n]; !ok {
			t.Errorf("docs/operations.md's metrics table lists %s, which the collector does not export", n)
		}
	}
}

var metricName = regexp.MustCompile(`\bcollector_[a-zA-Z0-9_]+`)

// unknown returns the collector_* names in texts that the registry does not expose. A name
// ending in "_" (as in collector_db_pool_* in prose) must prefix one that it does.
func unknown(names map[string]bool, texts []string) []string {
	var bad []string
	for _, text := range texts {
		for _, n := range metricName.FindAllString(text, -1) {
			if strings.HasSuffix(n, "_") {
				if !slices.ContainsFunc(keys(names), func(k string) bool { return strings.HasPrefix(k, n) }) {
					bad = append(bad, n+"*")
				}
				continue
			}
			if _, ok := names[n]; ok {
				continue
			}
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
			if base != n && names[base] {
				continue
			}
			bad = append(bad, n)
		}
	}
	sort.Strings(bad)
	return slices.Compact(bad)
}

func keys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// stringsIn returns every string value in a decoded YAML or JSON document.
func stringsIn(v any) []string {
	var out []string
	switch v := v.(type) {
	case string:
		out = append(out, v)
	case []any:
		for _, e := range v {
			out = append(out, stringsIn(e)...)
		}
	case map[string]any:
		for k, e := range v {
			out = append(out, k)
			out = append(out, stringsIn(e)...)
		}
	}
	return out
}

func readYAML(t *testing.T, path string) any {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var v any
	if err := yaml.Unmarshal(b, &v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return v
}

// dashboard is the parts of the Grafana dashboard the tests look at.
type dashboard struct {
	Title         string `json:"title"`
	UID           string `json:"uid"`
	SchemaVersion int    `json:"schemaVersion"`
	Templating    struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
	Panels []panel `json:"panels"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

func readDashboard(t *testing.T) (dashboard, any) {
	t.Helper()
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	var raw any
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s is not valid JSON: %v", dashboardFile, err)
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		t.Fatal(err)
	}
	return d, raw
}

// An alert, a test series or a panel on a metric the collector does not export would never
// fire or always show nothing; every collector_* name in the rules, their tests and the
// dashboard must be one the registry exposes.
func TestAlertsAndDashboardUseRegisteredMetrics(t *testing.T) {
	names := registered(t)
	for _, must := range []string{"collector_claim_lag_seconds", "collector_provider_status", "collector_build_info",
		"collector_db_pool_acquire_wait_seconds_total", "collector_provider_rows_rejected_total"} {
		if _, ok := names[must]; !ok {
			t.Fatalf("the registry read shows no %s: the test reads the registry wrongly", must)
		}
	}
	if !names["collector_claim_lag_seconds"] || names["collector_claims_total"] {
		t.Fatal("histograms are not told apart from counters")
	}

	t.Run("the check itself", func(t *testing.T) {
		got := unknown(names, []string{`rate(collector_not_a_metric_total[5m]) + collector_claims_total_bucket`,
			`collector_claim_lag_seconds_bucket collector_db_pool_* collector_nothing_*`})
		want := []string{"collector_claims_total_bucket", "collector_not_a_metric_total", "collector_nothing_*"}
		if !slices.Equal(got, want) {
			t.Fatalf("unknown = %q, want %q", got, want)
		}
	})

	_, rawDashboard := readDashboard(t)
	for path, doc := range map[string]any{
		alertsFile:     readYAML(t, alertsFile),
		alertsTestFile: readYAML(t, alertsTestFile),
		dashboardFile:  rawDashboard,
	} {
		texts := stringsIn(doc)
		used := 0
		for _, s := range texts {
			used += len(metricName.FindAllString(s, -1))
		}
		if used == 0 {
			t.Errorf("%s names no collector_* metric: the file was not read", path)
		}
		if bad := unknown(names, texts); len(bad) > 0 {
			t.Errorf("%s uses metrics the collector does not export: %s", path, strings.Join(bad, ", "))
		}
	}
}

// A matcher on a tier or a provider status that no series carries (tier="HOT" for HOT_1M)
// silently matches nothing.
func TestAlertsAndDashboardUseExportedLabelValues(t *testing.T) {
	_, rawDashboard := readDashboard(t)
	var texts []string
	for _, doc := range []any{readYAML(t, alertsFile), readYAML(t, alertsTestFile), rawDashboard} {
		texts = append(texts, stringsIn(doc)...)
	}
	matcher := func(label string) *regexp.Regexp { return regexp.MustCompile(`\b` + label + `\s*=~?\s*"([^"]*)"`) }
	tierNames := make([]string, 0, len(tiers.All()))
	for _, tr := range tiers.All() {
		tierNames = append(tierNames, string(tr))
	}
	valid := map[string]func(string) bool{
		"tier": func(v string) bool { return slices.Contains(tierNames, v) },
		"status": func(v string) bool {
			st, err := provider.ParseStatus(v)
			return err == nil && string(st) == v
		},
	}
	seen := map[string]int{}
	for label, ok := range valid {
		re := matcher(label)
		for _, s := range texts {
			for _, m := range re.FindAllStringSubmatch(s, -1) {
				for v := range strings.SplitSeq(m[1], "|") {
					seen[label]++
					if !ok(v) {
						t.Errorf("%s=%q in %q: no series carries it", label, v, m[0])
					}
				}
			}
		}
	}
	if seen["tier"] == 0 || seen["status"] == 0 {
		t.Fatalf("matchers seen %v: the files were not read", seen)
	}
}

// The dashboard imports into Grafana as it is: its datasource is the ${DS_PROMETHEUS}
// variable, every panel has a unique id and every query panel a query.
func TestDashboardIsWellFormed(t *testing.T) {
	d, _ := readDashboard(t)
	if d.UID == "" || d.Title == "" || d.SchemaVersion < 36 {
		t.Fatalf("uid %q, title %q, schemaVersion %d", d.UID, d.Title, d.SchemaVersion)
	}
	var ds bool
	for _, v := range d.Templating.List {
		ds = ds || (v.Name == "DS_PROMETHEUS" && v.Type == "datasource" && v.Query == "prometheus")
	}
	if !ds {
		t.Fatal("no DS_PROMETHEUS datasource variable of type prometheus")
	}
	ids := map[int]string{}
	rows := 0
	for _, p := range d.Panels {
		if prev, dup := ids[p.ID]; dup {
			t.Errorf("panels %q and %q share id %d", prev, p.Title, p.ID)
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			rows++
			continue
		}
		if !strings.Contains(string(p.Datasource), "${DS_PROMETHEUS}") {
			t.Errorf("panel %q: datasource %s, want the ${DS_PROMETHEUS} variable", p.Title, p.Datasource)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			if strings.TrimSpace(q.Expr) == "" {
				t.Errorf("panel %q has an empty query", p.Title)
			}
		}
	}
	if rows < 6 {
		t.Errorf("%d rows, want freshness, budget, provider, outbox, history and instances at least", rows)
	}
}

// promtool checks the rules, runs their unit tests and parses every dashboard query. CI
// installs it (Debian's prometheus package); elsewhere the test says how to get it.
func TestRulesWithPromtool(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool is not on PATH in CI: .ci/run installs Debian's prometheus package")
		}
		t.Skip("promtool not on PATH: apt-get install prometheus (Debian) to check and unit-test deploy/prometheus/alerts.yml")
	}
	run := func(t *testing.T, args ...string) {
		t.Helper()
		out, err := exec.Command(promtool, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Run("check rules", func(t *testing.T) { run(t, "check", "rules", alertsFile) })
	t.Run("test rules", func(t *testing.T) { run(t, "test", "rules", alertsTestFile) })
	t.Run("check config", func(t *testing.T) { run(t, "check", "config", promConfigFile) })
	t.Run("dashboard queries parse", func(t *testing.T) {
		// Each query becomes a recording rule, Grafana's variables replaced by what they expand to.
		d, _ := readDashboard(t)
		vars := strings.NewReplacer("$__rate_interval", "1m", "$__range", "1h", "$__interval", "1m", "$job", ".*", "$instance", ".*")
		type rule struct {
			Record string `yaml:"record"`
			Expr   string `yaml:"expr"`
		}
		var rules []rule
		for _, p := range d.Panels {
			for i, q := range p.Targets {
				rules = append(rules, rule{Record: fmt.Sprintf("dashboard:panel%d_%d", p.ID, i), Expr: vars.Replace(q.Expr)})
			}
		}
		b, err := yaml.Marshal(map[string]any{"groups": []any{map[string]any{"name": "dashboard", "rules": rules}}})
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(t.TempDir(), "dashboard_rules.yml")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		run(t, "check", "rules", path)
	})
}

// The compose stack runs what is tested here: every file it bind-mounts exists, its Prometheus
// finds each rule file where prometheus.yml says (relative to the config inside the container),
// and its Grafana finds the dashboard where the provisioning looks.
func TestComposeLoadsRulesAndDashboard(t *testing.T) {
	root := filepath.Join("..", "..")
	var compose struct {
		Services map[string]struct {
			Command []string `yaml:"command"`
			Volumes []string `yaml:"volumes"`
		} `yaml:"services"`
	}
	b, err := os.ReadFile(filepath.Join(root, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatal(err)
	}
	mounts := map[string]map[string]string{} // service → container path → host path
	for name, svc := range compose.Services {
		mounts[name] = map[string]string{}
		for _, v := range svc.Volumes {
			parts := strings.Split(v, ":")
			if len(parts) < 2 || !strings.HasPrefix(parts[0], "./") {
				continue // a named volume
			}
			if _, err := os.Stat(filepath.Join(root, parts[0])); err != nil {
				t.Errorf("service %s mounts %s: %v", name, parts[0], err)
			}
			mounts[name][parts[1]] = parts[0]
		}
	}

	config := ""
	for _, arg := range compose.Services["prometheus"].Command {
		config = strings.TrimPrefix(arg, "--config.file=")
		if config != arg {
			break
		}
		config = ""
	}
	if mounts["prometheus"][config] != "./deploy/prometheus/prometheus.yml" {
		t.Fatalf("the compose Prometheus reads %q, mounted from %q; want deploy/prometheus/prometheus.yml", config, mounts["prometheus"][config])
	}
	var prom struct {
		RuleFiles []string `yaml:"rule_files"`
	}
	if b, err = os.ReadFile(promConfigFile); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &prom); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(prom.RuleFiles, "alerts.yml") {
		t.Fatalf("prometheus.yml rule_files %q do not load alerts.yml", prom.RuleFiles)
	}
	for _, rf := range prom.RuleFiles {
		in := path.Join(path.Dir(config), rf)
		if host := mounts["prometheus"][in]; host != "./deploy/prometheus/"+rf {
			t.Errorf("rule file %s is read from %s in the container, mounted from %q", rf, in, host)
		}
	}

	var provider struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	if b, err = os.ReadFile(filepath.Join(root, "deploy", "grafana", "provisioning", "dashboards", "duecollector.yml")); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, &provider); err != nil || len(provider.Providers) != 1 {
		t.Fatalf("dashboard provisioning: %v, %d providers", err, len(provider.Providers))
	}
	dir := provider.Providers[0].Options.Path
	if host := mounts["grafana"][path.Join(dir, "duecollector.json")]; host != "./deploy/grafana/duecollector.json" {
		t.Errorf("Grafana looks for dashboards in %s; duecollector.json there is mounted from %q", dir, host)
	}
	if mounts["grafana"]["/etc/grafana/provisioning/dashboards"] != "./deploy/grafana/provisioning/dashboards" ||
		mounts["grafana"]["/etc/grafana/provisioning/datasources"] != "./deploy/grafana/provisioning/datasources" {
		t.Errorf("Grafana's provisioning is not mounted from deploy/grafana/provisioning: %v", mounts["grafana"])
	}
}
