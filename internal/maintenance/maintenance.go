// Package maintenance is the one lifecycle of a background job, in the daemon and in every
// command that runs one (River's internal/maintenance): the job runs until its context ends,
// and a panic in it (a bug some day's data meets) is logged with its stack, counted, and the
// job started again after a pause, instead of killing the process and collection with it:
// restarted, the process would meet the same data and die again.
package maintenance

import (
	"cmp"
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/backoff"
)

// RestartDefault is how long a job that panicked waits before it starts again.
const RestartDefault = time.Minute

// Runner runs jobs.
type Runner struct {
	Restart time.Duration          // 0 = RestartDefault
	Panics  *prometheus.CounterVec // counted by the job's name (label "loop"); nil = not counted
	Log     *zap.Logger            // nil = not logged
}

// Run runs job until ctx ends, starting it again Restart after each panic. A job that returns
// while ctx lives is done.
func (r Runner) Run(ctx context.Context, name string, job func(context.Context)) {
	for r.panicked(ctx, name, job) && ctx.Err() == nil && backoff.Sleep(ctx, cmp.Or(r.Restart, RestartDefault)) {
		// panicked: started again after Restart
	}
}

// panicked runs job and reports whether it ended in a panic, which it logs and counts.
func (r Runner) panicked(ctx context.Context, name string, job func(context.Context)) (p bool) {
	defer func() {
		if v := recover(); v != nil {
			p = true
			if r.Panics != nil {
				r.Panics.WithLabelValues(name).Inc()
			}
			if r.Log != nil {
				r.Log.Error("a background job panicked; it runs again later, the process and collection go on",
					zap.String("job", name), zap.String("panic", fmt.Sprint(v)), zap.Stack("stack"))
			}
		}
	}()
	job(ctx)
	return false
}
