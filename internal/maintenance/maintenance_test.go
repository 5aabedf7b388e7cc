package maintenance_test

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/maintenance"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testkit"
)

// A job that panics is logged, counted and started again; the process lives on, and a job
// that returns (ctx ended) is not restarted.
func TestAPanickingJobIsStartedAgain(t *testing.T) {
	m := telemetry.NewMetrics()
	core, logs := zapobserver.New(zapcore.ErrorLevel)
	starts := make(chan int, 3)
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	done := make(chan struct{})
	r := maintenance.Runner{Restart: time.Millisecond, Panics: m.LoopErrors, Log: zap.New(core)}
	go func() {
		defer close(done)
		r.Run(ctx, "export", func(ctx context.Context) {
			n++
			starts <- n
			if n == 1 {
				var day []string
				_ = day[3] // a bug's index out of range
			}
			<-ctx.Done()
		})
	}()
	testkit.Recv(t, starts, testkit.Timeout, "the first start")
	testkit.Recv(t, starts, testkit.Timeout, "the start after the panic")
	cancel()
	testkit.Recv(t, done, testkit.Timeout, "the job to end with its context")
	if got := testutil.ToFloat64(m.LoopErrors.WithLabelValues("export")); got != 1 {
		t.Fatalf("loop errors for export: %v, want 1", got)
	}
	if l := logs.FilterMessage("a background job panicked; it runs again later, the process and collection go on").All(); len(l) != 1 || l[0].ContextMap()["job"] != "export" {
		t.Fatalf("panic logs: %+v", l)
	}
	if len(starts) != 0 {
		t.Fatal("the job was started again after its context ended")
	}
}

// A runner without a counter or a log (a command's own loops) still survives the panic.
func TestARunnerWithoutMetricsStillRestarts(t *testing.T) {
	starts := make(chan int, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	n := 0
	go maintenance.Runner{Restart: time.Millisecond}.Run(ctx, "refresh", func(ctx context.Context) {
		n++
		starts <- n
		if n == 1 {
			panic("a bug")
		}
		<-ctx.Done()
	})
	testkit.Recv(t, starts, testkit.Timeout, "the first start")
	testkit.Recv(t, starts, testkit.Timeout, "the start after the panic")
}
