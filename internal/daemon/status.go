package daemon

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/budget"
	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/health"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/outbox"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
)

// ClusterStatus is what `collector status` prints: the whole cluster as the database sees it.
// Synthetic fixture items are left out of every item count.
type ClusterStatus struct {
	Provider provider.StatusRow
	Probe    *health.ProbeState // nil when no probe has run
	Tiers    []TierStatus
	// PlannedAt is when the tier forecast (TierStatus.Forecast) was planned; zero before any
	// plan was applied.
	PlannedAt time.Time
	Leased    int64
	// Lag is due → claim over the claims of the last LagWindow (each item's latest claim); a
	// claim made ahead of its due time (daemon.pack_wait; HOT also Config.ClaimHorizon) counts as 0.
	LagN           int64
	LagP50, LagP99 time.Duration
	OutboxBacklog  int64
	OutboxOldest   time.Duration
	OutboxFailed   int64
	Relay          outbox.RelayState
	Instances      []budget.Instance
	Budgets        []budget.Use
	Cooldowns      []budget.Cooldown // keys cooling down (rate limit or refused key), with reason and end
	History        history.Usage
	DatabaseNow    time.Time
	// Activity is whether collections keep happening, whoever makes them (daemons or cron).
	Activity catalog.Activity
	// WriteRefused is why the database would refuse a write now ("" when it would take it), as
	// store.ProbeWritable reads it and, when that is clean, store.ProbeSpace's write tells
	// (disk_full), and WriteDetail the words to show: a daemon cannot record that it cannot
	// write, so status asks the database itself.
	WriteRefused store.WriteCause
	WriteDetail  string
	// NoOutbox is outbox.enabled=false in the configuration of the process reading the status,
	// which its caller sets (the database cannot tell "off" from "nothing collected yet").
	NoOutbox bool
}

// Events says whether snapshot events are published, in the words status and the console show.
func (st ClusterStatus) Events() string {
	if st.NoOutbox {
		return "events off: outbox.enabled=false, no outbox rows written"
	}
	return "events published through the outbox"
}

// TierStatus counts one tier's items.
type TierStatus struct {
	Tier                string
	Items, Due, Overdue int64
	// Requests is what collecting each item once costs, summed (packed items cost less than 2).
	Requests float64
	// Lag is due → claim over the tier's claims of the last LagWindow.
	Lag Lag
	// Forecast is what the last applied tier plan predicted for the tier (demand, weighted
	// freshness); nil when no plan has been stored or the plan put no item here.
	Forecast *catalog.TierForecast
}

// Lag is due → claim lag over a window's claims.
type Lag struct {
	N        int64
	P50, P99 time.Duration
}

// LagWindow is the span `collector status` reports lag over.
const LagWindow = 10 * time.Minute

// liveFor: an instance row is live when it heartbeated this recently (3 × the longest
// allowed daemon.budget.heartbeat would be too lax for a glance; 3 × the default is used).
const liveFor = 10 * time.Second

// writeState is why the database would refuse a write now: what a read can tell, else what the
// space probe's write meets. A space probe failing otherwise (the role may not create a table)
// tells nothing.
func writeState(ctx context.Context, pool *pgxpool.Pool) (store.WriteCause, string) {
	if c, d := store.ProbeWritable(ctx, pool); c != "" {
		return c, d
	}
	err := store.ProbeSpace(ctx, pool, store.SpaceBlock)
	if c := store.RefusedCause(err); c != "" {
		return c, err.Error()
	}
	return "", ""
}

// Status reads the cluster status.
func Status(ctx context.Context, pool *pgxpool.Pool, providerName string) (ClusterStatus, error) {
	var st ClusterStatus
	var err error
	st.WriteRefused, st.WriteDetail = writeState(ctx, pool)
	if st.Provider, err = provider.ReadStatus(ctx, pool, providerName); err != nil {
		return st, err
	}
	if st.Probe, err = health.ReadProbe(ctx, pool, providerName, st.Provider.Since); err != nil {
		return st, err
	}

	counts, err := catalog.DueByTier(ctx, pool, OverdueAfter)
	if err != nil {
		return st, err
	}
	for _, c := range counts {
		st.Tiers = append(st.Tiers, TierStatus{Tier: string(c.Tier), Items: c.Items, Due: c.Due, Overdue: c.Overdue, Requests: c.Requests})
		st.Leased += c.Leased
	}
	// Stored by the last plan: freshness is predicted there, never computed on this path.
	forecast, err := catalog.ReadForecast(ctx, pool)
	if err != nil {
		return st, err
	}
	for i := range forecast {
		st.PlannedAt = forecast[i].PlannedAt
		for j := range st.Tiers {
			if st.Tiers[j].Tier == string(forecast[i].Tier) {
				st.Tiers[j].Forecast = &forecast[i]
			}
		}
	}

	st.Activity = catalog.ActivityOf(counts)

	lag, err := catalog.ReadClaimLag(ctx, pool, LagWindow)
	if err != nil {
		return st, err
	}
	st.DatabaseNow = lag.Now
	st.LagN, st.LagP50, st.LagP99 = lag.Overall.N, lag.Overall.P50, lag.Overall.P99
	for i := range st.Tiers {
		if l, ok := lag.ByTier[st.Tiers[i].Tier]; ok {
			st.Tiers[i].Lag = Lag(l)
		}
	}

	backlog, err := outbox.ReadBacklog(ctx, pool, false)
	if err != nil {
		return st, err
	}
	st.OutboxBacklog, st.OutboxOldest, st.OutboxFailed = backlog.Pending, backlog.Oldest, backlog.Failed
	if st.Relay, err = outbox.ReadRelayState(ctx, pool); err != nil {
		return st, err
	}

	if st.Instances, err = budget.LiveInstances(ctx, pool, liveFor); err != nil {
		return st, err
	}
	if st.Budgets, err = budget.LiveUse(ctx, pool, liveFor); err != nil {
		return st, err
	}
	if st.Cooldowns, err = budget.ActiveCooldowns(ctx, pool); err != nil {
		return st, err
	}
	if st.History, err = history.ReadUsage(ctx, pool); err != nil {
		return st, err
	}
	return st, nil
}
