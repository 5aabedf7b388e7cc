package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/backoff"
)

// ListenConfig is where and what Listen listens on.
type ListenConfig struct {
	Pool *pgxpool.Pool
	// DirectURL, when set, gives LISTEN its own session (database.direct_url, for pools behind
	// a transaction-pooling PgBouncer); otherwise a pool connection is taken out for it.
	DirectURL string
	// Channel is a constant, lower-case identifier, sent unquoted as operators see it in
	// pg_stat_activity.
	Channel string
	Retry   backoff.Policy
	// Restored, when set, is told once LISTEN is in place again after failures (how many): an
	// outage's "interrupted" line gets its end.
	Restored func(failures int)
}

// Listen turns notifications on cfg.Channel into wake-ups until ctx ends. It signals wake
// without blocking once LISTEN is in place (catching up on whatever changed while it was not
// listening) and after every notification. Each failed attempt is reported to interrupted with
// the number of consecutive failures (1 = a new outage) and retried after cfg.Retry's delay;
// callers keep a timed fallback, since correctness never depends on notifications.
func Listen(ctx context.Context, cfg ListenConfig, wake chan<- struct{}, interrupted func(err error, failures int)) {
	failures := 0
	for ctx.Err() == nil {
		listened, err := listenOnce(ctx, cfg, wake, func() {
			if failures > 0 && cfg.Restored != nil {
				cfg.Restored(failures)
			}
			failures = 0
		})
		if ctx.Err() != nil {
			return
		}
		if listened {
			failures = 0
		}
		failures++
		interrupted(err, failures)
		backoff.Sleep(ctx, cfg.Retry.Delay(failures))
	}
}

// listenOnce holds one session LISTENing until it fails; listened reports whether LISTEN itself
// succeeded, and listening is called once it has.
func listenOnce(ctx context.Context, cfg ListenConfig, wake chan<- struct{}, listening func()) (listened bool, err error) {
	var pc *pgx.Conn
	if cfg.DirectURL != "" {
		if pc, err = connect(ctx, cfg.DirectURL); err != nil {
			return false, fmt.Errorf("connect to database.direct_url for LISTEN %s: %w", cfg.Channel, err)
		}
	} else {
		conn, err := cfg.Pool.Acquire(ctx)
		if err != nil {
			return false, fmt.Errorf("acquire connection for LISTEN %s: %w", cfg.Channel, err)
		}
		// A LISTENing connection must not go back to the pool (it would keep collecting
		// notifications), so it is taken out and closed.
		pc = conn.Hijack()
	}
	defer pc.Close(context.WithoutCancel(ctx))
	if _, err := pc.Exec(ctx, "LISTEN "+cfg.Channel); err != nil {
		return false, fmt.Errorf("LISTEN %s: %w", cfg.Channel, err)
	}
	listening()
	for {
		select {
		case wake <- struct{}{}:
		default:
		}
		if _, err := pc.WaitForNotification(ctx); err != nil {
			return true, fmt.Errorf("wait for %s notification: %w", cfg.Channel, err)
		}
	}
}
