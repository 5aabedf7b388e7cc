package testsignal

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

func TestSignalOffIsANoOp(t *testing.T) {
	var s Signal[int]
	s.Signal(1)
	var nilSig *Signal[int]
	nilSig.Signal(1)
}

func TestSignalDeliversAndFailsWhenDropped(t *testing.T) {
	var f fakeTB
	var s Signal[int]
	s.Init(&f)
	s.Signal(42)
	if v := s.Wait(t); v != 42 {
		t.Fatalf("got %d", v)
	}
	for i := 0; i <= buffer; i++ {
		s.Signal(i)
	}
	if len(f.errs) != 1 {
		t.Fatalf("errors %q, want one for the dropped signal", f.errs)
	}
}

func TestWaitOnAnUninitialisedSignalFails(t *testing.T) {
	var f fakeTB
	var s Signal[int]
	s.WaitWithin(&f, time.Millisecond)
	if len(f.fatals) == 0 {
		t.Fatal("no failure")
	}
}
