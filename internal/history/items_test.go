package history_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tierplan"
)

// The write-back decays and adds to the change counts in SQL; the tier plan reads them with
// tierplan.Observations. Both must be the same arithmetic: Decay by the interval, then Observe it.
func TestWriteItemsDecayAgreesWithTierplan(t *testing.T) {
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	seen := int32(5)
	start := tierplan.Observations{Accesses: 7, Changes: 3, ChangedSeconds: 240, UnchangedSeconds: 300}
	const startSales = 4.5
	storetest.Items(t, pool,
		storetest.Item{ID: "changed", SeenListingCount: &seen, EstCollections: start.Accesses, EstChanges: start.Changes,
			EstChangedSeconds: start.ChangedSeconds, EstUnchangedSeconds: start.UnchangedSeconds},
		storetest.Item{ID: "same", SeenListingCount: &seen, EstCollections: start.Accesses, EstChanges: start.Changes,
			EstChangedSeconds: start.ChangedSeconds, EstUnchangedSeconds: start.UnchangedSeconds})
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET est_sales = $1, lease_token = gen_random_uuid(),
		lease_expires_at = now() + interval '1 minute'`, startSales); err != nil {
		t.Fatal(err)
	}
	var at time.Time
	if err := pool.QueryRow(ctx, `SELECT date_trunc('second', now())`).Scan(&at); err != nil {
		t.Fatal(err)
	}
	const secs, window = 90.0, 600 * time.Second
	prev := at.Add(-secs * time.Second)
	last := &history.Written{State: history.State{Count: 5, Quantity: 9, Lowest: p64(100)}, At: prev}
	sales := []history.Sale{{SoldAt: prev.Add(time.Second), Quantity: 1, UnitPrice: 100, Total: 100},
		{SoldAt: prev.Add(2 * time.Second), Quantity: 2, UnitPrice: 100, Total: 200}}
	var items []history.Item
	for _, id := range []string{"changed", "same"} {
		it := history.Item{Collection: history.Collection{ItemID: id, ItemName: id, Tier: "WARM_5M", At: at,
			State: last.State, Last: last, SeenAt: &prev}, Outcome: "ok", Window: window}
		if id == "changed" {
			it.Sales = sales
		}
		if err := pool.QueryRow(ctx, `SELECT lease_token, ctid FROM tracked_items WHERE item_id = $1`, id).Scan(&it.Token, &it.TID); err != nil {
			t.Fatal(err)
		}
		items = append(items, it)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		live, _, err := history.Policy{Heartbeat: time.Hour}.WriteItems(ctx, tx, items)
		if err == nil && len(live) != 2 {
			t.Errorf("wrote %v, want both items", live)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id       string
		changed  bool
		newSales float64
	}{{"changed", true, 2}, {"same", false, 0}} {
		var got tierplan.Observations
		var gotSales float64
		if err := pool.QueryRow(ctx, `SELECT est_collections, est_changes, est_changed_seconds, est_unchanged_seconds, est_sales
			FROM tracked_items WHERE item_id = $1`, tc.id).Scan(&got.Accesses, &got.Changes, &got.ChangedSeconds, &got.UnchangedSeconds, &gotSales); err != nil {
			t.Fatal(err)
		}
		want := start.Decay(secs, window.Seconds()).Observe(secs, tc.changed)
		// Sales decay like any count: Decay's factor on a count of startSales.
		wantSales := tierplan.Observations{Accesses: startSales}.Decay(secs, window.Seconds()).Accesses + tc.newSales
		if !near(got.Accesses, want.Accesses) || !near(got.Changes, want.Changes) || !near(got.ChangedSeconds, want.ChangedSeconds) ||
			!near(got.UnchangedSeconds, want.UnchangedSeconds) || !near(gotSales, wantSales) {
			t.Errorf("%s: SQL counts %+v sales %v, tierplan %+v sales %v", tc.id, got, gotSales, want, wantSales)
		}
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }
