package dispatcher

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/tiers"
)

// Failed items are one warning per outcome, counting them and naming a few, at once for the
// first pass with failures and then at most once a minute, not a line per item: a provider
// failing a share of calls for hours made thousands a minute.
func TestAPassLogsItsFailuresOnceByOutcome(t *testing.T) {
	t.Parallel()
	const n = 20
	e := setup(t, n, tiers.Active, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == provider.EndpointAuction {
				w.WriteHeader(http.StatusInternalServerError)
				_, _ = w.Write([]byte(`{"error":{"status":500,"code":"DNF999","message":"SYSTEM_ERROR"}}`))
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	core, logs := observer.New(zapcore.InfoLevel)
	d := e.dispatcher(t, Config{Concurrency: 2}, zap.New(core))
	s, err := d.RunOnce(context.Background())
	if err != nil || s.Failed != n {
		t.Fatalf("pass %s, %v; want every item failed", s, err)
	}
	lines := logs.FilterLevelExact(zapcore.WarnLevel).All()
	if len(lines) != 1 {
		t.Fatalf("%d warnings for %d failed items, want one: %v", len(lines), n, lines)
	}
	// The next pass within the minute (a daemon passes every second or so) adds to the next line.
	e.due(t)
	if s, err := d.RunOnce(context.Background()); err != nil || s.Failed != n {
		t.Fatalf("second pass %s, %v; want every item failed again", s, err)
	}
	if got := logs.FilterLevelExact(zapcore.WarnLevel).Len(); got != 1 {
		t.Fatalf("%d warnings after a second failing pass within the minute, want still 1", got)
	}
	f := lines[0].ContextMap()
	if f["outcome"] != "transient" || f["items"] != int64(n) || len(f["item_ids"].([]any)) != failureExamples ||
		f["max_failure_streak"] != int32(1) || f["first_error"] == nil {
		t.Fatalf("the pass's failure line: %v; want outcome transient, %d items, %d ids, streak 1 and the first error", f, n, failureExamples)
	}
}

// A bug every item meets logs its stack once, not once per item; each item still fails alone.
func TestAPanicSiteLogsItsStackOnce(t *testing.T) {
	t.Parallel()
	e := setup(t, 6, tiers.Active, nil)
	f := &panicking{Fetcher: e.client, poisonAll: true}
	core, logs := observer.New(zapcore.InfoLevel)
	d, err := New(e.pool, f, configured(e.pool, Config{Concurrency: 2}), zap.New(core))
	if err != nil {
		t.Fatal(err)
	}
	if s, err := d.RunOnce(context.Background()); err != nil || s.Failed != 6 {
		t.Fatalf("pass %s, %v; want every item failed alone", s, err)
	}
	stacks := slices.DeleteFunc(logs.FilterLevelExact(zapcore.ErrorLevel).All(), func(l observer.LoggedEntry) bool {
		_, ok := l.ContextMap()["stack"]
		return !ok
	})
	if len(stacks) != 1 || f.calls.Load() != 6 {
		t.Fatalf("%d stacks logged for %d panics, want 1", len(stacks), f.calls.Load())
	}
}
