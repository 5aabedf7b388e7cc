package outbox

import (
	"context"
	"math"
	"testing"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// An event its values cannot encode is the data's fault, not the connection's: the writer must
// not retry it (holding its batch-mates) as it would a lost connection, and nothing is written.
func TestAnEventThatCannotBeEncodedIsNotTransient(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	inf := math.Inf(1)
	err = EnqueueSnapshots(ctx, tx, []SnapshotEvent{{SnapshotID: 1, ItemID: "poison", WeightedUnitPrice: &inf}})
	if err == nil || store.Transient(err) {
		t.Fatalf("EnqueueSnapshots = %v; want an error Transient refuses", err)
	}
}
