package testkit

import (
	"fmt"
	"testing"
	"time"
)

// fakeTB records failures instead of stopping the calling goroutine.
type fakeTB struct{ errs, fatals []string }

func (f *fakeTB) Helper()                   {}
func (f *fakeTB) Errorf(s string, a ...any) { f.errs = append(f.errs, fmt.Sprintf(s, a...)) }
func (f *fakeTB) Fatalf(s string, a ...any) { f.fatals = append(f.fatals, fmt.Sprintf(s, a...)) }

func TestEventuallyPassesOnceTheConditionHolds(t *testing.T) {
	n := 0
	Eventually(t, Timeout, "the third poll", func() bool { n++; return n == 3 })
	if n != 3 {
		t.Fatalf("polled %d times, want 3", n)
	}
}

func TestEventuallyFailsAtTheDeadline(t *testing.T) {
	var f fakeTB
	Eventually(&f, time.Millisecond, "never", func() bool { return len(f.fatals) > 0 })
	if len(f.fatals) != 1 {
		t.Fatalf("fatals %q, want one", f.fatals)
	}
}

func TestRecvIsBounded(t *testing.T) {
	var f fakeTB
	Recv(&f, make(chan int), time.Millisecond, "nothing")
	if len(f.fatals) != 1 {
		t.Fatalf("fatals %q, want one", f.fatals)
	}
	ch := make(chan int, 1)
	ch <- 7
	if v := Recv(t, ch, Timeout, "seven"); v != 7 {
		t.Fatalf("got %d", v)
	}
	close(ch)
	if v := Recv(t, ch, Timeout, "a closed channel"); v != 0 {
		t.Fatalf("a closed channel gave %d", v)
	}
}
