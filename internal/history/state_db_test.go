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

// The decayed counts are kept in SQL (one statement for a batch) and read by tierplan's Go
// estimator: the SQL must be tierplan.Observations.Decay then Observe, step for step.
func TestStateDecayMatchesTierplan(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	seen := int32(1)
	storetest.Items(t, pool, storetest.Item{ID: "est", SeenListingCount: &seen, EstCollections: 3, EstChanges: 1,
		EstChangedSeconds: 60, EstUnchangedSeconds: 120})
	want := tierplan.Observations{Accesses: 3, Changes: 1, ChangedSeconds: 60, UnchangedSeconds: 120}
	var wantSales float64
	const window = time.Hour
	p := history.Policy{Heartbeat: time.Hour}
	at := time.Now().UTC().Add(-time.Hour).Truncate(time.Second)
	state := history.State{Count: 1, Quantity: 1, Lowest: p64(100)}
	last := &history.Written{State: state, At: at}
	for i, step := range []struct {
		gap     time.Duration
		changed bool
		sales   int
	}{{time.Minute, false, 0}, {90 * time.Second, true, 0}, {30 * time.Second, false, 2}, {10 * time.Minute, true, 1}} {
		prev := at
		at = at.Add(step.gap)
		if step.changed {
			state.Lowest = p64(*state.Lowest + 1)
		}
		var sales []history.Sale
		for k := range step.sales {
			sales = append(sales, history.Sale{SoldAt: at.Add(-time.Second), Seq: int32(k), Quantity: 1, UnitPrice: 100, Total: 100})
		}
		c := history.Collection{ItemID: "est", ItemName: "est", Tier: "HOT_1M", Token: token(), At: at, State: state,
			Sales: sales, Last: last, SeenAt: &prev, Window: window}
		var out []history.Stored
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			out, err = p.Write(ctx, tx, []history.Collection{c})
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if out[0].Reason != history.Skip {
			last = &history.Written{State: state, At: at}
		}
		secs := step.gap.Seconds()
		changed := out[0].Reason == history.Change
		want = want.Decay(secs, window.Seconds()).Observe(secs, changed)
		wantSales = wantSales*math.Exp(-secs/window.Seconds()) + float64(step.sales)
		var got tierplan.Observations
		var gotSales float64
		if err := pool.QueryRow(ctx, `SELECT est_collections, est_changes, est_changed_seconds, est_unchanged_seconds, est_sales
			FROM item_state WHERE item_id = 'est'`).Scan(&got.Accesses, &got.Changes, &got.ChangedSeconds, &got.UnchangedSeconds, &gotSales); err != nil {
			t.Fatal(err)
		}
		for _, f := range [][3]any{{"collections", got.Accesses, want.Accesses}, {"changes", got.Changes, want.Changes},
			{"changed seconds", got.ChangedSeconds, want.ChangedSeconds}, {"unchanged seconds", got.UnchangedSeconds, want.UnchangedSeconds},
			{"sales", gotSales, wantSales}} {
			if g, w := f[1].(float64), f[2].(float64); math.Abs(g-w) > 1e-9*math.Max(1, math.Abs(w)) {
				t.Errorf("collection %d: %s %v in SQL, %v in tierplan", i+1, f[0], g, w)
			}
		}
	}
}
