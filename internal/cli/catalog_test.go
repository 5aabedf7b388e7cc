package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// runCollector runs the CLI in-process and returns stdout, stderr and the error main would see.
func runCollector(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	cmd := newRootCmd(&out, &errOut)
	cmd.SetArgs(append(args, "--log-format=console")) // one word: "console" is also a command
	err := cmd.ExecuteContext(context.Background())
	return out.String(), errOut.String(), err
}

func catalogEnv(t *testing.T, withKeys bool) (dbURL string) {
	t.Helper()
	_, dbURL = storetest.NewPool(t)
	srv := httptest.NewServer(neoplesim.New(neoplesim.Options{Items: 50, Seed: 1}))
	t.Cleanup(srv.Close)
	t.Setenv("NEOPLE_API_BASE_URL", srv.URL)
	t.Setenv("COLLECTOR_CONFIG", "")
	item, market := "", ""
	if withKeys {
		item, market = neoplesim.DefaultItemKey, neoplesim.DefaultMarketKey
	}
	t.Setenv("NEOPLE_ITEM_API_KEY", item)
	t.Setenv("NEOPLE_MARKET_API_KEY", market)
	return dbURL
}

func TestImportItemsExitCodes(t *testing.T) {
	db := catalogEnv(t, true)
	// The import's reason stays on the row: under the budget policy the re-plan after the import
	// would plan the new item at once and write its own.
	t.Setenv("COLLECTOR_CATALOG_POLICY", "thresholds")
	path := filepath.Join(t.TempDir(), "targets.yaml")
	if err := os.WriteFile(path, []byte("items:\n  - 무색 큐브 조각\n  - 없는 아이템\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	out, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", path)
	var ee exitError
	if !errors.As(err, &ee) || ee.code != 2 {
		t.Fatalf("err = %v, want exit code 2", err)
	}
	if !strings.Contains(err.Error(), path+":3") || !strings.Contains(err.Error(), "없는 아이템") {
		t.Errorf("error %q does not name the target and its line", err)
	}
	if !strings.Contains(out, "1 new") {
		t.Errorf("stdout %q: the good target must still be imported", out)
	}

	out, stderr, err := runCollector(t, "import-items", "--database-url", db, "--targets", path, "--allow-missing")
	if err != nil || !strings.Contains(out, "1 unchanged") || !strings.Contains(stderr, "없는 아이템") {
		t.Fatalf("--allow-missing: err %v, stdout %q, stderr %q", err, out, stderr)
	}

	// With json logs every stderr line is JSON, the import's warnings too.
	var jout, jerr bytes.Buffer
	cmd := newRootCmd(&jout, &jerr)
	cmd.SetArgs([]string{"import-items", "--database-url", db, "--targets", path, "--allow-missing", "--log-format=json"})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatalf("--allow-missing, json logs: %v", err)
	}
	if lines := jsonLines(t, jerr.String()); !strings.Contains(fmt.Sprint(lines), "없는 아이템") {
		t.Fatalf("json logs name no failed target:\n%s", jerr.String())
	}

	out, _, err = runCollector(t, "items", "--database-url", db)
	if err != nil || !strings.Contains(out, "무색 큐브 조각") || !strings.Contains(out, "imported from "+path+":2") {
		t.Fatalf("items: err %v, stdout %q", err, out)
	}
}

// A target whose search the provider failed for a temporary reason is no missing target: the
// import exits 1, which a Job or a timer retries, even with --allow-missing (exit 2, or 0 with
// it, made the Job give up, or left the target untracked without a word).
func TestImportItemsTemporaryFailureExitsOne(t *testing.T) {
	_, db := storetest.NewPool(t)
	sim := neoplesim.New(neoplesim.Options{Items: 50, Seed: 1})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/df/items" && r.URL.Query().Get("itemName") == "없는 아이템" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = w.Write([]byte(`{"error":{"status":500,"code":"DNF999","message":"SYSTEM_ERROR"}}`))
			return
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("NEOPLE_API_BASE_URL", srv.URL)
	t.Setenv("COLLECTOR_CONFIG", "")
	t.Setenv("NEOPLE_ITEM_API_KEY", neoplesim.DefaultItemKey)
	t.Setenv("NEOPLE_MARKET_API_KEY", neoplesim.DefaultMarketKey)
	path := filepath.Join(t.TempDir(), "targets.yaml")
	if err := os.WriteFile(path, []byte("items:\n  - 무색 큐브 조각\n  - 없는 아이템\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{nil, {"--allow-missing"}} {
		out, _, err := runCollector(t, append([]string{"import-items", "--database-url", db, "--targets", path}, args...)...)
		if exitCode(err) != 1 || !strings.Contains(fmt.Sprint(err), "temporary") || !strings.Contains(fmt.Sprint(err), path+":3") {
			t.Fatalf("import-items %v: %v (exit %d); want exit 1 naming the target and saying the failure is temporary", args, err, exitCode(err))
		}
		if !strings.Contains(out, "1 new") && !strings.Contains(out, "1 unchanged") {
			t.Errorf("stdout %q: the good target must still be imported", out)
		}
	}
}

func TestSeedRealWithoutKeysNamesThemAndWritesNothing(t *testing.T) {
	db := catalogEnv(t, false)
	_, _, err := runCollector(t, "seed:real", "--database-url", db, "--targets", "../../configs/import-targets.yaml")
	if err == nil || !strings.Contains(err.Error(), "NEOPLE_ITEM_API_KEY and NEOPLE_MARKET_API_KEY not set") {
		t.Fatalf("err = %v", err)
	}
	out, _, err := runCollector(t, "items", "--database-url", db, "--include-synthetic")
	if err != nil || strings.Count(out, "\n") != 1 {
		t.Fatalf("items after a refused seed:real: err %v, stdout %q; want only the header", err, out)
	}
}

func TestSeedRealImportsTheDemoTargets(t *testing.T) {
	db := catalogEnv(t, true)
	out, _, err := runCollector(t, "seed:real", "--database-url", db, "--targets", "../../configs/import-targets.yaml")
	if err != nil {
		t.Fatalf("seed:real against the simulator: %v\n%s", err, out)
	}
	if !strings.Contains(out, "0 targets failed") || !strings.Contains(out, "recalculate-popularity:") {
		t.Errorf("stdout %q", out)
	}
}

func TestSyntheticSeedHiddenFromItemsUntilAsked(t *testing.T) {
	db := catalogEnv(t, false)
	if _, _, err := runCollector(t, "seed:synthetic", "--database-url", db, "--items", "3", "--days", "1"); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCollector(t, "items", "--database-url", db)
	if err != nil || strings.Contains(out, "seed-") {
		t.Fatalf("items shows fixtures: %v\n%s", err, out)
	}
	out, _, err = runCollector(t, "items", "--database-url", db, "--include-synthetic")
	if err != nil || strings.Count(out, "seed-") != 3 {
		t.Fatalf("items --include-synthetic: %v\n%s", err, out)
	}
	out, _, err = runCollector(t, "purge:synthetic", "--database-url", db)
	if err != nil || !strings.Contains(out, "tracked_items      3 rows deleted") {
		t.Fatalf("purge:synthetic: %v\n%s", err, out)
	}
}

// seed:synthetic reports progress per committed batch on stderr and checks its sizes before
// touching the database.
func TestSeedSyntheticProgressAndLimits(t *testing.T) {
	db := catalogEnv(t, false)
	out, errOut, err := runCollector(t, "seed:synthetic", "--database-url", db, "--items", "1000", "--days", "1")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "seed:synthetic: 1000 items (1000 new)") {
		t.Errorf("stdout %q", out)
	}
	if !strings.Contains(errOut, `seed:synthetic: items written	{"done": 416, "total": 1000}`) || !strings.Contains(errOut, `seed:synthetic: items written	{"done": 1000, "total": 1000}`) {
		t.Errorf("no progress lines on stderr:\n%s", errOut)
	}
	for _, args := range [][]string{{"--items", "1000001"}, {"--days", "0"}} {
		_, _, err := runCollector(t, append([]string{"seed:synthetic", "--database-url", "postgres://u@127.0.0.1:1/x?connect_timeout=2"}, args...)...)
		if err == nil || !strings.Contains(err.Error(), args[0]+" "+args[1]+": must be between") {
			t.Errorf("%v: %v, want the bad flag named before the database", args, err)
		}
	}
}
