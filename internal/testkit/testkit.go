// Package testkit is what tests use to wait: Eventually polls a condition until a deadline and
// Recv takes one value from a channel within a deadline. Nothing here sleeps for a fixed time to
// let something happen, and no wait can outlast its deadline. Production code never imports it;
// the signals it reports to tests are internal/testsignal's.
package testkit

import (
	"time"

	"github.com/duecollector/duecollector/internal/testsignal"
)

// TB is the part of testing.TB the helpers use.
type TB = testsignal.TB

// Timeout bounds waits whose caller has no better deadline: long enough for a loaded 2-core
// machine, short of the 30-minute test timeout.
const Timeout = testsignal.Timeout

const pollEvery = 10 * time.Millisecond

// Eventually polls cond until it holds, failing tb once within has passed.
func Eventually(tb TB, within time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(pollEvery)
	}
}

// Recv takes one value from ch (the zero value once ch is closed, as <-ch does), failing tb if
// none arrives within the deadline.
func Recv[T any](tb TB, ch <-chan T, within time.Duration, what string) T {
	tb.Helper()
	t := time.NewTimer(within)
	defer t.Stop()
	select {
	case v := <-ch:
		return v
	case <-t.C:
		tb.Fatalf("timed out after %s waiting for %s", within, what)
	}
	var zero T
	return zero
}
