// Package testkit is what tests use to wait: Eventually polls a condition until a deadline,
// Recv takes one value from a channel within a deadline, and Signal lets production code tell
// a test what it did (River's test signals). Nothing here sleeps for a fixed time to let
// something happen, and no wait can outlast its deadline. Production code imports it only for
// Signal, whose zero value does nothing.
package testkit

import (
	"fmt"
	"time"
)

// TB is the part of testing.TB the helpers use; production code imports testkit without
// importing package testing.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Timeout bounds waits whose caller has no better deadline: long enough for a loaded 2-core
// machine, short of the 30-minute test timeout.
const Timeout = time.Minute

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

// signalBuffer is how many signals may wait unread before one is dropped and the test fails.
const signalBuffer = 4096

// Signal is one kind of event production code reports to a test. The zero value is off and
// costs a nil check; Init turns it on. A signal that cannot be buffered fails the test instead
// of vanishing, so a test never waits for a signal that was silently lost.
type Signal[T any] struct {
	ch chan T
	tb TB
}

// Init turns the signal on for tb.
func (s *Signal[T]) Init(tb TB) {
	s.ch = make(chan T, signalBuffer)
	s.tb = tb
}

// Signal reports v; it never blocks.
func (s *Signal[T]) Signal(v T) {
	if s == nil || s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
		s.tb.Errorf("test signal dropped: more than %d unread %T signals", signalBuffer, v)
	}
}

// C is the channel signals arrive on, for select loops (nil while off).
func (s *Signal[T]) C() <-chan T { return s.ch }

// Wait takes the next signal, failing the test if none comes within Timeout.
func (s *Signal[T]) Wait(tb TB) T {
	tb.Helper()
	return s.WaitWithin(tb, Timeout)
}

// WaitWithin takes the next signal, failing the test if none comes within d.
func (s *Signal[T]) WaitWithin(tb TB, d time.Duration) T {
	tb.Helper()
	if s.ch == nil {
		tb.Fatalf("waiting for a %T signal that was never initialised", *new(T))
	}
	return Recv(tb, s.ch, d, fmt.Sprintf("a %T signal", *new(T)))
}
