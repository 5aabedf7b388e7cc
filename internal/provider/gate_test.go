package provider

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/testkit"
)

// A collection burst decodes at most one answer fewer than there are Ps at once, so a P stays
// free for the read API: parses past that wait for a slot.
func TestAnswersDecodeInBoundedSlots(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte(`{"rows":[]}`))
	}))
	t.Cleanup(srv.Close)
	c, err := NewClient(ClientConfig{Workload: WorkloadMarket, BaseURL: srv.URL, Key: "k", Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	slots := cap(parseSlots)
	entered := make(chan struct{}, slots+1) // a parse never waits to say it started
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	t.Cleanup(free) // a failure below must not leave the slots held for the package's other tests
	parse := func([]byte) (int, error) {
		entered <- struct{}{}
		<-release
		return 0, nil
	}
	var wg sync.WaitGroup
	errs := make(chan error, slots+1)
	for range slots + 1 {
		wg.Go(func() {
			_, _, err := call(context.Background(), c, WorkloadMarket, "/df/auction", "", "1", url.Values{}, parse)
			errs <- err
		})
	}
	for range slots {
		testkit.Recv(t, entered, testkit.Timeout, "a parse to start")
	}
	// Every slot is taken by a parse in progress; the last call can only wait for one.
	if n := len(parseSlots); n != slots {
		t.Fatalf("%d of %d parse slots taken while %d parses run", n, slots, slots)
	}
	free()
	testkit.Recv(t, entered, testkit.Timeout, "the last call's parse, once a slot is free")
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}
