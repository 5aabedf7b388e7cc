package dispatcher

import (
	"context"
	"testing"

	"github.com/duecollector/duecollector/internal/tiers"
)

// A listings answer that reaches the 400-row cap describes only the cheapest 400: the
// snapshot and its event say so.
func TestSnapshotFlagsListingsCutAtTheCap(t *testing.T) {
	t.Parallel()
	e := setup(t, 5, tiers.Cold, nil) // the simulator gives item 3 more listings than the cap
	if _, err := e.dispatcher(t, Config{}, nil).RunOnce(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows, err := e.pool.Query(context.Background(), `
		SELECT s.item_id, s.listings_truncated, s.packed, (o.payload->>'listings_truncated')::bool, (o.payload->>'packed')::bool
		FROM auction_snapshots s JOIN outbox o USING (snapshot_id)`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	for rows.Next() {
		var id string
		var trunc, packed, evTrunc, evPacked bool
		if err := rows.Scan(&id, &trunc, &packed, &evTrunc, &evPacked); err != nil {
			t.Fatal(err)
		}
		n++
		want := id == e.items[3].ItemID
		if trunc != want || evTrunc != want || packed || evPacked {
			t.Errorf("item %s: truncated %v (event %v), packed %v (event %v); want truncated %v, not packed",
				id, trunc, evTrunc, packed, evPacked, want)
		}
	}
	if err := rows.Err(); err != nil || n != 5 {
		t.Fatalf("%d snapshots, err %v", n, err)
	}
}
