package budget

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/config"
)

// LearnedShare is the share of the configured budget the provider has been found to allow:
// the learned rate over the ceiling, 1 when nothing was learned or learning is off.
func (s *Share) LearnedShare() float64 {
	st := s.Stats()
	return learnedShare(st.ClusterRate, st.Ceiling)
}

// ReadLearnedShare is LearnedShare as the database has it, for processes without a Share.
func ReadLearnedShare(ctx context.Context, pool *pgxpool.Pool, cfg Config) (float64, error) {
	if !cfg.Adaptive {
		return 1, nil
	}
	var learned float64
	err := pool.QueryRow(ctx, `SELECT rate FROM budget_rates WHERE key_label = $1`, cfg.KeyLabel).Scan(&learned)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 1, nil
	case err != nil:
		return 0, fmt.Errorf("read the learned budget of %s: %w", cfg.KeyLabel, err)
	}
	return learnedShare(learned, cfg.ceiling()), nil
}

func learnedShare(rate, ceiling float64) float64 {
	if !(ceiling > 0) {
		return 1
	}
	return math.Min(rate/ceiling, 1)
}

// Scale is limits shrunk to share f of themselves: what planning should assume once the
// provider turned out to allow only that share (per_minute at least 1).
func Scale(limits config.WorkloadLimits, f float64) config.WorkloadLimits {
	limits.Rate *= f
	limits.PerMinute = max(int(math.Round(float64(limits.PerMinute)*f)), 1)
	return limits
}

// cut lowers the key's cluster rate multiplicatively, once per hold across the cluster.
func (s *Share) cut(ctx context.Context, reason string) {
	s.mu.Lock()
	if time.Since(s.lastCut) < s.hold() {
		s.mu.Unlock()
		return
	}
	s.lastCut = time.Now()
	s.mu.Unlock()
	var rate, from float64
	err := s.pool.QueryRow(context.WithoutCancel(ctx), `
		INSERT INTO budget_rates AS b (key_label, rate, cut_from, cut_at, changed_at, reason)
		VALUES ($1, greatest($3::float8, $2::float8 * $4::float8), $2, now(), now(), $5)
		ON CONFLICT (key_label) DO UPDATE
		SET rate = greatest($3::float8, least(b.rate, $2::float8) * $4::float8), cut_from = least(b.rate, $2::float8),
		    cut_at = now(), changed_at = now(), reason = $5
		WHERE b.cut_at IS NULL OR b.cut_at <= now() - $6 * interval '1 millisecond'
		RETURNING rate, cut_from`,
		s.cfg.KeyLabel, s.total(), s.cfg.MinRate, s.cfg.Decrease, reason, s.hold().Milliseconds()).Scan(&rate, &from)
	if errors.Is(err, pgx.ErrNoRows) {
		return // another process cut within the hold; our heartbeat brings its rate
	}
	if err != nil {
		s.log.Warn("could not share the rate cut; cutting locally", zap.String("key", s.cfg.KeyLabel), zap.Error(err))
		s.mu.Lock()
		rate, from = max(s.cfg.MinRate, s.learned*s.cfg.Decrease), s.learned
		s.mu.Unlock()
	}
	s.mu.Lock()
	s.learned = rate
	s.cuts++
	s.apply()
	s.mu.Unlock()
	s.log.Warn("provider rate limit: cluster rate cut", zap.String("key", s.cfg.KeyLabel),
		zap.Float64("from", from), zap.Float64("to", rate))
}

// probe reads the key's learned rate and, when this process was held back by the budget and
// no cut happened for a heartbeat, raises it one step toward the ceiling (once per heartbeat
// across the cluster, whoever's heartbeat comes first).
func (s *Share) probe(ctx context.Context, held bool) (float64, error) {
	var rate float64
	err := s.pool.QueryRow(ctx, `
		INSERT INTO budget_rates AS b (key_label, rate) VALUES ($1, $2)
		ON CONFLICT (key_label) DO UPDATE
		SET rate = CASE WHEN $3::bool AND b.changed_at <= now() - $4::float8 * interval '1 millisecond'
		                THEN least($2::float8, b.rate + $5::float8 * coalesce(b.cut_from, $2::float8)) ELSE least($2::float8, b.rate) END,
		    changed_at = CASE WHEN $3::bool AND b.changed_at <= now() - $4::float8 * interval '1 millisecond'
		                      THEN now() ELSE b.changed_at END
		RETURNING rate`,
		s.cfg.KeyLabel, s.total(), held, s.cfg.Heartbeat.Milliseconds(), s.cfg.Increase*s.cfg.Heartbeat.Seconds()).Scan(&rate)
	if err != nil {
		return 0, fmt.Errorf("budget rate for %s: %w", s.cfg.KeyLabel, err)
	}
	return rate, nil
}
