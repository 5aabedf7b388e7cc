package daemon

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/store"
)

// writeProbeInterval is how often the daemon asks the database whether it would take a write.
// /readyz answers from what the last probe and the last write said, so it turns within about
// this long of a failover or a switch to read-only, without a query per readiness request
// (however many probes, scrapers and operators ask); one cheap read a second is nothing to the
// database.
const writeProbeInterval = time.Second

// busyPoolWait is how long the probe waits for a pooled connection before it takes the pool
// for busy and asks on a session of its own.
const busyPoolWait = time.Second

// writeProbeTimeout bounds one probe: longer than the interval, so a loaded machine is not
// mistaken for a database gone (a busy pool is busyPoolWait's); one that refuses connections
// answers at once anyway.
const writeProbeTimeout = 5 * time.Second

// probeWrites runs probeOnce every writeProbeInterval until ctx ends. A database that does
// not answer within writeProbeTimeout is reported unreachable.
func (d *Daemon) probeWrites(ctx context.Context) {
	t := time.NewTicker(writeProbeInterval)
	defer t.Stop()
	for {
		pctx, cancel := context.WithTimeout(ctx, writeProbeTimeout)
		d.probeOnce(pctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// probeOnce probes on a pooled connection while the database takes writes (on one of its own
// while every pooled one is busy), and reports what it saw. While it is read-only or a standby
// it probes on a connection of its own instead: a
// pooled session keeps the read-only setting it was opened with after the database takes
// writes again. Once the fresh session can write, the pools (and the direct one) drop their
// sessions (pgxpool's Reset, meant for a server state change), so every one reconnects into the writable state and
// collection resumes by itself. While a lack of space stands, a read proves nothing: it makes
// the space probe's write instead, whose success alone ends that state.
func (d *Daemon) probeOnce(ctx context.Context) {
	// A probe the stop cut short (cancelled, not timed out) proves nothing: reported, it logged
	// the database as refusing writes (an error) whenever a shutdown landed mid-probe.
	observe := func(cause store.WriteCause, detail string) {
		if !errors.Is(ctx.Err(), context.Canceled) {
			d.writes.ObserveProbe(cause, detail)
		}
	}
	c := d.writes.State().Cause
	if c != store.CauseReadOnly && c != store.CauseStandby {
		if d.writes.SpaceShort() {
			d.probeSpace(ctx)
			return
		}
		actx, cancel := context.WithTimeout(ctx, busyPoolWait)
		pc, err := d.pool.Acquire(actx)
		cancel()
		if err == nil {
			cause, detail := store.ProbeWritable(ctx, pc)
			pc.Release()
			observe(cause, detail)
			return
		}
		if store.NoSessionToSpare(err) {
			return // the pool could not add a session; the ones it has may well write
		}
		if ctx.Err() != nil || !errors.Is(err, context.DeadlineExceeded) {
			observe(cmp.Or(store.RefusedCause(err), store.CauseUnreachable), fmt.Sprintf("probe: %v", err))
			return
		}
		// Every pooled connection is in use (an export's snapshot, reads, write-backs): waiting
		// on would time the probe out and report the database unreachable, holding every
		// provider call, when it is only busy. The probe opens a session of its own instead.
	}
	conn, err := pgx.ConnectConfig(ctx, d.pool.Config().ConnConfig.Copy())
	if err != nil {
		if store.NoSessionToSpare(err) {
			return // the server has no session to spare: it answers, nothing is learnt
		}
		if c != store.CauseReadOnly && c != store.CauseStandby {
			observe(cmp.Or(store.RefusedCause(err), store.CauseUnreachable), fmt.Sprintf("probe: %v", err))
			return
		}
		observe(store.ProbeWritable(ctx, d.pool)) // the pool's connection error names it best
		return
	}
	defer func() { _ = conn.Close(context.WithoutCancel(ctx)) }()
	observe(store.ProbeWritable(ctx, conn))
}

// probeSpace runs store.ProbeSpace. A failure that is no refusal (the role may neither create
// a table nor a temporary one) leaves the state as it is, said once per spell, for up to
// spaceBlindFor: then the lack ends anyway (a warning says so), since nothing else would end
// it and collection would stay held for good; if it still stands, the next write refused for
// it starts a new spell.
//
// It ends the lack after spaceQuiet successes in a row, and after twice as many (up to
// spaceQuietMax) each time the lack came back within spaceRelapse of ending: a disk with a
// little room that write-backs fill again at once settles refused instead of flapping.
func (d *Daemon) probeSpace(ctx context.Context) {
	if !d.space.spell {
		d.space.spell, d.space.ok = true, 0
		if !d.space.ended.IsZero() && time.Since(d.space.ended) < spaceRelapse {
			d.space.need = min(2*d.space.need, spaceQuietMax)
		} else {
			d.space.need = spaceQuiet
		}
	}
	probe := d.space.probe
	if probe == nil {
		probe = func(ctx context.Context) error { return store.ProbeSpace(ctx, d.pool, store.SpaceMargin) }
	}
	err := probe(ctx)
	if err == nil {
		d.space.blind = time.Time{}
		if d.space.ok++; d.space.ok >= d.space.need {
			d.space.spell, d.space.ended = false, time.Now()
			d.writes.ObserveSpace(nil)
		}
		return
	}
	d.space.ok = 0
	if store.NoSessionToSpare(err) {
		return // no session for the probe: it did not run, and it is no failure of its own
	}
	d.writes.ObserveSpace(err)
	if store.RefusedCause(err) != "" || ctx.Err() != nil {
		d.spaceProbeWarned, d.space.blind = false, time.Time{}
		return
	}
	blindFor := cmp.Or(d.space.blindFor, spaceBlindFor)
	if d.space.blind.IsZero() {
		d.space.blind = time.Now()
	}
	if !d.spaceProbeWarned {
		d.spaceProbeWarned = true
		d.log.Error("the space probe failed for another reason than a lack of space; the database counts as refusing writes until it succeeds, or for "+blindFor.String()+" at most",
			zap.Error(err))
	}
	if time.Since(d.space.blind) >= blindFor {
		d.log.Warn("the space probe could not run for "+blindFor.String()+"; ending the lack of space unproven: writes resume, and a write refused for it again starts a new spell",
			zap.Error(err))
		d.space.spell, d.space.ended, d.space.blind, d.spaceProbeWarned = false, time.Now(), time.Time{}, false
		d.writes.ObserveSpace(nil)
	}
}

// The space probe's hysteresis (probeSpace), and how long a probe that cannot run holds the
// lack.
const (
	spaceQuiet    = 3
	spaceQuietMax = 60
	spaceRelapse  = 10 * time.Minute
	spaceBlindFor = 10 * time.Minute
)

// writeReports is how a maintenance loop tells the write health that the database refused
// one of its writes. Only refusals: a pass that wrote nothing proves nothing by succeeding.
type writeReports struct{ h *store.WriteHealth }

func (w writeReports) refused(err error) {
	if store.RefusedByServer(err) {
		w.h.Observe(err)
	}
}

// writesChanged exports a change of the database's write state and logs it once.
func (d *Daemon) writesChanged(s store.WriteState) {
	// Sessions opened while the database was read-only (or a standby) keep that setting:
	// dropped whoever saw writes come back first (the probe, a write on a session opened
	// since), before the change is told. database.direct_url's too: a read-only one would fail
	// the write path's partition creation and turn the daemon not ready again.
	if s.Writable && (d.refusedBy == store.CauseReadOnly || d.refusedBy == store.CauseStandby) {
		d.pool.Reset()
		if p := d.cfg.DirectPool; p != nil && p != d.pool {
			p.Reset()
		}
	}
	refusedSince := d.refusedSince
	d.refusedBy = s.Cause
	if s.Writable {
		d.refusedSince = time.Time{}
	} else if refusedSince.IsZero() {
		d.refusedSince = s.Since
	}
	if s.Writable {
		d.metrics.DatabaseWritable.Set(1)
	} else {
		d.metrics.DatabaseWritable.Set(0)
	}
	for _, c := range store.WriteCauses {
		v := 0.0
		if c == s.Cause {
			v = 1
		}
		d.metrics.WriteRefused.WithLabelValues(string(c)).Set(v)
	}
	switch {
	case s.Since.IsZero(): // the initial state, not a change
	case s.Writable:
		refused := zap.Skip()
		if !refusedSince.IsZero() {
			refused = zap.Duration("refused_for_seconds", s.Since.Sub(refusedSince))
		}
		d.log.Info("the database takes writes again; collection resumes", refused)
	default:
		d.log.Error("the database refuses writes: no item is claimed, so no provider request is sent, until it takes them again; "+
			"results already fetched are written if it does within their lease",
			zap.String("cause", string(s.Cause)), zap.String("detail", s.Detail))
	}
}
