package api

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// The answer's own write deadline reaches the connection through every wrapper of the
// handler: a server whose write timeout passed while the answer was read from the database
// still sends it whole.
func TestTheAnswersWriteDeadlineReachesTheConnection(t *testing.T) {
	t.Parallel()
	pool, url := storetest.NewPool(t)
	storetest.Items(t, pool, storetest.Item{ID: "item-1", Name: "One", Tier: tiers.Hot})
	proxy := storetest.NewProxy(t, url)
	slow, err := store.Open(context.Background(), store.PoolConfig{URL: proxy.URL, MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(slow.Close)
	t.Cleanup(proxy.Close) // runs first: a read stuck on the proxy fails before the pool waits for it
	cfg := Config{APIConfig: config.Default().API}
	cfg.Rate = 0
	a, err := New(slow, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	const writeTimeout = 20 * time.Millisecond
	srv := httptest.NewUnstartedServer(a.Handler())
	srv.Config.WriteTimeout = writeTimeout
	srv.Start()
	t.Cleanup(srv.Close)

	proxy.Freeze()
	type answer struct {
		code int
		body []byte
		err  error
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := http.Get(srv.URL + Prefix + "items/item-1/timeseries")
		if err != nil {
			done <- answer{err: err}
			return
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		done <- answer{code: resp.StatusCode, body: b, err: err}
	}()
	testkit.Recv(t, proxy.Held, testkit.Timeout, "the answer's read to reach the database")
	// The server's write deadline was set when the request was read, before the database was
	// asked: it has passed once this much time has.
	time.Sleep(writeTimeout)
	proxy.Thaw()
	got := testkit.Recv(t, done, testkit.Timeout, "the answer")
	if got.err != nil || got.code != http.StatusOK || len(got.body) == 0 {
		t.Fatalf("answer after the server's write timeout: code %d, %d bytes, error %v; want it whole", got.code, len(got.body), got.err)
	}
}
