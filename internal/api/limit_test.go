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
