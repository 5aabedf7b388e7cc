package dispatcher

import (
	"context"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/provider"
)

// gate reads the provider status; a status that may not dispatch pauses the pass, says why
// and is not an error.
func (d *Dispatcher) gate(ctx context.Context, sum *Summary) (paused bool, err error) {
	row, err := provider.ReadStatus(ctx, d.pool, d.cfg.Provider)
	if err != nil {
		return false, err
	}
	if d.cfg.Recover != nil && row.OverrideStatus == "" && row.Status != provider.Healthy {
		if err := d.cfg.Recover(ctx); err != nil {
			d.log.Warn("provider health step failed; the status stands", zap.String("provider", d.cfg.Provider), zap.Error(err))
		} else if row, err = provider.ReadStatus(ctx, d.pool, d.cfg.Provider); err != nil {
			return false, err
		}
	}
	st, reason, since := row.Effective()
	if st.CanDispatch() {
		d.pause.resumed(d.log, d.cfg.Provider, time.Now())
		return false, nil
	}
	sum.Paused, sum.Status, sum.StatusReason, sum.StatusSince = true, st, reason, since
	sum.Stop = StopPaused
	d.pause.paused(d.log, d.cfg.Provider, st, reason, since, time.Now())
	return true, nil
}

// pauseSummaryEvery bounds the lines a long pause writes: one when it starts, one when it
// ends, and at most one summary this often in between, however often the loop checks.
const pauseSummaryEvery = time.Minute

// pauseLog turns a paused pass per check into those few lines.
type pauseLog struct {
	mu          sync.Mutex
	on          bool
	started     time.Time
	lastLine    time.Time
	skipped     int // paused passes since the last line
	lastStatus  provider.Status
	lastSinceAt time.Time
}

// paused and resumed take the time from the caller, so that the minute between summaries can
// be tested without waiting for it.
func (p *pauseLog) paused(log *zap.Logger, prov string, st provider.Status, reason string, since, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fields := []zap.Field{zap.String("provider", prov), zap.String("status", string(st)),
		zap.Time("since", since), zap.String("reason", reason)}
	switch {
	case !p.on || st != p.lastStatus || !since.Equal(p.lastSinceAt):
		if !p.on {
			p.started = now
		}
		p.on, p.lastLine, p.skipped, p.lastStatus, p.lastSinceAt = true, now, 0, st, since
		log.Info("collection paused", fields...)
	case now.Sub(p.lastLine) >= pauseSummaryEvery:
		log.Info("collection still paused", append(fields, zap.Int("paused_passes", p.skipped+1),
			zap.Float64("paused_seconds", now.Sub(p.started).Seconds()))...)
		p.lastLine, p.skipped = now, 0
	default:
		p.skipped++
	}
}

func (p *pauseLog) resumed(log *zap.Logger, prov string, now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.on {
		return
	}
	p.on = false
	log.Info("collection resumed", zap.String("provider", prov), zap.Float64("paused_seconds", now.Sub(p.started).Seconds()))
}
