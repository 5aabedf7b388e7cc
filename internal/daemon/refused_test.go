package daemon

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// hostileFront puts answer in front of the simulator while it returns true, counting every
// request that reaches the provider.
func (e *env) hostileFront(t *testing.T, answer func(w http.ResponseWriter, r *http.Request) bool) *atomic.Int64 {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		if !answer(w, r) {
			e.sim.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	e.srv = srv
	return &n
}

func readyz(t *testing.T, r *running) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + r.d.Addr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// A refused key stops the workload loudly: /readyz and status say why, the error is logged
// once (not per request), the provider sees one call per re-check instead of a storm, and
// collection resumes by itself when the key works again.
func TestRefusedKeyStopsCollectionLoudlyAndResumes(t *testing.T) {
	e := newEnv(t, 20, neoplesim.Options{})
	e.track(t, 0, 20, tiers.Hot, 0)
	var refuse atomic.Bool
	refuse.Store(true)
	requests := e.hostileFront(t, func(w http.ResponseWriter, _ *http.Request) bool {
		if !refuse.Load() {
			return false
		}
		w.WriteHeader(http.StatusUnauthorized)
		_, _ = w.Write([]byte(`{"error":{"status":401,"code":"API003","message":"INVALID_APIKEY"}}`))
		return true
	})
	cfg := testConfig()
	cfg.Daemon.HTTPAddr = "127.0.0.1:0"
	cfg.Daemon.Notify = true
	cfg.KeyRecheck = 300 * time.Millisecond
	cfg.signals.passed.Init(t)
	core, logs := zapobserver.New(zapcore.WarnLevel)
	r := e.start(t, cfg, zap.New(core))

	testkit.Eventually(t, 20*time.Second, "/readyz to report the refused key", func() bool {
		code, body := readyz(t, r)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "refuses the market key")
	})
	st, err := Status(context.Background(), e.pool, "neople")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Cooldowns) != 1 || !strings.Contains(st.Cooldowns[0].Reason, "key refused") {
		t.Fatalf("status cool-downs %+v: want the refused key with its reason", st.Cooldowns)
	}
	t0, n0 := time.Now(), requests.Load()
	testkit.Eventually(t, 20*time.Second, "three key re-checks", func() bool { return requests.Load() >= n0+3 })
	sent, took := requests.Load()-n0, time.Since(t0)
	// One call per re-check (plus one in flight at each end); a loop woken by its own lease
	// releases sent hundreds.
	if limit := int64(took/cfg.KeyRecheck) + 2; sent > limit {
		t.Fatalf("%d requests in %s with a refused key; at most %d re-checks", sent, took, limit)
	}
	if n := logs.FilterMessage("the provider refuses the market key: collection stopped until it works again").Len(); n != 1 {
		t.Fatalf("refused key logged %d times in under a minute, want once", n)
	}

	refuse.Store(false)
	waitPasses(t, cfg, "collection resumed", func() bool { return count(t, e.pool, `SELECT count(*) FROM auction_snapshots`) == 20 })
	if code, body := readyz(t, r); code != http.StatusOK {
		t.Fatalf("/readyz after collection resumed: %d %s", code, body)
	}
}

// One item refused with a bare 403 (a firewall in front of the API refusing that one URL)
// holds nothing: the refusal is checked with a call for another item, which is accepted, so
// the item fails alone while the others are collected, and no pass ends in an error.
func TestAKeyRefusedForOneItemHoldsNothing(t *testing.T) {
	e := newEnv(t, 6, neoplesim.Options{})
	// The refused item is the most overdue: every claim took it first, and so did the re-check.
	e.track(t, 0, 1, tiers.Hot, -time.Hour)
	e.track(t, 1, 6, tiers.Hot, -time.Minute)
	bad := e.items[0].ItemID
	e.hostileFront(t, func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Query().Get("itemId") != bad {
			return false
		}
		w.WriteHeader(http.StatusForbidden)
		return true
	})
	cfg := testConfig()
	cfg.KeyRecheck = time.Hour // a hold would outlast the test
	cfg.signals.passed.Init(t)
	r := e.start(t, cfg, zap.NewNop())
	waitPasses(t, cfg, "the other items collected and the refused one failed alone", func() bool {
		return count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE item_id <> $1 AND last_outcome = 'ok'`, bad) == 5 &&
			count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE item_id = $1 AND last_outcome = 'item_config' AND next_collect_at > now()`, bad) == 1
	})
	if r.d.collect.refused.Load() != nil {
		t.Fatal("collection held for one item's own refusal")
	}
	if n := testutil.ToFloat64(r.d.Metrics().LoopErrors.WithLabelValues("collect")); n != 0 {
		t.Fatalf("%v passes ended in an error for one item's own refusal, want none", n)
	}
}

// A pass that ends in an error sleeps its back-off for real: notifications (its own lease
// releases send some) do not wake it into the next failing pass.
func TestFailedPassBackOffIsNotCutShortByNotifications(t *testing.T) {
	e := newEnv(t, 5, neoplesim.Options{})
	e.track(t, 0, 5, tiers.Hot, 0)
	ctx := context.Background()
	// Every claim fails, so every pass ends in an error.
	_, err := e.pool.Exec(ctx, `
		CREATE FUNCTION refuse_claims() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION 'claims refused by the test'; END $$;
		CREATE TRIGGER refuse_claims BEFORE UPDATE OF lease_token ON tracked_items
			FOR EACH ROW WHEN (NEW.lease_token IS NOT NULL) EXECUTE FUNCTION refuse_claims();`)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Daemon.Notify = true
	stop := make(chan struct{})
	notified := make(chan struct{})
	go func() {
		defer close(notified)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = e.pool.Exec(ctx, `NOTIFY tracked_items_due`)
		}
	}()
	cfg.signals.passed.Init(t)
	t0 := time.Now()
	r := e.start(t, cfg, zap.NewNop())
	failedPasses := func() int { return int(testutil.ToFloat64(r.d.Metrics().LoopErrors.WithLabelValues("collect"))) }
	for i := 1; i <= 4; i++ {
		res := cfg.signals.passed.Wait(t)
		if res.Err == nil || res.Pause != retryBackoff.Delay(i) {
			t.Fatalf("failed pass %d: error %v, pause %s; want an error and a pause of %s, which nothing cuts short", i, res.Err, res.Pause, retryBackoff.Delay(i))
		}
	}
	close(stop)
	testkit.Recv(t, notified, testkit.Timeout, "the notifier to stop")
	took, n := time.Since(t0), failedPasses()
	// The passes that fit in took when each sleeps its back-off (100 ms doubling), plus one.
	fit, slept := 1, time.Duration(0)
	for ; slept <= took; fit++ {
		slept += retryBackoff.Delay(fit)
	}
	if n > fit {
		t.Fatalf("%d failed passes in %s; sleeping the back-offs allows %d", n, took, fit)
	}
}

// Rows the provider sends for an item nobody asked for are counted in
// collector_provider_rows_rejected_total{reason="foreign_item"} on the daemon's registry.
func TestRejectedRowsAreCountedInMetrics(t *testing.T) {
	e := newEnv(t, 5, neoplesim.Options{})
	e.track(t, 0, 5, tiers.Hot, 0)
	e.sim.SetFaults(neoplesim.Faults{ForeignRate: 1})
	d := e.build(t, testConfig(), zap.NewNop())
	rejected := func(reason string) float64 {
		mfs, err := d.Metrics().Registry.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != "collector_provider_rows_rejected_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "reason" && l.GetValue() == reason {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return -1
	}
	if v := rejected("future_date"); v != 0 {
		t.Fatalf("future_date = %v before any collection, want a zero series from the start", v)
	}
	if res := pass(t, d); res.Summary.Claimed != 5 {
		t.Fatalf("the pass claimed %d of 5", res.Summary.Claimed)
	}
	if v := rejected("foreign_item"); v <= 0 {
		t.Fatalf("foreign_item = %v after a collection answered with foreign rows, want it counted", v)
	}
	if v := rejected("future_date"); v != 0 {
		t.Fatalf("future_date = %v, want a zero series from the start", v)
	}
}

// An address that is not the API fails /readyz naming provider.base_url while passes end on
// it, and readiness comes back once the API answers there again, even if every item it
// answers fails (an item error is still the API's answer).
func TestAWrongBaseURLFailsReadinessNamingTheKey(t *testing.T) {
	e := newEnv(t, 5, neoplesim.Options{})
	e.track(t, 0, 5, tiers.Hot, 0)
	var wrong atomic.Bool
	wrong.Store(true)
	e.hostileFront(t, func(w http.ResponseWriter, _ *http.Request) bool {
		w.WriteHeader(http.StatusNotFound)
		if wrong.Load() {
			_, _ = w.Write([]byte("<html>404 Not Found</html>"))
		} else {
			_, _ = w.Write([]byte(`{"error":{"status":404,"code":"DNF003","message":"NOT_FOUND_ITEM"}}`))
		}
		return true
	})
	cfg := testConfig()
	cfg.Daemon.HTTPAddr = "127.0.0.1:0"
	cfg.signals.passed.Init(t)
	r := e.start(t, cfg, zap.NewNop())
	waitPasses(t, cfg, "a pass ended on the address", func() bool {
		code, body := readyz(t, r)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "provider.base_url")
	})
	// Handed back as they were: none rescheduled (an item each pass's check of another item
	// asked has that answer recorded, its schedule untouched).
	if n := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE next_collect_at > now() OR (last_error IS NOT NULL AND last_outcome <> 'endpoint')`); n != 0 {
		t.Fatalf("%d items failed on an address that is not the API; want them handed back", n)
	}
	wrong.Store(false)
	// Readiness is part of the wait: the pass clears the flag after it has written.
	waitPasses(t, cfg, "ready again, with every item failed by the API's own answer", func() bool {
		code, _ := readyz(t, r)
		return code == http.StatusOK && count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE last_outcome = 'item_error'`) == 5
	})
}
