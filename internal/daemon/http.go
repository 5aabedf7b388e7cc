package daemon

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
)

// handler serves /metrics, /healthz (the process is up and not wedged) and /readyz (it can do
// its work), and the console at / when one is configured. A database that refuses writes makes
// the daemon not ready but leaves it live: a restart would not help, and it resumes by itself
// when writes come back.
func (d *Daemon) handler() http.Handler {
	mux := http.NewServeMux()
	if d.cfg.Console != nil {
		mux.Handle("/", d.cfg.Console)
	}
	mux.Handle("GET /metrics", d.metrics.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if msg := d.wedged(r.Context()); msg != "" {
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
		defer cancel()
		if err := d.pool.Ping(ctx); err != nil {
			http.Error(w, "database unreachable: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		if s := d.writes.State(); !s.Writable {
			http.Error(w, fmt.Sprintf("database refuses writes (%s) since %s: %s", s.Cause, s.Since.UTC().Format(time.RFC3339), s.Detail),
				http.StatusServiceUnavailable)
			return
		}
		if err := store.CheckCurrent(ctx, d.pool); err != nil {
			msg := err.Error()
			if _, ok := errors.AsType[*store.SchemaBehindError](err); ok && d.cfg.SchemaHint != "" {
				msg += "; " + d.cfg.SchemaHint
			}
			http.Error(w, msg, http.StatusServiceUnavailable)
			return
		}
		if d.relay != nil {
			if up, reason := d.relay.Health(); !up {
				http.Error(w, "outbox relay stopped: "+reason, http.StatusServiceUnavailable)
				return
			}
		}
		if r := d.collect.refused.Load(); r != nil {
			http.Error(w, fmt.Sprintf("collection stopped: the provider refuses the market key (%s) since %s, re-checked every %s: %s",
				provider.WorkloadMarket.KeyEnv(), r.since.UTC().Format(time.RFC3339), d.cfg.KeyRecheck, r.reason), http.StatusServiceUnavailable)
			return
		}
		if m := d.collect.misdirected.Load(); m != nil {
			http.Error(w, fmt.Sprintf("collection stopped: every pass meets an answer that is not the Neople API's at provider.base_url, or a gateway error code not in its documented table, since %s (retried with back-off): %s",
				m.since.UTC().Format(time.RFC3339), m.reason), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ready\n"))
	})
	return mux
}

// wedged says why the process should be restarted, "" when it should not: a collection batch
// has had no provider call finish for the renewal cap while the database answers and takes
// writes (then nothing outside the process holds it: a restart frees its items, already left
// to lapse, and its share of the key's budget, which its heartbeat would otherwise keep).
func (d *Daemon) wedged(ctx context.Context) string {
	if !d.collect.disp.Stuck() || !d.writes.State().Writable {
		return ""
	}
	if d.share != nil && d.share.CooldownRemaining() > 0 {
		return "" // the batch's calls wait out the key's cool-down (up to provider.MaxRetryAfterDefault, and renewed)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if d.pool.Ping(ctx) != nil {
		return "" // the database's fault, which /readyz reports; a restart would not help
	}
	return "wedged: a collection batch has had no provider call finish for its leases' renewal cap, with the database up"
}
