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
	"github.com/duecollector/duecollector/internal/tiers"
)

// A daemon wedged inside a batch (no provider call finishes for the leases' renewal cap, the
// database up) fails /healthz, so its supervisor restarts it and its share of the budget goes
// back to the others; once a call finishes it is live again.
func TestAWedgedBatchFailsLiveness(t *testing.T) {
	e := newEnv(t, 1, neoplesim.Options{})
	release := make(chan struct{})
	var once sync.Once
	open := func() { once.Do(func() { close(release) }) }
	t.Cleanup(open) // a failed wait must not leave the handler hanging
	sim := e.srv.Config.Handler
	e.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/df/auction" {
			<-release
		}
		sim.ServeHTTP(w, r)
	}))
	t.Cleanup(e.srv.Close)
	e.track(t, 0, 1, tiers.Hot, -time.Second)
	cfg := testConfig()
	cfg.Daemon.HTTPAddr = "127.0.0.1:0"
	cfg.Dispatch.Lease = time.Second
	cfg.signals.passed.Init(t)
	d := e.build(t, cfg, nil)
	d.collect.disp.LeasesLeft.Init(t)
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{d: d, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(ctx) }()
	t.Cleanup(func() { open(); r.shutdown(t) })

	healthz := func() (int, string) {
		resp, err := http.Get("http://" + d.Addr() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	d.collect.disp.LeasesLeft.Wait(t)
	if code, body := healthz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "wedged") {
		t.Fatalf("/healthz with a wedged batch: %d %q, want 503 saying it is wedged", code, body)
	}
	open()
	waitPasses(t, cfg, "/healthz live again", func() bool { code, _ := healthz(); return code == http.StatusOK })
}
