package telemetry

import (
	"errors"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
)

// A step failing every second logs its first failure, one line a minute while it lasts, and
// its end; a new streak starts over.
func TestStreakLogsAFailureOnceAMinute(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	s := &Streak{Log: zap.New(core), What: "provider health check failed"}
	t0 := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)
	for i := range 150 { // 2.5 minutes
		s.Failed(t0.Add(time.Duration(i)*time.Second), errors.New("connection refused"))
	}
	s.Ok(t0.Add(150 * time.Second))
	s.Ok(t0.Add(151 * time.Second))
	s.Failed(t0.Add(152*time.Second), errors.New("connection refused"))
	var got []string
	for _, e := range logs.All() {
		got = append(got, e.Level.String()+" "+e.Message)
	}
	want := []string{
		"warn provider health check failed; retrying",
		"warn provider health check failed; still retrying",
		"warn provider health check failed; still retrying",
		"info provider health check failed until now; works again",
		"warn provider health check failed; retrying",
	}
	if len(got) != len(want) {
		t.Fatalf("logged %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("line %d: %q, want %q (all: %q)", i, got[i], want[i], got)
		}
	}
	if n := logs.All()[3].ContextMap()["failures"]; n != int64(150) {
		t.Fatalf("the end of the streak counts %v failures, want 150", n)
	}
}
