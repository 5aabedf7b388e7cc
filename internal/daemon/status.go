package daemon

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/seed"
)

// ClusterStatus is what `collector status` prints: the whole cluster as the database sees it.
// Synthetic fixture items are left out of every item count.
type ClusterStatus struct {
	Provider provider.StatusRow
	Probe    *ProbeState // nil when no probe has run
	Tiers    []TierStatus
	Leased   int64
	// Lag is due → claim over the claims of the last LagWindow (each item's latest claim).
	LagN           int64
	LagP50, LagP99 time.Duration
	OutboxBacklog  int64
	OutboxOldest   time.Duration
	OutboxFailed   int64
	Relay          outbox.RelayState
	Instances      []Instance
	Budgets        []BudgetUse
	Cooldowns      []budget.Cooldown // keys cooling down (rate limit or refused key), with reason and end
	DatabaseNow    time.Time
}

// TierStatus counts one tier's items.
type TierStatus struct {
	Tier                string
	Items, Due, Overdue int64
}

// ProbeState is the provider probe's back-off.
type ProbeState struct {
	Failures    int
	NextProbeAt time.Time
	LastResult  string
}

// Instance is one live collector process (heartbeat within 3 × daemon.budget.heartbeat).
type Instance struct {
	Instance, Host, KeyLabel string
	PID                      int
	Started, Heartbeat       time.Time
	Share                    float64
	Used                     int64
}

// BudgetUse is one key's budget as the live instances share it.
type BudgetUse struct {
	KeyLabel      string
	Instances     int
	SharePerSec   float64
	Used          int64
	CooldownUntil *time.Time
	// LearnedRate is the cluster rate learned from rate-limit answers (daemon.budget.adaptive),
	// nil before any; LastCut when it was last cut.
	LearnedRate *float64
	LastCut     *time.Time
}

// LagWindow is the span `collector status` reports lag over.
const LagWindow = 10 * time.Minute

// liveFor: an instance row is live when it heartbeated this recently (3 × the longest
// allowed daemon.budget.heartbeat would be too lax for a glance; 3 × the default is used).
const liveFor = 10 * time.Second

// Status reads the cluster status.
func Status(ctx context.Context, pool *pgxpool.Pool, providerName string) (ClusterStatus, error) {
	var st ClusterStatus
	var err error
	if st.Provider, err = provider.ReadStatus(ctx, pool, providerName); err != nil {
		return st, err
	}
	var p ProbeState
	var last *string
	err = pool.QueryRow(ctx, `SELECT failures, next_probe_at, last_result FROM provider_probe WHERE provider = $1 AND episode_since = $2`,
		providerName, st.Provider.Since).Scan(&p.Failures, &p.NextProbeAt, &last)
	switch {
	case err == nil:
		if last != nil {
			p.LastResult = *last
		}
		st.Probe = &p
	case !errors.Is(err, pgx.ErrNoRows):
		return st, fmt.Errorf("read provider probe: %w", err)
	}

	notSynthetic := `NOT ` + seed.SyntheticSQL("item_id")
	counts, err := dispatcher.DueByTier(ctx, pool, OverdueAfter, seed.SyntheticPatterns())
	if err != nil {
		return st, err
	}
	for _, c := range counts {
		st.Tiers = append(st.Tiers, TierStatus{Tier: string(c.Tier), Items: c.Items, Due: c.Due, Overdue: c.Overdue})
	}

	var p50, p99 *float64
	err = pool.QueryRow(ctx, `
		SELECT now(),
		       (SELECT count(*) FROM tracked_items WHERE lease_expires_at > now() AND `+notSynthetic+`),
		       count(*),
		       percentile_cont(0.5) WITHIN GROUP (ORDER BY lag), percentile_cont(0.99) WITHIN GROUP (ORDER BY lag)
		FROM (SELECT extract(epoch FROM last_claimed_at - last_due_at) AS lag FROM tracked_items
		      WHERE last_claimed_at > now() - $1 * interval '1 millisecond'
		        AND last_due_at <= last_claimed_at AND `+notSynthetic+`) s`,
		LagWindow.Milliseconds()).Scan(&st.DatabaseNow, &st.Leased, &st.LagN, &p50, &p99)
	if err != nil {
		return st, fmt.Errorf("claim lag: %w", err)
	}
	if p50 != nil {
		st.LagP50, st.LagP99 = seconds(*p50), seconds(*p99)
	}

	backlog, err := outbox.ReadBacklog(ctx, pool)
	if err != nil {
		return st, err
	}
	st.OutboxBacklog, st.OutboxOldest, st.OutboxFailed = backlog.Pending, backlog.Oldest, backlog.Failed
	if st.Relay, err = outbox.ReadRelayState(ctx, pool); err != nil {
		return st, err
	}

	rows, err := pool.Query(ctx, `
		SELECT instance, host, key_label, pid, started_at, heartbeat_at, share, used FROM collector_instances
		WHERE heartbeat_at > now() - $1 * interval '1 millisecond' ORDER BY key_label, instance`, liveFor.Milliseconds())
	if err != nil {
		return st, fmt.Errorf("live instances: %w", err)
	}
	st.Instances, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Instance, error) {
		var i Instance
		return i, r.Scan(&i.Instance, &i.Host, &i.KeyLabel, &i.PID, &i.Started, &i.Heartbeat, &i.Share, &i.Used)
	})
	if err != nil {
		return st, fmt.Errorf("live instances: %w", err)
	}
	rows, err = pool.Query(ctx, `
		SELECT i.key_label, count(*), sum(i.share), sum(i.used),
		       (SELECT until FROM budget_cooldowns c WHERE c.key_label = i.key_label AND c.until > now()),
		       (SELECT rate FROM budget_rates r WHERE r.key_label = i.key_label),
		       (SELECT cut_at FROM budget_rates r WHERE r.key_label = i.key_label)
		FROM collector_instances i WHERE i.heartbeat_at > now() - $1 * interval '1 millisecond'
		GROUP BY i.key_label ORDER BY i.key_label`, liveFor.Milliseconds())
	if err != nil {
		return st, fmt.Errorf("budget use: %w", err)
	}
	st.Budgets, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (BudgetUse, error) {
		var b BudgetUse
		return b, r.Scan(&b.KeyLabel, &b.Instances, &b.SharePerSec, &b.Used, &b.CooldownUntil, &b.LearnedRate, &b.LastCut)
	})
	if err != nil {
		return st, fmt.Errorf("budget use: %w", err)
	}
	if st.Cooldowns, err = budget.ActiveCooldowns(ctx, pool); err != nil {
		return st, err
	}
	return st, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
