package migrations

import (
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// owners is docs/architecture.md's "Who owns each table": the one package whose Go code holds
// SQL on each table or view (its sub-packages belong to it: history/partition keeps history's
// partitions). Everyone else calls that package's functions.
var owners = map[string]string{
	"tracked_items":       "internal/catalog",
	"item_browse":         "internal/catalog",
	"item_interest":       "internal/catalog",
	"tier_forecast":       "internal/catalog",
	"auction_snapshots":   "internal/history",
	"auction_sales":       "internal/history",
	"price_candles":       "internal/history",
	"outbox":              "internal/outbox",
	"outbox_pending":      "internal/outbox",
	"outbox_relay_lanes":  "internal/outbox",
	"outbox_relay_stops":  "internal/outbox",
	"outbox_events":       "internal/outbox", // a view: the outbox as consumers read it
	"collector_instances": "internal/budget",
	"budget_rates":        "internal/budget",
	"budget_cooldowns":    "internal/budget",
	"provider_status":     "internal/provider",
	"provider_status_log": "internal/provider",
	"provider_probe":      "internal/health",
	"packing_state":       "internal/dispatcher",
}

// Every table of the schema has one owner package, and no other package's production code
// names the table in SQL (FROM, JOIN, UPDATE, INTO or TABLE before its name). Tests,
// their fixtures (storetest) and the bench and fault tools may read and seed tables directly.
func TestEachTableHasOneOwnerPackage(t *testing.T) {
	schema, err := FS.ReadFile("001_schema.sql")
	if err != nil {
		t.Fatal(err)
	}
	var tables []string
	for _, m := range regexp.MustCompile(`(?m)^CREATE (?:TABLE|(?:OR REPLACE )?VIEW) (\w+)`).FindAllStringSubmatch(string(schema), -1) {
		tables = append(tables, m[1])
	}
	if got, want := slices.Sorted(slices.Values(tables)), slices.Sorted(maps.Keys(owners)); !slices.Equal(got, want) {
		t.Fatalf("schema tables and views %v, owners listed for %v: give every one an owner here and in docs/architecture.md", got, want)
	}
	mentions := map[string]*regexp.Regexp{}
	for _, tb := range tables {
		mentions[tb] = regexp.MustCompile(`(?:FROM|JOIN|UPDATE|INTO|TABLE)\s+(?:ONLY\s+)?` + tb + `\b`)
	}
	found := map[string]map[string]bool{}
	for _, root := range []string{"../internal", "../cmd"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
				strings.Contains(path, "/storetest/") {
				return err
			}
			src, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			pkg := strings.TrimPrefix(filepath.ToSlash(filepath.Dir(path)), "../")
			for tb, re := range mentions {
				if re.Match(src) {
					if found[tb] == nil {
						found[tb] = map[string]bool{}
					}
					found[tb][pkg] = true
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	for _, tb := range tables {
		for pkg := range found[tb] {
			if pkg != owners[tb] && !strings.HasPrefix(pkg, owners[tb]+"/") {
				t.Errorf("%s holds SQL on %s, whose owner is %s: call the owner's functions instead", pkg, tb, owners[tb])
			}
		}
	}
}
