package console_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/console"
	"github.com/duecollector/duecollector/internal/store"
)

// With a replica configured, the overview's database card says where the item pages read
// from; with the replica unreachable they read the primary, still answer, and the card says why.
func TestOverviewSaysWhereItemPagesRead(t *testing.T) {
	var reads *store.Reads
	e := setupWith(t, "", func(ctx context.Context, pool *pgxpool.Pool) {
		replica, err := store.OpenReplica(ctx, store.PoolConfig{URL: "postgres://reader:pw@127.0.0.1:1/duecollector?sslmode=disable&connect_timeout=2"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(replica.Close)
		reads = store.NewReads(pool, replica, store.ReadsConfig{Timeout: 3 * time.Second}, nil)
		reads.RunOnce(ctx)
	}, func(cfg *console.Config) { cfg.Reads = reads })

	get := func(path string) string {
		t.Helper()
		res, err := http.Get(e.srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d\n%s", path, res.StatusCode, b)
		}
		return string(b)
	}
	page := get("/")
	i := strings.Index(page, `id="database-reads"`)
	if i < 0 || !strings.Contains(page[i:], "Item pages read from the primary (replica unreachable at 127.0.0.1:1/duecollector") {
		t.Fatalf("overview without the reads line:\n%s", page)
	}
	if item := get("/items/" + candleItem); !strings.Contains(item, "Golden Needle") {
		t.Fatalf("item page while the replica is down:\n%s", item)
	}
}
