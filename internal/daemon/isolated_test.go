package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	zapobserver "go.uber.org/zap/zaptest/observer"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/telemetry"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

// A maintenance job that panics is logged, counted and started again; the process lives on,
// and a job that returns (ctx ended) is not restarted.
func TestAPanickingJobIsStartedAgain(t *testing.T) {
	m := telemetry.NewMetrics()
	core, logs := zapobserver.New(zapcore.ErrorLevel)
	starts := make(chan int, 3)
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		isolated(ctx, "export", func(ctx context.Context) {
			n++
			starts <- n
			if n == 1 {
				var day []string
				_ = day[3] // a bug's index out of range
			}
			<-ctx.Done()
		}, time.Millisecond, m, zap.New(core))
	}()
	testkit.Recv(t, starts, testkit.Timeout, "the first start")
	testkit.Recv(t, starts, testkit.Timeout, "the start after the panic")
	cancel()
	testkit.Recv(t, done, testkit.Timeout, "the job to end with its context")
	if got := testutil.ToFloat64(m.LoopErrors.WithLabelValues("export")); got != 1 {
		t.Fatalf("loop errors for export: %v, want 1", got)
	}
	if l := logs.FilterMessage("a maintenance job panicked; it runs again later, collection goes on").All(); len(l) != 1 || l[0].ContextMap()["job"] != "export" {
		t.Fatalf("panic logs: %+v", l)
	}
	if len(starts) != 0 {
		t.Fatal("the job was started again after its context ended")
	}
}

// panicOnce is a maintenance job whose first run panics; each start is sent on started.
type panicOnce struct {
	started chan int
	n       int
}

func (p *panicOnce) Start(ctx context.Context) {
	p.n++
	p.started <- p.n
	if p.n == 1 {
		panic("a bug met by some day's data")
	}
	<-ctx.Done()
}

// In a running daemon, a maintenance job's panic is survived: the job starts again, and the
// daemon still collects and shuts down cleanly. Every real job has a name of its own.
func TestTheDaemonOutlivesAPanickingJob(t *testing.T) {
	e := newEnv(t, 5, neoplesim.Options{})
	e.track(t, 0, 5, tiers.Hot, 0)
	cfg := testConfig()
	cfg.RelayRestart = time.Millisecond
	cfg.signals.passed.Init(t)
	d := e.build(t, cfg, zap.NewNop())
	job := &panicOnce{started: make(chan int, 2)}
	d.extra = []service{job}
	for _, s := range d.maintenance()[:len(d.maintenance())-1] {
		if jobName(s) == "maintenance" {
			t.Errorf("maintenance job %T has no name of its own", s)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	testkit.Recv(t, job.started, testkit.Timeout, "the job's first start")
	testkit.Recv(t, job.started, testkit.Timeout, "the job's start after its panic")
	waitCollected(t, cfg, e.pool, 5)
	cancel()
	if err := testkit.Recv(t, done, testkit.Timeout, "the daemon to stop"); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if got := testutil.ToFloat64(d.metrics.LoopErrors.WithLabelValues("maintenance")); got != 1 {
		t.Fatalf("loop errors for the job: %v, want 1", got)
	}
}
