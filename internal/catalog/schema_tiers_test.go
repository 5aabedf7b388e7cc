package catalog

import (
	"context"
	"regexp"
	"slices"
	"testing"

	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// The schema's CHECKs name internal/tiers' tiers: SQL cannot import them, so a tier added there
// and not here would fail every pin, import and recalculation that meets it.
func TestTheSchemaNamesTheCollectorsTiers(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	names := func(ts []tiers.Tier) []string {
		var out []string
		for _, t := range ts {
			out = append(out, string(t))
		}
		return out
	}
	quoted := regexp.MustCompile(`'([A-Z0-9_]+)'`)
	for _, c := range []struct {
		table, column string
		want          []string
	}{
		{"tracked_items", "collection_tier", names(tiers.All())},
		{"tracked_items", "pinned_tier", names(tiers.Scheduled())},
		{"tier_forecast", "tier", names(tiers.Scheduled())},
	} {
		var def string
		if err := pool.QueryRow(context.Background(), `
			SELECT pg_get_constraintdef(c.oid) FROM pg_constraint c
			JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
			WHERE c.conrelid = $1::regclass AND c.contype = 'c' AND a.attname = $2 AND cardinality(c.conkey) = 1`,
			c.table, c.column).Scan(&def); err != nil {
			t.Fatalf("%s.%s: its CHECK: %v", c.table, c.column, err)
		}
		var got []string
		for _, m := range quoted.FindAllStringSubmatch(def, -1) {
			got = append(got, m[1])
		}
		if !slices.Equal(got, c.want) {
			t.Errorf("%s.%s allows %v (%s), want %v", c.table, c.column, got, def, c.want)
		}
	}
}
