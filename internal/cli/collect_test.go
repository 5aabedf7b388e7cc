package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
)

func TestCollectDueEndToEnd(t *testing.T) {
	db := catalogEnv(t, true)
	if _, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", "../../configs/import-targets.yaml"); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCollector(t, "collect-due", "--database-url", db, "--concurrency", "4")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "claimed=12 collected=12 failed=0 fenced_out=0") {
		t.Fatalf("summary %q", out)
	}
	for _, stage := range []string{"claim p50=", "fetch p50=", "persist p50="} {
		if !strings.Contains(out, stage) {
			t.Fatalf("summary %q lacks %s timings", out, stage)
		}
	}
	out, _, err = runCollector(t, "collect-due", "--database-url", db)
	if err != nil || !strings.Contains(out, "claimed=0") {
		t.Fatalf("second run: %q %v; nothing is due any more", out, err)
	}

	if _, _, err := runCollector(t, "provider", "set", "maintenance", "--reason", "weekly inspection", "--database-url", db); err != nil {
		t.Fatal(err)
	}
	out, _, err = runCollector(t, "provider", "status", "--database-url", db)
	if err != nil || !strings.Contains(out, "MAINTENANCE") || !strings.Contains(out, "weekly inspection") || !strings.Contains(out, "paused") {
		t.Fatalf("provider status: %q %v", out, err)
	}
	out, _, err = runCollector(t, "collect-due", "--database-url", db)
	if err != nil || !strings.Contains(out, "collection paused: provider MAINTENANCE since") {
		t.Fatalf("paused run must exit 0 and say why: %q %v", out, err)
	}
	if _, _, err := runCollector(t, "provider", "set", "auto", "--database-url", db); err != nil {
		t.Fatal(err)
	}
}

// collect-due collects what was due when it started, then ends: an item falling due meanwhile
// is the next run's, and a due row another transaction holds for a moment is still collected.
// Claiming until a claim came back empty never ended on a catalog whose items fall due every
// second, so each cron run lasted until its deadline killed it; ending at the first short claim
// left behind rows a recalculation or an import held at that moment.
func TestCollectDueCollectsWhatWasDueAtItsStart(t *testing.T) {
	pool, db := storetest.NewPool(t)
	ctx := context.Background()
	sim := neoplesim.New(neoplesim.Options{Items: 50, Seed: 1})
	type running struct {
		late   string
		holder pgx.Tx
	}
	var run atomic.Pointer[running]
	var once sync.Once
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if cur := run.Load(); r.URL.Path == "/df/auction" && cur != nil {
			// The run's first market call: the held-back item falls due now, and the held row
			// is let go.
			once.Do(func() {
				if _, err := pool.Exec(r.Context(), `UPDATE tracked_items SET next_collect_at = now() WHERE item_id = $1`, cur.late); err != nil {
					t.Error(err)
				}
				if err := cur.holder.Rollback(ctx); err != nil {
					t.Error(err)
				}
			})
		}
		sim.ServeHTTP(w, r)
	})
	importThrough(t, db, h)
	var late, held string
	if err := pool.QueryRow(ctx, `UPDATE tracked_items SET next_collect_at = now() + interval '1 hour'
		WHERE item_id = (SELECT min(item_id) FROM tracked_items WHERE next_collect_at <= now()) RETURNING item_id`).Scan(&late); err != nil {
		t.Fatal(err)
	}
	holder, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback(ctx) //nolint:errcheck
	if err := holder.QueryRow(ctx, `SELECT item_id FROM tracked_items WHERE next_collect_at <= now() ORDER BY item_id DESC LIMIT 1 FOR UPDATE`).Scan(&held); err != nil {
		t.Fatal(err)
	}
	run.Store(&running{late: late, holder: holder})
	out, _, err := runCollector(t, "collect-due", "--database-url", db, "--batch-size", "50")
	if err != nil || !strings.Contains(out, "claimed=11 collected=11") {
		t.Fatalf("collect-due: %q %v; want the 11 items due at the start (the held one too), then the end", out, err)
	}
	var touched bool
	if err := pool.QueryRow(ctx, `SELECT lease_token IS NOT NULL OR last_collected_at IS NOT NULL OR next_collect_at > now()
		FROM tracked_items WHERE item_id = $1`, late).Scan(&touched); err != nil || touched {
		t.Fatalf("the item that fell due during the run: touched %t, %v; want it left due for the next run", touched, err)
	}
	var collected bool
	if err := pool.QueryRow(ctx, `SELECT last_collected_at IS NOT NULL FROM tracked_items WHERE item_id = $1`, held).Scan(&collected); err != nil || !collected {
		t.Fatalf("the row held during the first claim: collected %t, %v", collected, err)
	}
}

// importThrough serves the provider with h, with the simulator's keys, and imports the sample
// targets into db.
func importThrough(t *testing.T, db string, h http.Handler) {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	t.Setenv("NEOPLE_API_BASE_URL", srv.URL)
	t.Setenv("COLLECTOR_CONFIG", "")
	t.Setenv("NEOPLE_ITEM_API_KEY", neoplesim.DefaultItemKey)
	t.Setenv("NEOPLE_MARKET_API_KEY", neoplesim.DefaultMarketKey)
	if _, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", "../../configs/import-targets.yaml"); err != nil {
		t.Fatal(err)
	}
}

// A run that meets the provider's maintenance exits 0 and says so, though the calls in flight
// when it answered are written back as failed: a cron job is not red for the weekly window.
func TestCollectDueIntoAMaintenanceExitsZeroSayingSo(t *testing.T) {
	_, db := storetest.NewPool(t)
	sim := neoplesim.New(neoplesim.Options{Items: 50, Seed: 1})
	importThrough(t, db, sim)
	sim.SetMaintenance(true)
	out, _, err := runCollector(t, "collect-due", "--database-url", db, "--batch-size", "1")
	if err != nil || !strings.Contains(out, "collection paused: provider MAINTENANCE since") || strings.Contains(out, "since 0001") {
		t.Fatalf("collect-due into a maintenance: %q, %v; want exit 0, paused since the answer", out, err)
	}
}

// A run in which every claimed item failed exits 1, so that a CronJob or a timer shows it
// failed; a run with some collected exits 0 (the log's per-outcome lines name the failed).
func TestCollectDueExitsOneWhenEveryItemFailed(t *testing.T) {
	_, db := storetest.NewPool(t)
	sim := neoplesim.New(neoplesim.Options{Items: 50, Seed: 1})
	importThrough(t, db, sim)
	sim.SetFaults(neoplesim.Faults{ErrorRate: 1})
	out, _, err := runCollector(t, "collect-due", "--database-url", db)
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "every item claimed failed") || !strings.Contains(out, "collected=0") {
		t.Fatalf("collect-due with every call failing: %q, %v; want exit 1 saying every item failed", out, err)
	}
}

// Only a run whose every claimed item was tried and failed, not all for the item's own error,
// fails: items handed back by a maintenance answer, a cool-down or a signal are not failures,
// and a removed item alone due must not fail every run until it goes dormant.
func TestWhichRunsFailedEveryItem(t *testing.T) {
	for _, c := range []struct {
		name string
		sum  dispatcher.Summary
		want bool
	}{
		{"every call failed", dispatcher.Summary{Claimed: 12, Failed: 12}, true},
		{"failed or fenced", dispatcher.Summary{Claimed: 12, Failed: 10, Fenced: 2}, true},
		{"one collected", dispatcher.Summary{Claimed: 12, Collected: 1, Failed: 11}, false},
		{"maintenance after two failures", dispatcher.Summary{Claimed: 50, Failed: 2, Released: 48}, false},
		{"maintenance answered to every call", dispatcher.Summary{Claimed: 12, Failed: 12, Paused: true}, false},
		{"a removed item alone", dispatcher.Summary{Claimed: 1, Failed: 1, ItemErrors: 1}, false},
		{"a removed item among failures", dispatcher.Summary{Claimed: 3, Failed: 3, ItemErrors: 1}, true},
		{"nothing claimed", dispatcher.Summary{}, false},
	} {
		if got := everyItemFailed(c.sum); got != c.want {
			t.Errorf("%s: %t, want %t", c.name, got, c.want)
		}
	}
}

// `collect ITEM_ID` stalled past its lease (a paused VM) finds its write-back fenced off: the
// reason names the lease, not the pass's end.
func TestCollectOneFencedOffSaysTheLeaseRanOut(t *testing.T) {
	got := notCollected(dispatcher.Summary{Claimed: 1, Fenced: 1, Stop: dispatcher.StopMaxBatches})
	if !strings.Contains(got, "collect.lease") || strings.Contains(got, "max batches") {
		t.Fatalf("notCollected = %q, want the lease named", got)
	}
}

func TestCollectDueWithoutMarketKeyNamesTheVariable(t *testing.T) {
	db := catalogEnv(t, false)
	t.Setenv("NEOPLE_ITEM_API_KEY", "an-item-key-is-not-a-market-key")
	_, _, err := runCollector(t, "collect-due", "--database-url", db)
	if err == nil || !strings.Contains(err.Error(), "NEOPLE_MARKET_API_KEY") {
		t.Fatalf("err = %v, want it to name NEOPLE_MARKET_API_KEY", err)
	}
	if strings.Contains(err.Error(), "an-item-key-is-not-a-market-key") {
		t.Fatal("the item key must never stand in for the market key, nor be printed")
	}
}

// A sentinel key used for a whole run, including failures, never appears in output or errors.
func TestSentinelKeyNeverAppears(t *testing.T) {
	const sentinel = "SENTINEL-7f3a9c-KEY"
	_, db := storetest.NewPool(t)
	sim := neoplesim.New(neoplesim.Options{Items: 20, Seed: 3, MarketKey: "the-real-one", ItemKey: sentinel})
	srv := httptest.NewServer(sim)
	t.Cleanup(srv.Close)
	t.Setenv("COLLECTOR_CONFIG", "")
	t.Setenv("NEOPLE_ITEM_API_KEY", sentinel)
	t.Setenv("NEOPLE_MARKET_API_KEY", sentinel)    // refused by the simulator: a config error
	t.Setenv("COLLECTOR_PROVIDER_KEY_IN", "query") // the key travels in the URL: worst case

	var all strings.Builder
	check := func(args ...string) {
		t.Helper()
		out, errOut, err := runCollector(t, append(args, "--database-url", db, "--log-level", "debug")...)
		all.WriteString(out + errOut)
		if err != nil {
			all.WriteString(err.Error())
		}
	}
	t.Setenv("NEOPLE_API_BASE_URL", srv.URL)
	check("import-items", "--targets", "../../configs/import-targets.yaml")
	check("collect-due")
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `UPDATE tracked_items SET next_collect_at = now() - interval '1 second'`); err != nil {
		t.Fatal(err)
	}
	check("collect-due")
	// A provider URL that does not answer at all.
	t.Setenv("NEOPLE_API_BASE_URL", "http://127.0.0.1:1")
	check("collect-due")
	check("import-items", "--targets", "../../configs/import-targets.yaml")
	if strings.Contains(all.String(), sentinel) {
		t.Fatalf("the API key leaked:\n%s", all.String())
	}
	if !strings.Contains(all.String(), "NEOPLE_MARKET_API_KEY") && !strings.Contains(all.String(), "API00") {
		t.Fatalf("the refused key was not reported at all:\n%s", all.String())
	}
}

// A one-shot that meets a key cool-down longer than its leases exits promptly with 0, saying
// until when, instead of sleeping through it; both status commands show the cool-down.
func TestCollectDueStopsAtALongCooldown(t *testing.T) {
	db := catalogEnv(t, true)
	if _, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", "../../configs/import-targets.yaml"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), `INSERT INTO budget_cooldowns (key_label, until, reason)
		VALUES ($1, now() + interval '1 hour', 'API002 APIKEY_USAGE_EXCEEDED')`, budget.KeyLabel("market", neoplesim.DefaultMarketKey)); err != nil {
		t.Fatal(err)
	}
	done := startCollector(context.Background(), "collect-due", "--database-url", db, "--lease", "10s")
	select {
	case r := <-done:
		if r.err != nil || !strings.Contains(r.out, "the key cools down until") || !strings.Contains(r.out, "claimed=12 collected=0") {
			t.Fatalf("collect-due: %q %v; want exit 0 with the cool-down's end", r.out, r.err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("collect-due sat out an hour-long cool-down instead of exiting")
	}
	for _, cmd := range [][]string{{"status"}, {"provider", "status"}} {
		out, _, err := runCollector(t, append(cmd, "--database-url", db)...)
		if err != nil || !strings.Contains(out, "cooling down until") || !strings.Contains(out, "APIKEY_USAGE_EXCEEDED") {
			t.Fatalf("%v: %q %v; want the cool-down with its end and reason", cmd, out, err)
		}
	}
	if n := countRows(t, conn, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL`); n != 0 {
		t.Fatalf("%d items left leased; the run must hand them back", n)
	}
	// Asked for one item now, collecting nothing is a failure, and says why: the cool-down,
	// then a paused provider.
	var id string
	if err := conn.QueryRow(context.Background(), `SELECT item_id FROM tracked_items LIMIT 1`).Scan(&id); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ before, want string }{
		{"", "nothing collected: the key cools down until"},
		{"MAINTENANCE", "nothing collected: the provider is MAINTENANCE (manual override: planned work)"},
	} {
		if c.before != "" {
			if _, _, err := runCollector(t, "provider", "set", c.before, "--reason", "planned work", "--database-url", db); err != nil {
				t.Fatal(err)
			}
		}
		_, _, err := runCollector(t, "collect", id, "--database-url", db)
		if err == nil || exitCode(err) != exitRuntime || !strings.Contains(err.Error(), c.want) {
			t.Fatalf("collect %s: %v; want exit %d saying %q", id, err, exitRuntime, c.want)
		}
	}
}

func countRows(t *testing.T, conn *pgx.Conn, sql string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// collect-due on SIGTERM stops claiming, lets the calls in flight finish within
// collect.shutdown_grace, writes what they brought and hands every other item back.
func TestCollectDueShutdownHonoursTheGracePeriod(t *testing.T) {
	db := catalogEnv(t, true)
	if _, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", "../../configs/import-targets.yaml"); err != nil {
		t.Fatal(err)
	}
	inFlight, release := holdingProvider(t)
	ctx, sigterm := context.WithCancel(context.Background())
	done := startCollector(ctx, "collect-due", "--database-url", db, "--concurrency", "2")
	testkit.Recv(t, inFlight, 30*time.Second, "the first call in flight")
	testkit.Recv(t, inFlight, 30*time.Second, "the second call in flight")
	sigterm()
	close(release) // the calls in flight answer within the grace period
	r := testkit.Recv(t, done, time.Minute, "collect-due to exit")
	if r.err != nil || !strings.Contains(r.out, "claimed=12 collected=2 ") || !strings.Contains(r.out, "released=10") {
		t.Fatalf("collect-due after SIGTERM: %q %v; want the 2 calls in flight written and 10 items handed back", r.out, r.err)
	}
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if n := countRows(t, conn, `SELECT count(*) FROM tracked_items WHERE lease_token IS NOT NULL`); n != 0 {
		t.Fatalf("%d items left leased", n)
	}
	if n := countRows(t, conn, `SELECT count(*) FROM auction_snapshots`); n != 2 {
		t.Fatalf("%d snapshots, want the 2 in flight at SIGTERM", n)
	}
}

// holdingProvider serves the simulator, holding every /df/auction call until release is
// closed and reporting each on inFlight.
func holdingProvider(t *testing.T) (inFlight chan struct{}, release chan struct{}) {
	t.Helper()
	sim := neoplesim.New(neoplesim.Options{Items: 50, Seed: 1})
	inFlight, release = make(chan struct{}, 16), make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/df/auction" {
			inFlight <- struct{}{}
			<-release
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	t.Setenv("NEOPLE_API_BASE_URL", srv.URL)
	return inFlight, release
}

type cmdResult struct {
	out string
	err error
}

// startCollector runs the collector with args until ctx ends (ctx's cancellation is SIGTERM).
func startCollector(ctx context.Context, args ...string) <-chan cmdResult {
	done := make(chan cmdResult, 1)
	go func() {
		var out, errOut bytes.Buffer
		cmd := newRootCmd(&out, &errOut)
		cmd.SetArgs(append(args, "--log-format", "console"))
		err := cmd.ExecuteContext(ctx)
		done <- cmdResult{out.String(), err}
	}()
	return done
}

// collect ITEM_ID on SIGTERM gives its call in flight collect.shutdown_grace: an answer within
// it is written, and without one the item is handed back, never left leased.
func TestCollectOneShutdownHonoursTheGracePeriod(t *testing.T) {
	db := catalogEnv(t, true)
	if _, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", "../../configs/import-targets.yaml"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var ids []string
	rows, _ := conn.Query(context.Background(), `SELECT item_id FROM tracked_items ORDER BY item_id LIMIT 2`)
	if ids, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil || len(ids) != 2 {
		t.Fatalf("two tracked items: %v %v", ids, err)
	}
	collected := func(id string) (snapshots, leased int) {
		t.Helper()
		err := conn.QueryRow(context.Background(), `SELECT
			(SELECT count(*) FROM auction_snapshots WHERE item_id = $1),
			(SELECT count(*) FROM tracked_items WHERE item_id = $1 AND lease_token IS NOT NULL)`, id).Scan(&snapshots, &leased)
		if err != nil {
			t.Fatal(err)
		}
		return snapshots, leased
	}

	t.Run("answer within the grace", func(t *testing.T) {
		inFlight, release := holdingProvider(t)
		ctx, sigterm := context.WithCancel(context.Background())
		defer sigterm()
		done := startCollector(ctx, "collect", ids[0], "--database-url", db)
		testkit.Recv(t, inFlight, 30*time.Second, "the call in flight")
		sigterm()
		close(release)
		if r := testkit.Recv(t, done, time.Minute, "collect to exit"); r.err != nil || !strings.Contains(r.out, "collected=1 ") {
			t.Fatalf("collect after SIGTERM: %q %v; want the answer written", r.out, r.err)
		}
		if s, l := collected(ids[0]); s != 1 || l != 0 {
			t.Fatalf("%d snapshots, %d leased; want 1 and 0", s, l)
		}
	})
	t.Run("no answer within the grace", func(t *testing.T) {
		t.Setenv("COLLECTOR_COLLECT_SHUTDOWN_GRACE", "200ms")
		inFlight, _ := holdingProvider(t)
		ctx, sigterm := context.WithCancel(context.Background())
		defer sigterm()
		done := startCollector(ctx, "collect", ids[1], "--database-url", db)
		testkit.Recv(t, inFlight, 30*time.Second, "the call in flight")
		sigterm()
		r := testkit.Recv(t, done, time.Minute, "collect to exit after the grace")
		if s, l := collected(ids[1]); s != 0 || l != 0 {
			t.Fatalf("collect abandoned after the grace (%q %v): %d snapshots, %d leased; want 0 and 0", r.out, r.err, s, l)
		}
		if !strings.Contains(r.out, "released=1") || !strings.Contains(r.out, `stop="interrupted"`) || !errors.Is(r.err, context.Canceled) {
			t.Fatalf("collect abandoned after the grace: %q %v; want the item handed back, the pass interrupted, the error the stop", r.out, r.err)
		}
	})
}

// A process with no Kafka configured still writes every snapshot's event (a relay may run on
// another host); only COLLECTOR_OUTBOX_ENABLED=false writes none. status (text and JSON) says
// which it is, and a relay beside "off" is refused naming the key.
func TestOutboxEnabledAloneDecidesWhetherCollectionsWriteEvents(t *testing.T) {
	db := catalogEnv(t, true)
	t.Setenv("COLLECTOR_KAFKA_BROKERS", "")
	t.Setenv("COLLECTOR_HISTORY_MODE", "every") // every collection a snapshot, so every one could have an event
	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", "../../configs/import-targets.yaml"); err != nil {
		t.Fatal(err)
	}
	collectAll := func() {
		t.Helper()
		if _, err := conn.Exec(context.Background(), `UPDATE tracked_items SET next_collect_at = now()`); err != nil {
			t.Fatal(err)
		}
		if out, _, err := runCollector(t, "collect-due", "--database-url", db); err != nil || !strings.Contains(out, "collected=12 failed=0") {
			t.Fatalf("collect-due: %q %v", out, err)
		}
	}
	statusLine := func() string {
		t.Helper()
		out, _, err := runCollector(t, "status", "--database-url", db)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, "events ") {
				return line
			}
		}
		t.Fatalf("status says nothing about events:\n%s", out)
		return ""
	}

	collectAll()
	snaps, events := countRows(t, conn, `SELECT count(*) FROM auction_snapshots`), countRows(t, conn, `SELECT count(*) FROM outbox`)
	if snaps != 12 || events != 12 {
		t.Fatalf("defaults, no kafka.brokers: %d snapshots, %d events; want 12 and an event each", snaps, events)
	}
	if line := statusLine(); !strings.HasPrefix(line, "events published through the outbox; outbox: 12 unpublished") {
		t.Errorf("status with the defaults: %q", line)
	}

	t.Setenv("COLLECTOR_OUTBOX_ENABLED", "false")
	collectAll()
	snaps, events = countRows(t, conn, `SELECT count(*) FROM auction_snapshots`), countRows(t, conn, `SELECT count(*) FROM outbox`)
	if snaps != 24 || events != 12 {
		t.Fatalf("outbox.enabled=false: %d snapshots, %d events; want 12 more snapshots and no new event", snaps, events)
	}
	// The 12 events from before stay, and status still shows them: nothing will publish them.
	if line := statusLine(); !strings.HasPrefix(line, "events off: outbox.enabled=false, no outbox rows written; outbox: 12 unpublished") {
		t.Errorf("status with outbox.enabled=false: %q", line)
	}
	out, _, err := runCollector(t, "status", "--database-url", db, "-o", "json")
	var v statusJSON
	if err != nil || json.Unmarshal([]byte(out), &v) != nil || v.Outbox.Enabled || v.Outbox.Unpublished != 12 {
		t.Errorf("status -o json with outbox.enabled=false: outbox %+v (%v)\n%s", v.Outbox, err, out)
	}

	for _, args := range [][]string{
		{"relay-outbox", "--once", "--database-url", db},
		{"relay-outbox", "--once", "--database-url", db, "--brokers", "127.0.0.1:9"},
		{"run", "--database-url", db},
	} {
		if args[0] == "run" {
			t.Setenv("COLLECTOR_KAFKA_BROKERS", "127.0.0.1:9")
		}
		_, _, err := runCollector(t, args...)
		if err == nil || !strings.Contains(err.Error(), "outbox.enabled") || !strings.Contains(err.Error(), "COLLECTOR_OUTBOX_ENABLED") {
			t.Errorf("%v with outbox.enabled=false: %v; want a refusal naming outbox.enabled", args, err)
		}
	}
}
