package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/duecollector/duecollector/internal/store/storetest"
)

func randomItemID(t *testing.T) string {
	t.Helper()
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b[:])
}

// The Go and SQL predicates must agree on every id, and no real (32 hex) id may match.
func TestSyntheticPredicateGoAndSQLAgree(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ids := []string{
		"seed-0001", "seed-", "integration-item-42", "integration-item-",
		"SEED-0001", "seedx-1", "xseed-1", "integration-items", "integration", "", "seed",
		"785e56a0ed4e3efd573da1f56a45217d",
	}
	for range 200 {
		ids = append(ids, randomItemID(t))
	}
	rows, err := pool.Query(context.Background(),
		`SELECT id, id LIKE ANY ($2) FROM unnest($1::text[]) AS u(id)`, ids, SyntheticPatterns())
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id string
		var inSQL bool
		if err := rows.Scan(&id, &inSQL); err != nil {
			t.Fatal(err)
		}
		n++
		if inGo := IsSynthetic(id); inGo != inSQL {
			t.Errorf("%q: IsSynthetic = %v, SQL predicate = %v", id, inGo, inSQL)
		}
		if isItemID(id) && inSQL {
			t.Errorf("real id %q matches the synthetic predicate", id)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(ids) {
		t.Fatalf("checked %d ids, want %d", n, len(ids))
	}
	for _, id := range []string{"seed-0001", "integration-item-42"} {
		if !IsSynthetic(id) {
			t.Errorf("%q must be synthetic", id)
		}
	}
}

func TestSyntheticPrefixesAreSafeInLIKEAndNeverHex(t *testing.T) {
	for _, p := range SyntheticPrefixes {
		if strings.ContainsAny(p, `%_\'`) {
			t.Errorf("prefix %q holds a LIKE wildcard or a quote", p)
		}
		if !strings.Contains(p, "-") {
			t.Errorf("prefix %q has no '-': it could collide with a 32-hex id", p)
		}
	}
}
