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
