package dispatcher

import (
	"context"
	"net/http"
	"sync"
	"testing"

	"github.com/duecollector/duecollector/internal/tiers"
)

// A rate-limit answer affects only the call it answered: calls already answered keep their
// results, the item that finished its listings call keeps them and sends only its sales call
// again, and the pass neither stops nor hands items back.
func TestRateLimitAnswerCostsOnlyARetryOfThatCall(t *testing.T) {
	var mu sync.Mutex
	refused := map[string]int{}
	e := setup(t, 30, tiers.Cold, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// Every item's first sales call is refused, as a provider over its limit would.
			if r.URL.Path == "/df/auction-sold" {
				id := r.URL.Query().Get("itemId")
				mu.Lock()
				refused[id]++
				first := refused[id] == 1
				mu.Unlock()
				if first {
					w.Header().Set("Content-Type", "application/json")
					w.WriteHeader(http.StatusBadRequest)
					_, _ = w.Write([]byte(`{"error":{"status":400,"code":"API002","message":"APIKEY_LIMIT_EXCEEDED"}}`))
					return
				}
			}
			next.ServeHTTP(w, r)
		})
	})
	s, err := e.dispatcher(t, Config{BatchSize: 30, Concurrency: 4}, nil).RunOnce(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if s.Collected != 30 || s.Failed != 0 || s.Released != 0 || s.Stop != StopNothingDue {
		t.Fatalf("summary %+v: want all 30 collected in one pass, none released", s)
	}
	st := e.sim.Stats()
	for _, it := range e.items {
		if a := st.Items[it.ItemID].Auction; a != 1 {
			t.Fatalf("item %s: %d listings calls, want 1 (its answered call is kept)", it.ItemID, a)
		}
		if refused[it.ItemID] != 2 {
			t.Fatalf("item %s: %d sales calls, want the refused one and its retry", it.ItemID, refused[it.ItemID])
		}
	}
	if c := count(t, e.pool, `SELECT count(*) FROM auction_snapshots`); c != 30 {
		t.Fatalf("%d snapshots, want 30", c)
	}
}

// A refusal that ends the pass (a Retry-After longer than the retries wait) is about the key,
// not the item it answered: that item goes back due with the others, no failure written.
func TestARateLimitThatEndsThePassHandsEveryItemBack(t *testing.T) {
	t.Parallel()
	e := setup(t, 3, tiers.Cold, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "3600")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{"status":429,"code":"API002","message":"APIKEY_LIMIT_EXCEEDED"}}`))
		})
	})
	s, err := e.dispatcher(t, Config{Concurrency: 1}, nil).RunOnce(context.Background())
	if err != nil || s.Stop != StopRateLimited || s.Failed != 0 || s.Released != 3 {
		t.Fatalf("summary %s, %v: want the pass stopped for the rate limit and all 3 items handed back", s, err)
	}
	if c := count(t, e.pool, `SELECT count(*) FROM tracked_items WHERE next_collect_at <= now() AND failure_streak = 0 AND lease_token IS NULL`); c != 3 {
		t.Fatalf("%d items due and unleased with no failure, want 3", c)
	}
}
