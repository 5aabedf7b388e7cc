package catalog

import (
	"context"
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
