package cli

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/daemon"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// `status -o json` keeps its documented field names; `--check` exits 1 naming the first
// problem and 0 when there is none.
func TestStatusJSONAndCheck(t *testing.T) {
	db := catalogEnv(t, true)
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	exec := func(sql string) {
		t.Helper()
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	storetest.Items(t, conn, storetest.Item{ID: "a", Name: "A", Tier: tiers.Hot, NextCollectAt: storetest.In(time.Hour)})

	out, _, err := runCollector(t, "status", "--database-url", db, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("status -o json is not JSON: %v\n%s", err, out)
	}
	for _, k := range []string{"database_time", "provider", "tiers", "totals", "leases_held", "claim_lag", "outbox", "relay", "budgets", "instances", "packing", "history", "collections", "database", "reads"} {
		if _, ok := v[k]; !ok {
			t.Errorf("status -o json lacks %q:\n%s", k, out)
		}
	}
	// No database.read_url: every read goes to the primary, and nothing else is said.
	if r, _ := json.Marshal(v["reads"]); string(r) != `{"replica":false,"source":"primary"}` {
		t.Errorf("reads without a replica: %s", r)
	}
	// The history's size from the catalog, per table, and how far back raw snapshots go.
	h := v["history"].(map[string]any)
	if h["bytes"].(float64) <= 0 || len(h["tables"].([]any)) != 3 || h["kept_since"] == nil {
		t.Errorf("history: %v", h)
	}
	for _, k := range []string{"name", "status", "reason", "since", "override", "automatic_status"} {
		if _, ok := v["provider"].(map[string]any)[k]; !ok {
			t.Errorf("provider lacks %q", k)
		}
	}
	// One HOT item never planned: its own two calls a minute.
	if d := v["tiers"].([]any)[0].(map[string]any)["demand_requests_per_second"]; d != 2.0/60 {
		t.Errorf("HOT demand %v req/s, want %v", d, 2.0/60)
	}
	for _, k := range []string{"unpublished", "oldest_unpublished_seconds", "failed"} {
		if _, ok := v["outbox"].(map[string]any)[k]; !ok {
			t.Errorf("outbox lacks %q", k)
		}
	}

	check := func(wantProblem string, extra ...string) {
		t.Helper()
		_, err := statusCheck(t, db, extra...)
		if wantProblem == "" {
			if err != nil {
				t.Fatalf("--check failed with nothing wrong: %v", err)
			}
		} else {
			wantCheckFails(t, err, wantProblem)
		}
	}
	check("")
	check("no live collector instance", "--min-instances", "1")
	exec(`INSERT INTO collector_instances (key_label, instance, host, pid) VALUES ('market/x', 'h:1', 'h', 1)`)
	check("", "--min-instances", "1")
	exec(`UPDATE tracked_items SET next_collect_at = now() - interval '5 minutes'`)
	check("1 items overdue")
	check("", "--max-overdue", "1")
	if err := provider.SetOverride(context.Background(), conn, "neople", provider.Maintenance, "planned", 0); err != nil {
		t.Fatal(err)
	}
	check("paused by manual override", "--max-overdue", "1")
	if err := provider.ClearOverride(context.Background(), conn, "neople"); err != nil {
		t.Fatal(err)
	}
	exec(`UPDATE collector_instances SET heartbeat_at = now()`)
	check("", "--max-overdue", "1", "--max-outbox-age", "1h")
}

func TestCheckNamesAnOldOutbox(t *testing.T) {
	lim := checkLimits{maxOutboxAge: time.Minute}
	st := daemon.ClusterStatus{OutboxOldest: 2 * time.Minute, Instances: []budget.Instance{{Instance: "h:1"}}}
	if p := lim.problems(st); len(p) != 1 || !strings.Contains(p[0], "oldest unpublished outbox event is 2m0s old") {
		t.Fatalf("problems %q", p)
	}
	st.OutboxOldest = 30 * time.Second
	if p := lim.problems(st); len(p) != 0 {
		t.Fatalf("problems %q with a young outbox", p)
	}
}

// statusCheck runs `status --check -o json` with extra flags: the error (nil on exit 0) and
// the JSON it printed.
func statusCheck(t *testing.T, db string, extra ...string) (statusJSON, error) {
	t.Helper()
	out, _, err := runCollector(t, append([]string{"status", "--database-url", db, "--check", "-o", "json"}, extra...)...)
	var v statusJSON
	if jerr := json.Unmarshal([]byte(out), &v); jerr != nil || v.Check == nil || v.Check.OK != (err == nil) {
		t.Fatalf("--check -o json: %v %+v (exit error %v)\n%s", jerr, v.Check, err, out)
	}
	return v, err
}

func wantCheckFails(t *testing.T, err error, problem string) {
	t.Helper()
	if exitCode(err) != 1 || !strings.Contains(err.Error(), problem) {
		t.Fatalf("--check: exit %d, err %v; want 1 naming %q", exitCode(err), err, problem)
	}
}

// A cron-only deployment — collect-due one-shots, no daemon — passes --check right after a
// successful pass with no instance alive; when the one-shots stop while items fall due, it
// fails naming that after --max-idle.
func TestStatusCheckCronOnlyDeployment(t *testing.T) {
	db := catalogEnv(t, true)
	if _, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", "../../configs/import-targets.yaml"); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runCollector(t, "collect-due", "--database-url", db); err != nil || !strings.Contains(out, "collected=12 failed=0") {
		t.Fatalf("collect-due: %q %v", out, err)
	}
	v, err := statusCheck(t, db)
	if err != nil {
		t.Fatalf("--check after a successful collect-due: %v", err)
	}
	if len(v.Instances) != 0 || v.Collections.LastCollectedAt == nil || v.Collections.OldestDueAt != nil || v.Totals.Overdue != 0 {
		t.Fatalf("after collect-due: instances %+v, collections %+v, %d overdue; want none, just collected, nothing due",
			v.Instances, v.Collections, v.Totals.Overdue)
	}
	out, _, err := runCollector(t, "status", "--database-url", db)
	if err != nil || !strings.Contains(out, "last successful collection: ") || !strings.Contains(out, "; nothing waiting") {
		t.Fatalf("status: %v\n%s", err, out)
	}

	// The cron stopped an hour ago; its items have been due for 20 minutes.
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `UPDATE tracked_items
		SET last_collected_at = now() - interval '1 hour', next_collect_at = now() - interval '20 minutes'`); err != nil {
		t.Fatal(err)
	}
	_, err = statusCheck(t, db, "--max-overdue", "100")
	wantCheckFails(t, err, "collections are not happening: no successful collection for 1h0m0s, 12 items due, the oldest for 20m0s (--max-idle 15m0s)")
	if _, err := statusCheck(t, db, "--max-overdue", "100", "--max-idle", "30m"); err != nil {
		t.Fatalf("--max-idle 30m with items due for 20m: %v", err)
	}
	if _, err := statusCheck(t, db, "--max-overdue", "100", "--max-idle", "0"); err != nil {
		t.Fatalf("--max-idle 0 turns the check off: %v", err)
	}
	// The idle deployment is the cause, named before the overdue count it leads to.
	_, err = statusCheck(t, db)
	wantCheckFails(t, err, "collections are not happening")
}

// A daemon deployment asks for live instances with --min-instances: it fails naming the
// missing instance, and passes once one heartbeats.
func TestStatusCheckDaemonDeployment(t *testing.T) {
	db := catalogEnv(t, true)
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	storetest.Items(t, conn, storetest.Item{ID: "a", Name: "A", Tier: tiers.Hot, NextCollectAt: storetest.In(time.Minute)})
	if _, err := conn.Exec(context.Background(), `UPDATE tracked_items SET last_collected_at = now()`); err != nil {
		t.Fatal(err)
	}
	_, err = statusCheck(t, db, "--min-instances", "1")
	wantCheckFails(t, err, "no live collector instance (no heartbeat in the last 10s; --min-instances 1)")

	if _, err := conn.Exec(context.Background(), `INSERT INTO collector_instances (key_label, instance, host, pid, heartbeat_at)
		VALUES ('market/x', 'h:1', 'h', 1, now())`); err != nil {
		t.Fatal(err)
	}
	v, err := statusCheck(t, db, "--min-instances", "1")
	if err != nil || len(v.Instances) != 1 {
		t.Fatalf("--min-instances 1 with a live instance: %v, instances %+v", err, v.Instances)
	}
	_, err = statusCheck(t, db, "--min-instances", "2")
	wantCheckFails(t, err, "1 live collector instances, fewer than --min-instances 2")
}

// Idle counts from the later of the last collection and the oldest due time: a catalog never
// collected is idle only once its items have waited --max-idle, and items that just fell due
// after a long quiet spell are not.
func TestCheckIdleCountsFromWhenItemsFellDue(t *testing.T) {
	now := time.Now()
	lim := checkLimits{maxIdle: 15 * time.Minute}
	st := daemon.ClusterStatus{DatabaseNow: now, Provider: provider.StatusRow{Provider: "neople", Status: provider.Healthy},
		Tiers: []daemon.TierStatus{{Tier: "COLD_10M", Items: 3, Due: 3}}}
	for _, c := range []struct {
		last, oldest time.Duration // ago; 0: none
		want         string
	}{
		{0, 0, ""},
		{0, 5 * time.Minute, ""},
		{0, 20 * time.Minute, "no successful collection yet, 3 items due, the oldest for 20m0s (--max-idle 15m0s)"},
		{time.Hour, 2 * time.Minute, ""},
		{time.Hour, 0, ""},
		{time.Hour, 16 * time.Minute, "no successful collection for 1h0m0s, 3 items due, the oldest for 16m0s"},
		{20 * time.Minute, time.Hour, "no successful collection for 20m0s, 3 items due, the oldest for 1h0m0s"},
		{5 * time.Minute, time.Hour, ""},
	} {
		st.Activity = catalog.Activity{}
		if c.last > 0 {
			st.Activity.LastCollected = now.Add(-c.last)
		}
		if c.oldest > 0 {
			st.Activity.OldestDue = now.Add(-c.oldest)
		}
		p := lim.problems(st)
		if c.want == "" && len(p) != 0 || c.want != "" && (len(p) != 1 || !strings.Contains(p[0], c.want)) {
			t.Errorf("last collected %v ago, oldest due %v ago: problems %q, want %q", c.last, c.oldest, p, c.want)
		}
	}
	// A provider that cannot be sent work is the likely cause, and is named.
	st.Activity = catalog.Activity{LastCollected: now.Add(-time.Hour), OldestDue: now.Add(-time.Hour)}
	st.Provider.Status, st.Provider.Reason = provider.Degraded, "5 of the last 10 calls failed"
	if p := lim.problems(st); len(p) != 1 || !strings.HasSuffix(p[0], "(--max-idle 15m0s); provider neople DEGRADED: 5 of the last 10 calls failed") {
		t.Errorf("idle behind a degraded provider: %q", p)
	}
}

// The provider's own maintenance holds every item back by design: --check does not call that
// idle or overdue (a manual pause is still named). A relay stopped for good is named.
func TestCheckDuringMaintenanceAndWithAStoppedRelay(t *testing.T) {
	now := time.Now()
	lim := checkLimits{maxIdle: 15 * time.Minute}
	st := daemon.ClusterStatus{DatabaseNow: now,
		Provider: provider.StatusRow{Provider: "neople", Status: provider.Maintenance, Reason: "DNF980 system maintenance", Since: now.Add(-2 * time.Hour)},
		Tiers:    []daemon.TierStatus{{Tier: "HOT_1M", Items: 40, Due: 40, Overdue: 40}},
		Activity: catalog.Activity{LastCollected: now.Add(-2 * time.Hour), OldestDue: now.Add(-2 * time.Hour)}}
	if p := lim.problems(st); len(p) != 0 {
		t.Fatalf("in the provider's maintenance: problems %q, want none", p)
	}
	st.Provider.Since = now.Add(-7 * time.Hour)
	if p := lim.problems(st); len(p) != 1 || !strings.Contains(p[0], "in MAINTENANCE for 7h0m0s, longer than its weekly window") {
		t.Fatalf("in the provider's maintenance for 7 hours: problems %q, want it named", p)
	}
	st.Provider.Status = provider.Healthy
	if p := lim.problems(st); len(p) != 2 || !strings.Contains(p[0], "collections are not happening") || !strings.Contains(p[1], "40 items overdue") {
		t.Fatalf("the same backlog with the provider healthy: %q, want idle and overdue", p)
	}
	st.Provider.Status, st.Provider.OverrideStatus = provider.Healthy, provider.Maintenance
	if p := lim.problems(st); len(p) != 3 || !strings.Contains(p[0], "paused by manual override") {
		t.Fatalf("paused by hand: %q, want the override named, then idle and overdue", p)
	}
	st.Provider.OverrideStatus = ""
	st.Tiers, st.Activity = nil, catalog.Activity{}
	st.Relay.Stops = []outbox.RelayStop{{Owner: "h:1", StoppedAt: now, Reason: "kafka topic t does not exist"}}
	if p := lim.problems(st); len(p) != 1 || !strings.Contains(p[0], "outbox relay h:1 STOPPED at ") || !strings.HasSuffix(p[0], "kafka topic t does not exist") {
		t.Fatalf("a stopped relay: %q", p)
	}
}

// --check names a database that refuses writes first, as the status command's own probe sees
// it (a daemon cannot record that it cannot write), and the JSON says why.
func TestStatusCheckNamesADatabaseThatRefusesWrites(t *testing.T) {
	db := catalogEnv(t, true)
	v, err := statusCheck(t, db)
	if err != nil || !v.Database.Writable || v.Database.Cause != "" {
		t.Fatalf("--check on a writable database: %v, database %+v", err, v.Database)
	}
	storetest.SetReadOnly(t, db, true)
	v, err = statusCheck(t, db)
	wantCheckFails(t, err, "database refuses writes (read_only): new transactions are read-only")
	if v.Database.Writable || v.Database.Cause != "read_only" || v.Check.Problems[0] != err.Error()[len("status check failed: "):] {
		t.Fatalf("database %+v, problems %q", v.Database, v.Check.Problems)
	}
	storetest.SetReadOnly(t, db, false)
	if _, err := statusCheck(t, db); err != nil {
		t.Fatalf("--check once writes are back: %v", err)
	}
}

// A probe whose holder died: `status` names the holder and says its lease ran out, in text and
// in JSON, so an operator knows the outage waits on nobody.
func TestStatusNamesTheProbesHolder(t *testing.T) {
	db := catalogEnv(t, true)
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `
		WITH s AS (UPDATE provider_status SET status = 'DEGRADED', reason = 'test', since = now() - interval '1 minute'
		           WHERE provider = 'neople' RETURNING since)
		INSERT INTO provider_probe (provider, episode_since, failures, next_probe_at, leased_by, lease_expires_at)
		SELECT 'neople', since, 2, now() - interval '40 seconds', 'host-a:12', now() - interval '10 seconds' FROM s`); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCollector(t, "status", "--database-url", db)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "probe: host-a:12's lease ran out ") || !strings.Contains(out, " ago (it died or hangs)") {
		t.Errorf("status does not name the dead holder of the probe:\n%s", out)
	}
	out, _, err = runCollector(t, "status", "--database-url", db, "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Provider struct {
			Failures *int       `json:"probe_failures"`
			By       string     `json:"probe_leased_by"`
			Until    *time.Time `json:"probe_lease_expires_at"`
		} `json:"provider"`
	}
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("status -o json: %v\n%s", err, out)
	}
	if p := v.Provider; p.By != "host-a:12" || p.Until == nil || p.Failures == nil || *p.Failures != 2 {
		t.Errorf("provider probe in JSON: %+v\n%s", p, out)
	}
}
