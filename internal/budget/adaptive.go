package budget

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"
)

// LearnedShare is the share of the configured budget the provider has been found to allow:
// the learned rate over the ceiling, 1 when nothing was learned (a slow start's ramp is not a
// finding) or learning is off.
func (s *Share) LearnedShare() float64 {
	st := s.Stats()
	if st.SlowStart {
		return 1
	}
	return learnedShare(st.ClusterRate, st.Ceiling)
}

// ReadLearnedShare is LearnedShare as the database has it, for processes without a Share.
func ReadLearnedShare(ctx context.Context, pool *pgxpool.Pool, cfg Config) (float64, error) {
	if !cfg.Adaptive {
		return 1, nil
	}
	var learned float64
	var slow bool
	err := pool.QueryRow(ctx, `SELECT rate, slow_start FROM budget_rates WHERE key_label = $1`, cfg.KeyLabel).Scan(&learned, &slow)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 1, nil
	case err != nil:
		return 0, fmt.Errorf("read the learned budget of %s: %w", cfg.KeyLabel, err)
	case slow:
		return 1, nil
	}
	return learnedShare(learned, cfg.ceiling()), nil
}

// sharedNow is the time the key's shared row (budget_rates) is stamped and compared with: the
// database's, which every process shares. A process whose clock runs ahead would otherwise
// stamp the row in the others' future, and they could neither raise the rate nor cut it until
// their clocks caught up, long after that process was fixed or gone. A test's clock that
// moves by itself stands in for it ($10, stamp).
const sharedNow = `coalesce($10::timestamptz, now())`

// sharedClock is a Clock that also stands in for the database's in the shared row's statements:
// a test's clock, which moves only when the test says so.
type sharedClock interface{ sharesRowTime() }

// stamp is $10 of the shared row's statements: nil (the database's clock) unless the clock is
// a sharedClock.
func (s *Share) stamp(now time.Time) any {
	if _, ok := s.clock.(sharedClock); ok {
		return now
	}
	return nil
}

func learnedShare(rate, ceiling float64) float64 {
	if !(ceiling > 0) {
		return 1
	}
	return math.Min(rate/ceiling, 1)
}

// cut lowers the key's cluster rate multiplicatively, once per hold across the cluster.
func (s *Share) cut(ctx context.Context, reason string) {
	s.mu.Lock()
	now := s.clock.Now()
	if now.Sub(s.lastCut) < s.hold() {
		s.mu.Unlock()
		return
	}
	s.lastCut = now
	local, slow := s.rate(), s.slowStart
	s.mu.Unlock()
	// A slow start's ramp is cut deeper (SlowStartCut), once: the answer ends it. Without a
	// row yet (no heartbeat has written one) the process's own rate stands for the cluster's.
	var rate, from float64
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	err := s.pool.QueryRow(cctx, strings.ReplaceAll(`
		INSERT INTO budget_rates AS b (key_label, rate, cut_from, cut_at, changed_at, reason)
		VALUES ($1, greatest($3::float8, $7::float8 * CASE WHEN $8::bool THEN $9::float8 ELSE $4::float8 END), $7, $NOW, $NOW, $5)
		ON CONFLICT (key_label) DO UPDATE
		SET rate = greatest($3::float8, least(b.rate, $2::float8) * CASE WHEN b.slow_start THEN $9::float8 ELSE $4::float8 END),
		    cut_from = least(b.rate, $2::float8), cut_at = $NOW, changed_at = $NOW, reason = $5, slow_start = false
		WHERE b.cut_at IS NULL OR b.cut_at <= $NOW - $6 * interval '1 millisecond'
		RETURNING rate, cut_from`, "$NOW", sharedNow),
		s.cfg.KeyLabel, s.total(), s.cfg.MinRate, s.cfg.Decrease, reason, s.hold().Milliseconds(),
		local, slow, SlowStartCut, s.stamp(now)).Scan(&rate, &from)
	if errors.Is(err, pgx.ErrNoRows) {
		return // another process cut within the hold; our heartbeat brings its rate
	}
	if err != nil {
		s.log.Warn("could not share the rate cut; cutting locally", zap.String("key", s.cfg.KeyLabel), zap.Error(err))
		f := s.cfg.Decrease
		if slow {
			f = SlowStartCut
		}
		rate, from = max(s.cfg.MinRate, local*f), local
	}
	s.mu.Lock()
	s.learned, s.slowStart = rate, false
	s.cuts++
	s.apply()
	s.mu.Unlock()
	msg := "provider rate limit: cluster rate cut"
	if slow {
		msg = "provider rate limit: slow start ended, cluster rate cut"
	}
	if rate == from {
		// At the floor (MinRate) every hold's answer "cut" it to itself: nothing to tell.
		return
	}
	s.log.Warn(msg, zap.String("key", s.cfg.KeyLabel), zap.Float64("from", from), zap.Float64("to", rate))
}

// Probe is what one adaptive heartbeat read: the key's cluster rate, whether it is still a
// slow start's ramp, and whether this process had used its share since the heartbeat before.
type Probe struct {
	Rate      float64
	SlowStart bool
	Busy      bool
}

// startRate is where a slow start begins: SlowStartShare of the ceiling, at least MinRate.
func (s *Share) startRate() float64 {
	return min(s.total(), max(s.cfg.MinRate, s.cfg.SlowStartShare*s.total()))
}

// busyShare: a heartbeat in which a process sent at least this share of what its share allowed
// counts as using the rate, so a slow start may double it. A rate the demand does not fill
// says nothing about the provider and is not raised.
const busyShare = 0.5

// probe reads the key's learned rate and moves it (once per heartbeat across the cluster,
// whoever's heartbeat comes first):
//   - no row yet: the ceiling, or with slow start on the start rate, marked as slow start;
//   - in slow start, when this process used its share (busy): doubled per second since the last
//     step (the exponent capped at a heartbeat, and at one second), up to the ceiling, where
//     the slow start ends with nothing to learn;
//   - after a cut to below half the rate it started from (the cut that ends a slow start), when
//     this process was held back by the budget: doubled per second, as in slow start, up to that
//     half, the rate the ramp had passed before the refusal;
//   - otherwise, when this process was held back by the budget and no cut happened for a
//     heartbeat: one additive step toward the ceiling.
//
// It returns the rate and whether it is still a slow start.
func (s *Share) probe(ctx context.Context, now time.Time, held, busy bool) (float64, bool, error) {
	ss := s.cfg.SlowStart
	growCap := min(s.cfg.Heartbeat, time.Second).Seconds()
	var rate float64
	var slow bool
	const (
		grown  = `b.rate * power(2::float8, least(extract(epoch FROM $NOW - b.changed_at)::float8, $9::float8))`
		ssStep = `(b.slow_start AND $6::bool AND $8::bool AND b.changed_at <= $NOW - $4::float8 * interval '0.5 millisecond')`
		// Recovery (TCP's slow start up to ssthresh): below half the rate the last cut started
		// from, which only SlowStartCut leaves, the rate doubles back to that half.
		rcStep = `(NOT b.slow_start AND $3::bool AND b.rate < 0.5 * b.cut_from AND b.changed_at <= $NOW - $4::float8 * interval '0.5 millisecond')`
		aiStep = `(NOT b.slow_start AND $3::bool AND b.changed_at <= $NOW - $4::float8 * interval '1 millisecond')`
	)
	err := s.pool.QueryRow(ctx, strings.ReplaceAll(`
		INSERT INTO budget_rates AS b (key_label, rate, slow_start, changed_at) VALUES ($1, CASE WHEN $6::bool THEN least($2::float8, $7::float8) ELSE $2::float8 END, $6::bool AND $7::float8 < $2::float8, $NOW)
		ON CONFLICT (key_label) DO UPDATE
		SET rate = CASE WHEN b.slow_start AND NOT $6::bool THEN $2::float8
		                WHEN `+ssStep+` THEN least($2::float8, `+grown+`)
		                WHEN `+rcStep+` THEN least($2::float8, 0.5 * b.cut_from, `+grown+`)
		                WHEN `+aiStep+` THEN least($2::float8, b.rate + $5::float8 * coalesce(b.cut_from, $2::float8))
		                ELSE least($2::float8, b.rate) END,
		    slow_start = b.slow_start AND $6::bool AND CASE WHEN `+ssStep+` THEN `+grown+` < $2::float8 ELSE b.rate < $2::float8 END,
		    changed_at = CASE WHEN `+ssStep+` OR `+rcStep+` OR `+aiStep+` THEN $NOW ELSE b.changed_at END
		RETURNING rate, slow_start`, "$NOW", sharedNow),
		s.cfg.KeyLabel, s.total(), held, s.cfg.Heartbeat.Milliseconds(), s.cfg.Increase*s.cfg.Heartbeat.Seconds(),
		ss, s.startRate(), busy, growCap, s.stamp(now)).Scan(&rate, &slow)
	if err != nil {
		return 0, false, fmt.Errorf("budget rate for %s: %w", s.cfg.KeyLabel, err)
	}
	return rate, slow, nil
}
