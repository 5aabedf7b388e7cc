// Package testsignal lets production code tell a test what it did (River's test signals), so
// tests wait for an event instead of sleeping or polling. A Signal's zero value is off and costs
// a nil check, which is why production code may hold one; the waiting helpers tests use besides
// it live in internal/testkit, which the shipped binary does not link.
package testsignal

import (
	"time"
)

// TB is the part of testing.TB a signal uses; production code imports this package without
// importing package testing.
type TB interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// Timeout bounds a Wait: long enough for a loaded 2-core machine, short of the 30-minute test
// timeout.
const Timeout = time.Minute

// buffer is how many signals may wait unread before one is dropped and the test fails.
const buffer = 4096

// Signal is one kind of event production code reports to a test. The zero value is off; Init
// turns it on. A signal that cannot be buffered fails the test instead of vanishing, so a test
// never waits for a signal that was silently lost.
type Signal[T any] struct {
	ch chan T
	tb TB
}

// Init turns the signal on for tb.
func (s *Signal[T]) Init(tb TB) {
	s.ch = make(chan T, buffer)
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
		s.tb.Errorf("test signal dropped: more than %d unread %T signals", buffer, v)
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
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case v := <-s.ch:
		return v
	case <-t.C:
		tb.Fatalf("timed out after %s waiting for a %T signal", d, *new(T))
	}
	var zero T
	return zero
}
