package api

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// Polls of /latest that wait for a refresh which then fails take its failure: behind a hung
// database they are all answered 503 after one bounded read, not one after another, each
// after a read of its own.
func TestPollsWaitingOnAFailedRefreshShareIt(t *testing.T) {
	pool, url := storetest.NewPool(t)
	storetest.Items(t, pool, storetest.Item{ID: "item-1", Name: "One", Tier: tiers.Hot})
	proxy := storetest.NewProxy(t, url)
	hung, err := store.Open(context.Background(), store.PoolConfig{URL: proxy.URL, MaxConns: 4})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(hung.Close)
	t.Cleanup(proxy.Close) // runs first: reads stuck on the proxy fail before the pool waits
	cfg := Config{APIConfig: config.Default().API}
	cfg.Rate = 0
	a, err := New(hung, cfg, zaptest.NewLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	a.latest.timeout = testkit.Timeout // the test ends the read itself, once every poll waits
	waiting := make(chan struct{}, 8)
	a.latest.waiting = func() { waiting <- struct{}{} }
	srv := httptest.NewServer(a.Handler())
	t.Cleanup(srv.Close)

	proxy.Freeze()
	codes := make(chan int, 3)
	poll := func() {
		resp, err := http.Get(srv.URL + Prefix + "latest")
		if err != nil {
			codes <- 0
			return
		}
		resp.Body.Close()
		codes <- resp.StatusCode
	}
	go poll()
	testkit.Recv(t, waiting, testkit.Timeout, "the first poll's refresh")
	testkit.Recv(t, proxy.Held, testkit.Timeout, "the first poll's read to reach the database")
	go poll()
	go poll()
	testkit.Recv(t, waiting, testkit.Timeout, "the second poll to wait")
	testkit.Recv(t, waiting, testkit.Timeout, "the third poll to wait")
	proxy.Close() // the database goes away: the first read fails, and every read after it
	for range 3 {
		if code := testkit.Recv(t, codes, testkit.Timeout, "a poll's answer"); code != http.StatusServiceUnavailable {
			t.Fatalf("a poll behind a hung database: %d, want 503", code)
		}
	}
	if n := a.latest.ended.Load(); n != 1 {
		t.Fatalf("%d reads for three polls waiting on one, want 1", n)
	}
}
