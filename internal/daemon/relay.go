package daemon

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/backoff"
	"github.com/duecollector/duecollector/internal/outbox"
)

// runRelay runs the outbox relay until ctx ends. One that stops on an error retrying cannot
// fix (a topic it may not create, refused authorization, a bug's panic) is run again every
// RelayRestart: a standalone relay-outbox exits and its supervisor restarts it, but nothing
// restarts a daemon whose /healthz is fine, and the topic may be created, or the ACL granted,
// minutes after it started. Until then /readyz and collector_relay_up say it is stopped.
func (d *Daemon) runRelay(ctx context.Context) {
	for {
		err := d.relay.Run(ctx)
		if err == nil || ctx.Err() != nil {
			return
		}
		d.log.Info("outbox relay stopped; running it again later", zap.Duration("in_seconds", d.cfg.RelayRestart))
		if !backoff.Sleep(ctx, d.cfg.RelayRestart) {
			return
		}
	}
}

// flushOutbox publishes what the last write-backs produced and says what it left. A pass that
// could not take its lanes (given back after a failed send, free only once that send can no
// longer land) publishes nothing without an error: "flushed" would then be a false all-clear.
// What it left is counted in lanes no relay holds: other daemons go on publishing theirs.
func (d *Daemon) flushOutbox(ctx context.Context) {
	res, err := d.relay.RunOnce(ctx)
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second) // ctx may be what ended the pass
	left, lerr := outbox.Unheld(cctx, d.pool)
	cancel()
	fields := []zap.Field{zap.Int64("published", res.Published)}
	if lerr == nil {
		fields = append(fields, zap.Int64("pending", left))
	}
	switch {
	case err != nil:
		d.log.Warn("final outbox flush incomplete; the rest is published by the next relay", append(fields, zap.Error(err))...)
	case left > 0:
		d.log.Warn("final outbox flush left events pending; the next relay publishes them", fields...)
	default:
		d.log.Info("outbox flushed", fields[0])
	}
}
