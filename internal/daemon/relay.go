package daemon

import (
	"context"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/backoff"
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
