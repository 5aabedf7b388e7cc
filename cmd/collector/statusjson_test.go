package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/daemon"
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
	for _, k := range []string{"database_time", "provider", "tiers", "totals", "leases_held", "claim_lag", "outbox", "relay", "budgets", "instances", "packing", "history"} {
		if _, ok := v[k]; !ok {
			t.Errorf("status -o json lacks %q:\n%s", k, out)
		}
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
		out, _, err := runCollector(t, append([]string{"status", "--database-url", db, "--check", "-o", "json"}, extra...)...)
		if wantProblem == "" {
			if err != nil {
				t.Fatalf("--check failed with nothing wrong: %v", err)
			}
		} else if exitCode(err) != 1 || !strings.Contains(err.Error(), wantProblem) {
			t.Fatalf("--check: exit %d, err %v; want 1 naming %q", exitCode(err), err, wantProblem)
		}
		var v statusJSON
		if err := json.Unmarshal([]byte(out), &v); err != nil || v.Check == nil || v.Check.OK != (wantProblem == "") {
			t.Fatalf("--check -o json: %v %+v", err, v.Check)
		}
	}
	check("no live collector instance")
	exec(`INSERT INTO collector_instances (key_label, instance, host, pid) VALUES ('market/x', 'h:1', 'h', 1)`)
	check("")
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
