package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
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
	if err != nil || !strings.Contains(out, "changes_per_hour:") || !strings.Contains(out, "-") {
		t.Fatalf("items %s before any collection: %v\n%s", id, err, out)
	}
	// Two collections make one observed interval.
	for i := 0; i < 2; i++ {
		if _, _, err := runCollector(t, "collect", id, "--database-url", db); err != nil {
			t.Fatal(err)
		}
	}
	out, _, err = runCollector(t, "items", id, "--database-url", db)
	if err != nil || !strings.Contains(out, "observed_collections:  1.0") || strings.Contains(out, "changes_per_hour:      - ") {
		t.Fatalf("items %s after two collections: %v\n%s", id, err, out)
	}
	out, _, err = runCollector(t, "items", "--database-url", db)
	if err != nil || !strings.Contains(out, "CHANGES/H") || !strings.Contains(out, id) {
		t.Fatalf("items: %v\n%s", err, out)
	}
	if _, _, err := runCollector(t, "items", "no-such-item", "--database-url", db); err == nil || !strings.Contains(err.Error(), "no-such-item is not tracked") {
		t.Fatalf("items of an unknown id: %v", err)
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
	if out, _, err := runCollector(t, "items", "unpin", id, "--database-url", db); err != nil || !strings.Contains(out, "unpinned") {
		t.Fatalf("items unpin: %v\n%s", err, out)
	}
}
