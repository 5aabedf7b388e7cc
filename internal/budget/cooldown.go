package budget

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/provider"
)

// RateLimited records a provider rate-limit answer: the whole key cools down for retryAfter
// (Cooldown when 0; adaptive: only when the provider sent one), for every process, and,
// adaptive, its rate is cut.
func (s *Share) RateLimited(ctx context.Context, retryAfter time.Duration, reason string) {
	reason = provider.Clean(reason, provider.MaxErrorRunes)
	if s.cfg.Adaptive {
		s.cut(ctx, reason)
		if retryAfter <= 0 {
			return
		}
	}
	if retryAfter <= 0 {
		retryAfter = s.cfg.Cooldown
	}
	s.mu.Lock()
	if until := s.clock.Now().Add(retryAfter); until.After(s.coolTill) {
		s.coolTill = until
	}
	s.mu.Unlock()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := RecordCooldown(rctx, s.pool, s.cfg.KeyLabel, retryAfter, reason); err != nil {
		s.log.Warn("could not share the rate-limit cool-down; other instances learn it from their own answers",
			zap.String("key", s.cfg.KeyLabel), zap.Error(err))
	}
	if n, ok := s.coolLines.tick(s.clock.Now()); ok {
		s.log.Warn("provider rate limit: key cooling down", zap.String("key", s.cfg.KeyLabel), zap.Duration("for_seconds", retryAfter),
			zap.Int("answers", n))
	}
}

// sparse lets a line through at most once a minute, counting the events it stands for: every
// call in flight when a cool-down starts is refused too, and a line each made hundreds a
// minute while the provider refused the key. Safe for concurrent use.
type sparse struct {
	mu   sync.Mutex
	last time.Time
	n    int
}

// tick counts an event at now and says whether to log it, with the events since the last line.
func (l *sparse) tick(now time.Time) (n int, log bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n++
	if !l.last.IsZero() && now.Sub(l.last) < time.Minute {
		return 0, false
	}
	n, l.n, l.last = l.n, 0, now
	return n, true
}

// RecordCooldown writes a key's cool-down (extending, never shortening, one in force) where
// every process and `collector status` see it, also when no budget share is running.
func RecordCooldown(ctx context.Context, pool *pgxpool.Pool, keyLabel string, d time.Duration, reason string) error {
	_, err := pool.Exec(ctx, `
		INSERT INTO budget_cooldowns (key_label, until, reason) VALUES ($1, now() + $2 * interval '1 millisecond', $3)
		ON CONFLICT (key_label) DO UPDATE SET until = greatest(budget_cooldowns.until, EXCLUDED.until), reason = EXCLUDED.reason`,
		keyLabel, d.Milliseconds(), provider.Clean(reason, provider.MaxErrorRunes))
	if err != nil {
		return fmt.Errorf("record the cool-down of key %s: %w", keyLabel, err)
	}
	return nil
}

// Cooldown is a key's cool-down in force.
type Cooldown struct {
	KeyLabel string
	Until    time.Time
	Reason   string
}

// ActiveCooldowns lists the cool-downs in force, by the database clock.
func ActiveCooldowns(ctx context.Context, pool *pgxpool.Pool) ([]Cooldown, error) {
	rows, err := pool.Query(ctx, `SELECT key_label, until, coalesce(reason, '') FROM budget_cooldowns WHERE until > now() ORDER BY key_label`)
	if err != nil {
		return nil, fmt.Errorf("read cool-downs: %w", err)
	}
	cds, err := pgx.CollectRows(rows, pgx.RowToStructByPos[Cooldown])
	if err != nil {
		return nil, fmt.Errorf("read cool-downs: %w", err)
	}
	return cds, nil
}
