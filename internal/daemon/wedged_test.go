package daemon

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// A daemon wedged inside a batch (no provider call finishes for the leases' renewal cap, the
// database up) fails /healthz, so its supervisor restarts it and its share of the budget goes
// back to the others; once a call finishes it is live again.
func TestAWedgedBatchFailsLiveness(t *testing.T) {
	w := startWedging(t, nil)
	w.d.collect.disp.LeasesLeft.Wait(t)
	if code, body := w.healthz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "wedged") {
		t.Fatalf("/healthz with a wedged batch: %d %q, want 503 saying it is wedged", code, body)
	}
	w.open()
	waitPasses(t, w.cfg, "/healthz live again", func() bool { code, _ := w.healthz(); return code == http.StatusOK })
}

// A batch stuck while the database refuses writes is the database's fault, not the process's:
// /healthz stays 200 (a restart would not help, and liveness probes would restart every pod
// through the outage) while /readyz says why.
func TestABatchStuckWhileTheDatabaseRefusesWritesIsNoWedge(t *testing.T) {
	w := startWedging(t, nil)
	testkit.Recv(t, w.arrived, testkit.Timeout, "the batch's call to arrive")
	switchReadOnly(t, w.e, true)
	t.Cleanup(func() { switchReadOnly(t, w.e, false) })
	testkit.Eventually(t, 20*time.Second, "/readyz to report the read-only database", func() bool {
		code, body := readyz(t, w.r)
		return code == http.StatusServiceUnavailable && strings.Contains(body, "read_only")
	})
	w.d.collect.disp.LeasesLeft.Wait(t)
	if code, body := w.healthz(); code != http.StatusOK {
		t.Fatalf("/healthz with a stuck batch and a read-only database: %d %q, want 200", code, body)
	}
}

// A batch held while the key's shared cool-down lasts waits out the provider's Retry-After; it
// is not wedged: /healthz stays 200, or a provider answering a long Retry-After would have every
// daemon restarted through it.
func TestABatchWaitingOutACooldownIsNoWedge(t *testing.T) {
	w := startWedging(t, func(c *Config) {
		c.Daemon.Budget.Enabled, c.Daemon.Budget.Heartbeat = true, 100*time.Millisecond
		c.Daemon.ShutdownGrace = time.Second // the cool-down holds the pass's other calls until then
	})
	testkit.Recv(t, w.arrived, testkit.Timeout, "the batch's call to arrive")
	w.d.share.RateLimited(context.Background(), time.Minute, "test: Retry-After")
	w.d.collect.disp.LeasesLeft.Wait(t)
	if code, body := w.healthz(); code != http.StatusOK {
		t.Fatalf("/healthz with a batch held through the key's cool-down: %d %q, want 200", code, body)
	}
}

// wedging is a daemon on one HOT item whose provider holds every /df/auction call until open.
type wedging struct {
	e       *env
	d       *Daemon
	r       *running
	cfg     Config
	arrived chan struct{} // each held call
	open    func()
}

func startWedging(t *testing.T, tune func(*Config)) *wedging {
	t.Helper()
	e := newEnv(t, 1, neoplesim.Options{})
	e.ownPools = true
	release := make(chan struct{})
	var once sync.Once
	w := &wedging{e: e, arrived: make(chan struct{}, 16), open: func() { once.Do(func() { close(release) }) }}
	t.Cleanup(w.open) // a failed wait must not leave the handler hanging
	sim := e.srv.Config.Handler
	e.srv = httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/df/auction" {
			select {
			case w.arrived <- struct{}{}:
			default:
			}
			<-release
		}
		sim.ServeHTTP(rw, r)
	}))
	t.Cleanup(e.srv.Close)
	e.track(t, 0, 1, tiers.Hot, -time.Second)
	w.cfg = testConfig()
	w.cfg.Daemon.HTTPAddr = "127.0.0.1:0"
	w.cfg.Dispatch.Lease = time.Second
	w.cfg.signals.passed.Init(t)
	if tune != nil {
		tune(&w.cfg)
	}
	w.d = e.build(t, w.cfg, nil)
	w.d.collect.disp.LeasesLeft.Init(t)
	ctx, cancel := context.WithCancel(context.Background())
	w.r = &running{d: w.d, stop: cancel, done: make(chan error, 1)}
	go func() { w.r.done <- w.d.Run(ctx) }()
	t.Cleanup(func() { w.open(); w.r.shutdown(t) })
	return w
}

func (w *wedging) healthz() (int, string) {
	resp, err := http.Get("http://" + w.d.Addr() + "/healthz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
