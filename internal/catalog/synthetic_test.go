package catalog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
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

// A fixture never gets on the schedule: a pin or an interest event is refused naming it, and
// `collect ITEM_ID` does not claim it (its write-back would schedule it at its tier, to be
// collected and fail for good). Its schedule stays empty.
func TestAFixtureIsNeverScheduled(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	const id = "seed-0003"
	storetest.Items(t, pool, storetest.Item{ID: id, Tier: tiers.Cold, NextCollectAt: storetest.Null()})
	if _, err := PinItem(ctx, pool, id, tiers.Hot); !errors.Is(err, ErrFixture) {
		t.Errorf("pin a fixture: %v, want ErrFixture", err)
	}
	if _, err := RecordInterest(ctx, pool, InterestEvent{ItemID: id, Kind: KindTouch}, tiers.Hot); !errors.Is(err, ErrFixture) {
		t.Errorf("touch a fixture: %v, want ErrFixture", err)
	}
	if claims, err := ClaimOne(ctx, pool, id, time.Minute, "test"); err != nil || len(claims) != 0 {
		t.Errorf("claim a fixture by id: %d claims, %v; want none", len(claims), err)
	}
	var next *time.Time
	if err := pool.QueryRow(ctx, `SELECT next_collect_at FROM tracked_items WHERE item_id = $1`, id).Scan(&next); err != nil || next != nil {
		t.Fatalf("the fixture's next_collect_at: %v, %v; want NULL", next, err)
	}
}
