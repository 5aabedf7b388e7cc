package catalog_test

import (
	"context"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

// Read on a standby, the latest markets miss no change: a writer on the primary that began
// before a read and committed after it (updated_at before that read's clock) is invisible
// to the standby's pg_stat_activity, so the next read must not start from the standby's now.
func TestLatestChangesReadOnAStandbyMissNothing(t *testing.T) {
	s := storetest.NewStandby(t)
	ctx := context.Background()
	primary, standby := s.Pools(t)
	_, first, _, err := catalog.LatestChanged(ctx, standby, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	storetest.Items(t, primary, storetest.Item{ID: "late-writer"})
	// Its transaction began an hour before the read above.
	if _, err := primary.Exec(ctx, `UPDATE tracked_items SET updated_at = $1 WHERE item_id = 'late-writer'`, first.Now.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, testkit.Timeout, "the standby to replay the write", func() bool {
		var n int
		return standby.QueryRow(ctx, `SELECT count(*) FROM tracked_items WHERE item_id = 'late-writer' AND updated_at < now() - interval '30 minutes'`).Scan(&n) == nil && n == 1
	})
	changed, _, total, err := catalog.LatestChanged(ctx, standby, first.Horizon)
	if err != nil {
		t.Fatal(err)
	}
	if total != 1 || len(changed) != 1 || changed[0].ItemID != "late-writer" {
		t.Fatalf("read since the standby's horizon %s: %d of %d items, want the late writer's", first.Horizon, len(changed), total)
	}
}
