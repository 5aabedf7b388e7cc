package catalog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/store/storetest"
)

// A synthetic fixture's series is the operator's to read (ReadSeries, for the console and
// `collector history`) and unknown to consumers (ReadPublicSeries, for the read API), by the
// schema's one rule; a real item reads the same through both.
func TestPublicSeriesLeavesFixturesOut(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	real, fixture := randomItemID(t), SyntheticPrefix+"0001"
	storetest.Items(t, pool, storetest.Item{ID: real}, storetest.Item{ID: fixture}, storetest.Item{ID: "integration-item-7"})
	storetest.Snapshots(t, pool, storetest.Snapshot{ItemID: real}, storetest.Snapshot{ItemID: fixture})
	since := time.Now().Add(-time.Hour)
	for _, id := range []string{real, fixture} {
		if s, err := ReadSeries(ctx, pool, id, "raw", since, time.Time{}); err != nil || len(s.Points) != 1 {
			t.Fatalf("ReadSeries(%s): %d points, %v; want its snapshot", id, len(s.Points), err)
		}
	}
	if s, err := ReadPublicSeries(ctx, pool, real, "raw", since, time.Time{}); err != nil || len(s.Points) != 1 {
		t.Fatalf("ReadPublicSeries(%s): %d points, %v; want its snapshot", real, len(s.Points), err)
	}
	for _, id := range []string{fixture, "integration-item-7"} {
		if s, err := ReadPublicSeries(ctx, pool, id, "raw", since, time.Time{}); !errors.Is(err, ErrNotTracked) || len(s.Points) != 0 {
			t.Fatalf("ReadPublicSeries(%s): %d points, %v; want ErrNotTracked", id, len(s.Points), err)
		}
	}
}
