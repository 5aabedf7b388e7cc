package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/provider/neoplesim"
	"github.com/duecollector/duecollector/internal/testkit"
	"github.com/duecollector/duecollector/internal/tiers"
)

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
