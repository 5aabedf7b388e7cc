package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

func TestItemsShowsWhatCollectionLearnt(t *testing.T) {
	db := catalogEnv(t, true)
	path := filepath.Join(t.TempDir(), "targets.yaml")
	if err := os.WriteFile(path, []byte("items:\n  - 무색 큐브 조각\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", path); err != nil {
		t.Fatal(err)
	}
	id := neoplesim.New(neoplesim.Options{Items: 50, Seed: 1}).Catalog()[0].ItemID
	out, _, err := runCollector(t, "items", id, "--database-url", db)
	if err != nil || !strings.Contains(out, "changes_per_hour:") || !strings.Contains(out, "-") ||
		itemField(out, "last_outcome") != "- (never collected)" {
		t.Fatalf("items %s before any collection: %v\n%s", id, err, out)
	}
	// Two collections make one observed interval.
	for i := 0; i < 2; i++ {
		if _, _, err := runCollector(t, "collect", id, "--database-url", db); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err = runCollector(t, "items", id, "--database-url", db)
	if err != nil || !strings.Contains(out, "observed_collections:  1.0") || strings.Contains(out, "changes_per_hour:      - ") ||
		!strings.Contains(out, "collection_cost:       2.00 requests (its own calls)") || itemField(out, "last_outcome") != "ok" {
		t.Fatalf("items %s after two collections: %v\n%s", id, err, out)
	}
	// An item the provider no longer knows shows it: its failures in a row and the error.
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `UPDATE tracked_items SET last_outcome = 'item_error', failure_streak = 4,
		last_error = 'DNF003: no such item' WHERE item_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCollector(t, "items", id, "--database-url", db)
	if err != nil || itemField(out, "last_outcome") != "item_error (4 failed in a row)" || itemField(out, "last_error") != "DNF003: no such item" {
		t.Fatalf("items %s failing: %v\n%s", id, err, out)
	}
	out, _, err = runCollector(t, "items", "--database-url", db)
	if err != nil || !strings.Contains(out, "CHANGES/H") || !strings.Contains(out, id) {
		t.Fatalf("items: %v\n%s", err, out)
	}
	if _, _, err := runCollector(t, "items", "no-such-item", "--database-url", db); err == nil || !strings.Contains(err.Error(), "no-such-item is not tracked") {
		t.Fatalf("items of an unknown id: %v", err)
	}
	// Untracked, it is gone from the items and never claimed again; its history stays.
	if out, _, err := runCollector(t, "items", "untrack", id, "--database-url", db); err != nil || !strings.Contains(out, "no longer tracked") {
		t.Fatalf("items untrack: %v\n%s", err, out)
	}
	if _, _, err := runCollector(t, "items", id, "--database-url", db); err == nil || !strings.Contains(err.Error(), "is not tracked") {
		t.Fatalf("items of an untracked item: %v", err)
	}
	var snapshots int
	if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM auction_snapshots WHERE item_id = $1`, id).Scan(&snapshots); err != nil || snapshots == 0 {
		t.Fatalf("the untracked item's snapshots: %d, %v; want them kept", snapshots, err)
	}
	if _, _, err := runCollector(t, "collect", id, "--database-url", db); err == nil {
		t.Fatal("an untracked item was collected")
	}
	if _, _, err := runCollector(t, "items", "untrack", id, "--database-url", db); err == nil || !strings.Contains(err.Error(), "not tracked") {
		t.Fatalf("untrack twice: %v; want it not tracked", err)
	}
}

func TestPinAndPlan(t *testing.T) {
	db := catalogEnv(t, true)
	path := filepath.Join(t.TempDir(), "targets.yaml")
	if err := os.WriteFile(path, []byte("items:\n  - 무색 큐브 조각\n  - 코스모 소울\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", path)
	if err != nil || !strings.Contains(out, "re-planned:") {
		t.Fatalf("import-items under the budget policy re-plans: %v\n%s", err, out)
	}
	id := neoplesim.New(neoplesim.Options{Items: 50, Seed: 1}).Catalog()[0].ItemID
	if out, _, err := runCollector(t, "items", "pin", id, "hot_1m", "--database-url", db); err != nil || !strings.Contains(out, "pinned to HOT_1M") {
		t.Fatalf("items pin: %v\n%s", err, out)
	}
	if _, _, err := runCollector(t, "items", "pin", id, "DORMANT", "--database-url", db); err == nil {
		t.Error("pinning to DORMANT must fail")
	}
	before, _, _ := runCollector(t, "items", "--database-url", db)
	out, _, err = runCollector(t, "plan", "--budget", "0.01", "--database-url", db)
	if err != nil || !strings.Contains(out, "pinned items alone ask for") || !strings.Contains(out, "nothing changed") {
		t.Fatalf("plan with pins over the budget: %v\n%s", err, out)
	}
	if after, _, _ := runCollector(t, "items", "--database-url", db); after != before {
		t.Errorf("plan without --apply changed items:\n%s\nthen\n%s", before, after)
	}
	out, _, err = runCollector(t, "status", "--database-url", db)
	if err != nil || !strings.Contains(out, "demand req/s") || !strings.Contains(out, "market key budget") {
		t.Fatalf("status: %v\n%s", err, out)
	}
	// The import's plan stored what it predicts; status shows it beside the tiers.
	if !strings.Contains(out, "est. freshness") || !strings.Contains(out, "predicted by the tier plan of") || !regexp.MustCompile(`total .*\d%`).MatchString(out) {
		t.Errorf("status after a plan shows no estimated freshness:\n%s", out)
	}
	if out, _, err := runCollector(t, "items", "unpin", id, "--database-url", db); err != nil || !strings.Contains(out, "unpinned") {
		t.Fatalf("items unpin: %v\n%s", err, out)
	}
}

// Items never collected are planned with a prior and moved into the budget, and the plan names
// them for what they are: not pinned, not yet observed.
func TestPlanMovesNewItemsIntoTheBudget(t *testing.T) {
	db := catalogEnv(t, true)
	t.Setenv("COLLECTOR_COLLECT_PACK_SIZE", "1")
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	items := make([]storetest.Item, 200)
	for i := range items {
		items[i] = storetest.Item{ID: fmt.Sprintf("new-%03d", i), Tier: tiers.Hot}
	}
	storetest.Items(t, conn, items...)

	out, _, err := runCollector(t, "plan", "--budget", "2", "--apply", "--database-url", db)
	if err != nil || !strings.Contains(out, "demand of today's tiers: 6.7 requests/s") || !strings.Contains(out, "applied:") {
		t.Fatalf("plan --apply of 200 new HOT items: %v\n%s", err, out)
	}
	for _, bad := range []string{"pinned", "WARNING: even"} {
		if strings.Contains(out, bad) {
			t.Errorf("plan says %q although no item is pinned and all can move:\n%s", bad, out)
		}
	}
	if !strings.Contains(out, "not yet observed (fewer than two collections): 200 items") || !strings.Contains(out, "the defaults, as no item is observed yet") {
		t.Errorf("plan does not say the items are planned with the prior:\n%s", out)
	}
	out, _, err = runCollector(t, "plan", "--budget", "2", "--database-url", db)
	m := regexp.MustCompile(`(?m)^demand of today's tiers: ([0-9.]+) requests/s`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("plan after --apply: %v\n%s", err, out)
	}
	limit := budget.PlanLimit(config.WorkloadLimits{Rate: 2, PerMinute: 120}, config.Default().Daemon.Budget.Headroom, 1)
	if d, _ := strconv.ParseFloat(m[1], 64); d > limit+0.05 { // printed to 0.1
		t.Errorf("after --apply today's tiers ask %v requests/s, over the %.2f to plan with:\n%s", d, limit, out)
	}
}

// plan assumes, as the daemon does, only the share of the configured budget the adaptive
// budget has learned the provider allows.
func TestPlanUsesTheLearnedBudget(t *testing.T) {
	db := catalogEnv(t, true)
	if _, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", "../../configs/import-targets.yaml"); err != nil {
		t.Fatal(err)
	}
	def := config.Default()
	ceiling := min(def.Provider.Market.Rate, float64(def.Provider.Market.PerMinute)/60) * (1 - def.Daemon.Budget.Headroom)
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `INSERT INTO budget_rates (key_label, rate) VALUES ($1, $2)`,
		budget.KeyLabel("market", neoplesim.DefaultMarketKey), ceiling/100); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCollector(t, "plan", "--database-url", db)
	want := fmt.Sprintf("budget: %.0f requests/s, %.0f/min", def.Provider.Market.Rate/100, float64(def.Provider.Market.PerMinute)/100)
	if err != nil || !strings.Contains(out, "the provider allows 1% of the configured budget") || !strings.Contains(out, want) {
		t.Fatalf("plan after the budget learned 1%% of the ceiling: %v; want %q in\n%s", err, want, out)
	}
	if out, _, err := runCollector(t, "plan", "--budget", "50", "--database-url", db); err != nil || strings.Contains(out, "learned:") {
		t.Fatalf("plan --budget plans for what it is given: %v\n%s", err, out)
	}
	// status measures the tiers' demand against the same budget.
	if out, _, err := runCollector(t, "status", "--database-url", db); err != nil ||
		!strings.Contains(out, fmt.Sprintf("market key budget: %.1f req/s, the 1%% of the configured", def.Provider.Market.Rate/100)) {
		t.Fatalf("status after the budget learned 1%%: %v\n%s", err, out)
	}
	// A slow start's ramp at the same rate is no finding: plan assumes the whole budget.
	if _, err := conn.Exec(context.Background(), `UPDATE budget_rates SET slow_start = true`); err != nil {
		t.Fatal(err)
	}
	if out, _, err := runCollector(t, "plan", "--database-url", db); err != nil || strings.Contains(out, "the provider allows") {
		t.Fatalf("plan during a slow start: %v; want the configured budget in\n%s", err, out)
	}
}

// itemField is the value of field in `collector items ITEM_ID`'s output.
func itemField(out, field string) string {
	for line := range strings.SplitSeq(out, "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
