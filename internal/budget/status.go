package budget

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Instance is one live collector process sharing a key.
type Instance struct {
	Instance, Host, KeyLabel string
	PID                      int
	Started, Heartbeat       time.Time
	Share                    float64
	Used                     int64
}

// Use is one key's budget as the live instances share it.
type Use struct {
	KeyLabel      string
	Instances     int
	SharePerSec   float64
	Used          int64
	CooldownUntil *time.Time
	// LearnedRate is the cluster rate learned from rate-limit answers (daemon.budget.adaptive),
	// nil before any; LastCut when it was last cut.
	LearnedRate *float64
	LastCut     *time.Time
	// SlowStartRate is the cluster's rate while a slow start ramps (nothing learned yet).
	SlowStartRate *float64
}

const liveInstancesSQL = `
SELECT instance, host, key_label, pid, started_at, heartbeat_at, share, used FROM collector_instances
WHERE heartbeat_at > now() - $1 * interval '1 millisecond' ORDER BY key_label, instance`

// LiveInstances lists the instances that heartbeated within liveFor.
func LiveInstances(ctx context.Context, pool *pgxpool.Pool, liveFor time.Duration) ([]Instance, error) {
	rows, err := pool.Query(ctx, liveInstancesSQL, liveFor.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("live instances: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Instance, error) {
		var i Instance
		return i, r.Scan(&i.Instance, &i.Host, &i.KeyLabel, &i.PID, &i.Started, &i.Heartbeat, &i.Share, &i.Used)
	})
	if err != nil {
		return nil, fmt.Errorf("live instances: %w", err)
	}
	return out, nil
}

const liveUseSQL = `
SELECT i.key_label, count(*), sum(i.share), sum(i.used),
       (SELECT until FROM budget_cooldowns c WHERE c.key_label = i.key_label AND c.until > now()),
       (SELECT rate FROM budget_rates r WHERE r.key_label = i.key_label AND NOT r.slow_start),
       (SELECT cut_at FROM budget_rates r WHERE r.key_label = i.key_label),
       (SELECT rate FROM budget_rates r WHERE r.key_label = i.key_label AND r.slow_start)
FROM collector_instances i WHERE i.heartbeat_at > now() - $1 * interval '1 millisecond'
GROUP BY i.key_label ORDER BY i.key_label`

// LiveUse sums each key's budget over the instances that heartbeated within liveFor.
func LiveUse(ctx context.Context, pool *pgxpool.Pool, liveFor time.Duration) ([]Use, error) {
	rows, err := pool.Query(ctx, liveUseSQL, liveFor.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("budget use: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Use, error) {
		var b Use
		return b, r.Scan(&b.KeyLabel, &b.Instances, &b.SharePerSec, &b.Used, &b.CooldownUntil, &b.LearnedRate, &b.LastCut, &b.SlowStartRate)
	})
	if err != nil {
		return nil, fmt.Errorf("budget use: %w", err)
	}
	return out, nil
}
