package catalog

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// The live API answers some name searches that find nothing with API001
// NOT_FOUND_SEARCH_VALUE, officially a key error: the import must treat it as "not found".
func TestImportGoesOnWhenANameSearchAnswersAPI001(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	sim := neoplesim.New(neoplesim.Options{Items: 20, Seed: 1, NotFoundAPI001: true})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	targets := writeTargets(t, "items:\n  - 없는 아이템\n  - 코스모 소울\n  - 시간의 결정\n")
	rep, err := Import(context.Background(), pool, itemClient(t, srv.URL, neoplesim.DefaultItemKey), targets,
		ImportOptions{DefaultTier: tiers.Warm, Concurrency: 1})
	if err != nil {
		t.Fatalf("import stopped: %v", err)
	}
	if len(rep.Failures) != 1 || rep.Failures[0].Target.Name != "없는 아이템" ||
		!strings.Contains(rep.Failures[0].Reason, "no item has exactly this name") {
		t.Fatalf("failures %v, want the unknown name reported as not found", rep.Failures)
	}
	if rep.Inserted != 2 {
		t.Fatalf("report %+v, want the two known names imported", rep)
	}
}

// An id the provider answers that is not a Neople id is not tracked (it would fail every
// collection and break packed calls); the target's other items still are, and the report
// names the target's line.
func TestImportSkipsAnItemWhoseIDIsNotAnID(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	const good = "0123456789abcdef0123456789abcdef"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, `{"rows":[{"itemId":"`+good+`","itemName":"검"},{"itemId":"a,b","itemName":"검"},{"itemName":"검"}]}`)
	}))
	t.Cleanup(srv.Close)
	targets := writeTargets(t, "items:\n  - {name: 검, all: true}\n")
	rep, err := Import(context.Background(), pool, itemClient(t, srv.URL, neoplesim.DefaultItemKey), targets,
		ImportOptions{DefaultTier: tiers.Warm, Concurrency: 1})
	if err != nil {
		t.Fatalf("import stopped: %v", err)
	}
	if rep.Inserted != 1 || len(rep.Warnings) != 2 || !strings.Contains(rep.Warnings[0].Reason, `"a,b"`) || rep.Warnings[0].Target.Line != 2 ||
		!strings.Contains(rep.Warnings[1].Reason, `""`) {
		t.Fatalf("report %+v, want the good id imported and the bad and the missing one warned about at line 2", rep)
	}
	var n int
	if err := pool.QueryRow(context.Background(), `SELECT count(*) FROM tracked_items WHERE item_id = 'a,b'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("the bad id is tracked (%d, %v)", n, err)
	}
}
