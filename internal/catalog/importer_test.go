package catalog

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// newSim serves a simulator over HTTP and returns it with an item-workload client.
func newSim(t *testing.T) (*neoplesim.Server, *provider.Client) {
	t.Helper()
	sim := neoplesim.New(neoplesim.Options{Items: 50, Seed: 1})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	return sim, itemClient(t, srv.URL, neoplesim.DefaultItemKey)
}

func itemClient(t *testing.T, url, key string) *provider.Client {
	t.Helper()
	c, err := provider.NewClient(provider.ClientConfig{Workload: provider.WorkloadItem, BaseURL: url, Key: key})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func writeTargets(t *testing.T, src string) []Target {
	t.Helper()
	path := filepath.Join(t.TempDir(), "targets.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	targets, err := LoadTargets(path)
	if err != nil {
		t.Fatal(err)
	}
	return targets
}

func idByName(t *testing.T, sim *neoplesim.Server, name string) string {
	t.Helper()
	for _, it := range sim.Catalog() {
		if it.ItemName == name {
			return it.ItemID
		}
	}
	t.Fatalf("simulator has no item named %q", name)
	return ""
}

type trackedRow struct {
	Name, Tier  string
	DueNow      bool
	Reason      string
	Xmin        uint32
	UpdatedAt   time.Time
	HasNextTime bool
}

func readTracked(t *testing.T, db DB) map[string]trackedRow {
	t.Helper()
	rows, err := db.Query(context.Background(), `
		SELECT item_id, item_name, collection_tier, coalesce(next_collect_at <= now(), false), coalesce(tier_reason, ''),
		       xmin::text::bigint, updated_at, next_collect_at IS NOT NULL
		FROM tracked_items`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	out := map[string]trackedRow{}
	for rows.Next() {
		var id string
		var r trackedRow
		var xmin int64
		if err := rows.Scan(&id, &r.Name, &r.Tier, &r.DueNow, &r.Reason, &xmin, &r.UpdatedAt, &r.HasNextTime); err != nil {
			t.Fatal(err)
		}
		r.Xmin = uint32(xmin)
		out[id] = r
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

const importFile = `items:
  - 무색 큐브 조각
  - {name: 코스모 소울, tier: HOT_1M}
  - name: 없는 아이템
  - {name: 무색 큐브, wordType: front}
  - {name: 골드 큐브, wordType: front, all: true, tier: COLD_10M}
  - {name: 상자 꾸러미 4, wordType: full, tier: DORMANT}
`

func TestImportGoodMissingAndAmbiguous(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	sim, client := newSim(t)
	targets := writeTargets(t, importFile)

	var mu sync.Mutex
	var progress []int
	rep, err := Import(ctx, pool, client, targets, ImportOptions{
		DefaultTier: tiers.Warm, Concurrency: 3,
		Progress: func(done, total, failed int) {
			mu.Lock()
			defer mu.Unlock()
			if total != len(targets) {
				t.Errorf("progress total %d, want %d", total, len(targets))
			}
			progress = append(progress, done)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(progress) != len(targets) || progress[len(progress)-1] != len(targets) {
		t.Errorf("progress calls %v, want 1..%d", progress, len(targets))
	}

	// Report: the two bad targets by name and line, and an error wrapping ErrTargetsFailed.
	if len(rep.Failures) != 2 {
		t.Fatalf("failures = %v, want 2", rep.Failures)
	}
	f0, f1 := rep.Failures[0], rep.Failures[1]
	if f0.Target.Name != "없는 아이템" || f0.Target.Line != 4 || !strings.Contains(f0.Reason, "no item has exactly this name") {
		t.Errorf("missing target reported as %s", f0)
	}
	if f1.Target.Name != "무색 큐브" || f1.Target.Line != 5 || !strings.Contains(f1.Reason, "ambiguous") ||
		!strings.Contains(f1.Reason, idByName(t, sim, "무색 큐브 조각 상자")) {
		t.Errorf("ambiguous target reported as %s", f1)
	}
	rerr := rep.Err()
	if !errors.Is(rerr, ErrTargetsFailed) {
		t.Fatalf("Err() = %v, want ErrTargetsFailed", rerr)
	}
	for _, w := range []string{"targets.yaml:4", "없는 아이템", "targets.yaml:5", "무색 큐브", "2 of 6"} {
		if !strings.Contains(rerr.Error(), w) {
			t.Errorf("Err() %q does not mention %q", rerr, w)
		}
	}

	// Rows: the good targets, each at its tier, due at once (DORMANT: never).
	gold := 0
	for _, it := range sim.Catalog() {
		if strings.HasPrefix(it.ItemName, "골드 큐브") {
			gold++
		}
	}
	if gold < 2 {
		t.Fatalf("simulator catalog has %d 골드 큐브 items; the test needs several", gold)
	}
	got := readTracked(t, pool)
	if want := 3 + gold; len(got) != want || rep.Inserted != want || rep.Matched != want {
		t.Fatalf("tracked %d rows, report %+v; want %d", len(got), rep, want)
	}
	check := func(name, tier string, due bool) {
		t.Helper()
		r, ok := got[idByName(t, sim, name)]
		if !ok {
			t.Fatalf("%s not imported", name)
		}
		if r.Name != name || r.Tier != tier || r.DueNow != due || r.HasNextTime != due {
			t.Errorf("%s = %+v, want tier %s due-now %v", name, r, tier, due)
		}
		if !strings.HasPrefix(r.Reason, "imported from ") || !strings.Contains(r.Reason, "targets.yaml:") {
			t.Errorf("%s tier_reason %q", name, r.Reason)
		}
	}
	check("무색 큐브 조각", "WARM_5M", true)
	check("코스모 소울", "HOT_1M", true)
	check("골드 큐브 조각", "COLD_10M", true)
	check("골드 큐브 조각 꾸러미 1", "COLD_10M", true)
	check("무색 큐브 조각 상자 꾸러미 4", "DORMANT", false)
}

func TestImportTwiceChangesNothingAndRenameKeepsID(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	sim, client := newSim(t)
	targets := writeTargets(t, "items:\n  - 무색 큐브 조각\n  - {name: 골드 큐브, wordType: front, all: true}\n  - {name: 코스모 소울, tier: HOT_1M}\n")
	first, err := Import(ctx, pool, client, targets, ImportOptions{})
	if err != nil || first.Err() != nil {
		t.Fatal(err, first.Err())
	}
	before := readTracked(t, pool)

	second, err := Import(ctx, pool, client, targets, ImportOptions{})
	if err != nil || second.Err() != nil {
		t.Fatal(err, second.Err())
	}
	if second.Inserted != 0 || second.Renamed != 0 || second.Unchanged != first.Inserted {
		t.Errorf("second import = %+v, want everything unchanged (first %+v)", second, first)
	}
	after := readTracked(t, pool)
	if len(after) != len(before) {
		t.Fatalf("rows %d → %d", len(before), len(after))
	}
	for id, b := range before {
		if a := after[id]; a.Xmin != b.Xmin || !a.UpdatedAt.Equal(b.UpdatedAt) {
			t.Errorf("%s rewritten by a repeat import: %+v → %+v", id, b, a)
		}
	}

	// The provider renamed an item since we stored it: same id, new name, nothing else moves.
	id := idByName(t, sim, "코스모 소울")
	if _, err := pool.Exec(ctx, `UPDATE tracked_items SET item_name = 'old name', collection_tier = 'ACTIVE_3M' WHERE item_id = $1`, id); err != nil {
		t.Fatal(err)
	}
	third, err := Import(ctx, pool, client, targets, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if third.Renamed != 1 || third.Inserted != 0 {
		t.Errorf("third import = %+v, want 1 renamed", third)
	}
	r := readTracked(t, pool)[id]
	if r.Name != "코스모 소울" || r.Tier != "ACTIVE_3M" {
		t.Errorf("renamed item = %+v: want the new name and its tier kept", r)
	}
}

// Several items with exactly the asked name: ambiguous, unless one is pinned with itemId.
// The simulator's names are unique, so this case gets a tiny /df/items of its own.
func TestImportExactNameAmbiguity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	const a, b = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/df/items" || r.Header.Get("apikey") != "k" {
			http.Error(w, `{"error":{"status":404,"code":"DNF900","message":"x"}}`, http.StatusNotFound)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"rows":[
			{"itemId":"` + a + `","itemName":"쌍둥이","itemRarity":"레어"},
			{"itemId":"` + b + `","itemName":"쌍둥이","itemRarity":"에픽"},
			{"itemId":"cccccccccccccccccccccccccccccccc","itemName":"쌍둥이 상자","itemRarity":"에픽"}]}`))
	}))
	t.Cleanup(srv.Close)
	client := itemClient(t, srv.URL, "k")

	targets := writeTargets(t, "items:\n  - 쌍둥이\n  - {name: 쌍둥이, itemId: "+b+"}\n")
	rep, err := Import(ctx, pool, client, targets, ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Failures) != 1 || rep.Failures[0].Target.Line != 2 ||
		!strings.Contains(rep.Failures[0].Reason, "ambiguous: 2 items") || !strings.Contains(rep.Failures[0].Reason, a) {
		t.Fatalf("failures = %v", rep.Failures)
	}
	got := readTracked(t, pool)
	if _, ok := got[b]; !ok || len(got) != 1 {
		t.Fatalf("tracked = %v, want only the pinned %s", got, b)
	}
}

func TestImportStopsOnRefusedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, _ := storetest.NewPool(t)
	sim := neoplesim.New(neoplesim.Options{Items: 20, Seed: 1})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	client := itemClient(t, srv.URL, "wrong-key")
	targets := writeTargets(t, "items:\n  - 무색 큐브 조각\n  - 코스모 소울\n")
	_, err := Import(ctx, pool, client, targets, ImportOptions{})
	if err == nil || provider.ClassOf(err) != provider.ClassConfig || !strings.Contains(err.Error(), "targets.yaml:") {
		t.Fatalf("err = %v, want a config error naming the target", err)
	}
	if n := len(readTracked(t, pool)); n != 0 {
		t.Errorf("%d rows imported with a refused key", n)
	}
}
