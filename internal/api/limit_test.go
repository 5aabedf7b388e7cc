package api

import (
	"fmt"
	"testing"
	"time"
)

// Past maxClients addresses at once, newcomers share one bucket, and the map stops growing;
// a token holder still gets a bucket of its own, not the flood's.
func TestAFloodOfAddressesLeavesTokenHoldersTheirBuckets(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := newLimiter(1, func() time.Time { return now })
	for i := range maxClients {
		l.take(fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255))
	}
	for range 2 * l.burst {
		l.take("192.0.2.1") // a newcomer past the cap: the shared bucket, emptied
	}
	if d := l.take("192.0.2.2"); d.ok {
		t.Fatal("a newcomer past the cap did not share the emptied overflow bucket")
	}
	if len(l.clients) > maxClients+1 {
		t.Fatalf("%d buckets kept, want at most %d", len(l.clients), maxClients+1)
	}
	if d := l.take(tokenClient + "0"); !d.ok {
		t.Fatal("a token holder shared the flood's bucket")
	}
}

// The sweep forgets only buckets that have refilled: a client that emptied its bucket just
// before a sweep does not come out of it with a full one.
func TestASweepKeepsABucketInDebt(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	l := newLimiter(1, func() time.Time { return now }) // 1/s, a burst of 2: a window of 2s
	l.take("192.0.2.9")                                 // the first sweep
	now = now.Add(1900 * time.Millisecond)
	for i := range l.burst {
		if d := l.take("192.0.2.1"); !d.ok {
			t.Fatalf("request %d of a burst of %d refused", i+1, l.burst)
		}
	}
	now = now.Add(110 * time.Millisecond) // past the window: this take sweeps
	if d := l.take("192.0.2.1"); d.ok {
		t.Fatal("a client that emptied its bucket 0.11s ago was let through after the sweep")
	}
}
