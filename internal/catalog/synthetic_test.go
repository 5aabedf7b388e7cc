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

// The schema's synthetic_item is the one rule: it knows both fixture prefixes, the ids
// seed:synthetic writes, and no real (32 hex) id.
func TestSyntheticItemRule(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	want := map[string]bool{
		"seed-0001": true, "seed-": true, "integration-item-42": true, "integration-item-": true,
		SyntheticPrefix + "1000000": true,
		"SEED-0001":                 false, "seedx-1": false, "xseed-1": false, "integration-items": false, "integration": false,
		"": false, "seed": false, "785e56a0ed4e3efd573da1f56a45217d": false,
	}
	for range 200 {
		want[randomItemID(t)] = false
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	rows, err := pool.Query(context.Background(), `SELECT id, synthetic_item(id) FROM unnest($1::text[]) AS u(id)`, ids)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id string
		var got bool
		if err := rows.Scan(&id, &got); err != nil {
			t.Fatal(err)
		}
		n++
		if got != want[id] {
			t.Errorf("synthetic_item(%q) = %v, want %v", id, got, want[id])
		}
		if isItemID(id) && got {
			t.Errorf("real id %q is synthetic", id)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(ids) {
		t.Fatalf("checked %d ids, want %d", n, len(ids))
	}
	if strings.ContainsAny(SyntheticPrefix, `%_\'`) || !strings.Contains(SyntheticPrefix, "-") {
		t.Errorf("prefix %q holds a LIKE wildcard or a quote, or no '-' (it could collide with a 32-hex id)", SyntheticPrefix)
	}
}
