package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/duecollector/duecollector/internal/daemon"
	"github.com/duecollector/duecollector/internal/dispatcher"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

// statusJSON is `collector status -o json`. Its field names are a stable interface
// (docs/operations.md lists them): add fields, never rename or remove one.
type statusJSON struct {
	DatabaseTime time.Time      `json:"database_time"`
	Provider     providerJSON   `json:"provider"`
	Tiers        []tierJSON     `json:"tiers"`
	Totals       tierJSON       `json:"totals"`
	LeasesHeld   int64          `json:"leases_held"`
	ClaimLag     claimLagJSON   `json:"claim_lag"`
	Outbox       outboxJSON     `json:"outbox"`
	Relay        relayJSON      `json:"relay"`
	Budgets      []budgetJSON   `json:"budgets"`
	Instances    []instanceJSON `json:"instances"`
	Packing      []packingJSON  `json:"packing"`
	History      historyJSON    `json:"history"`
	Collections  activityJSON   `json:"collections"`
	Database     databaseJSON   `json:"database"`
	Reads        readsJSON      `json:"reads"`
	Check        *checkJSON     `json:"check,omitempty"`
}

// activityJSON says whether collections keep happening, whoever makes them.
type activityJSON struct {
	LastCollectedAt *time.Time `json:"last_collected_at"` // the latest successful collection
	OldestDueAt     *time.Time `json:"oldest_due_at"`     // the longest-waiting claimable item's due time
}

// databaseJSON says whether the database takes writes, as status probed it: cause is one of
// read_only, standby, shutting_down, unreachable (a full disk shows only to a write, so in a
// daemon's /readyz and metrics).
type databaseJSON struct {
	Writable bool   `json:"writable"`
	Cause    string `json:"cause,omitempty"`
	Detail   string `json:"detail,omitempty"`
}

// readsJSON says where the reads of the console's item pages, the API and history go: source
// is "replica" or "primary"; with a replica configured (database.read_url), its last measured
// lag (absent while unknown), the most it may lag, whether its replay is paused, and why reads
// fall back to the primary (absent while they do not).
type readsJSON struct {
	Source        string   `json:"source"`
	Replica       bool     `json:"replica"`
	LagSeconds    *float64 `json:"lag_seconds,omitempty"`
	MaxLagSeconds float64  `json:"max_lag_seconds,omitempty"`
	ReplayPaused  bool     `json:"replay_paused,omitempty"`
	Reason        string   `json:"reason,omitempty"`
}

func toReadsJSON(st store.ReadState) readsJSON {
	v := readsJSON{Source: string(st.Source), Replica: st.Replica}
	if !st.Replica {
		return v
	}
	v.MaxLagSeconds, v.ReplayPaused, v.Reason = st.MaxLag.Seconds(), st.Paused, st.Reason
	if st.LagKnown {
		lag := st.Lag.Seconds()
		v.LagSeconds = &lag
	}
	return v
}

// historyJSON is what the stored history takes (catalog sizes and estimates, nothing counted).
type historyJSON struct {
	Bytes  int64                `json:"bytes"`
	Tables []history.TableUsage `json:"tables"`
	// KeptSince is the lower bound of the oldest raw snapshot partition past the archive.
	KeptSince *time.Time `json:"kept_since"`
}

// packingJSON is an endpoint whose itemIds packing switch was ever set (the others are on).
type packingJSON struct {
	Endpoint  string    `json:"endpoint"`
	Enabled   bool      `json:"enabled"`
	ChangedAt time.Time `json:"changed_at"`
	Reason    string    `json:"reason"`
}

type providerJSON struct {
	Name            string     `json:"name"`
	Status          string     `json:"status"` // effective: what collectors obey
	Reason          string     `json:"reason"`
	Since           time.Time  `json:"since"`
	Override        bool       `json:"override"`
	OverrideUntil   *time.Time `json:"override_until,omitempty"`
	AutomaticStatus string     `json:"automatic_status"`
	ProbeFailures   *int       `json:"probe_failures,omitempty"`
	NextProbeAt     *time.Time `json:"next_probe_at,omitempty"`
	ProbeLeasedBy   string     `json:"probe_leased_by,omitempty"`
	ProbeLeaseUntil *time.Time `json:"probe_lease_expires_at,omitempty"`
}

type tierJSON struct {
	Tier    string `json:"tier,omitempty"`
	Items   int64  `json:"items"`
	Due     int64  `json:"due"`
	Overdue int64  `json:"overdue"`
	// Demand is the tier's steady requests/s at the costs its items were planned at.
	Demand float64 `json:"demand_requests_per_second"`
}

type claimLagJSON struct {
	WindowSeconds float64 `json:"window_seconds"`
	Claims        int64   `json:"claims"`
	P50Seconds    float64 `json:"p50_seconds"`
	P99Seconds    float64 `json:"p99_seconds"`
}

type outboxJSON struct {
	Enabled                  bool    `json:"enabled"`
	Unpublished              int64   `json:"unpublished"`
	OldestUnpublishedSeconds float64 `json:"oldest_unpublished_seconds"`
	Failed                   int64   `json:"failed"`
}

type relayJSON struct {
	LanesHeld int      `json:"lanes_held"`
	Owners    []string `json:"owners"`
	Stopped   []string `json:"stopped"`
}

type budgetJSON struct {
	Key            string     `json:"key"`
	Instances      int        `json:"instances"`
	SharePerSecond float64    `json:"share_per_second"`
	RequestsSent   int64      `json:"requests_sent"`
	CooldownUntil  *time.Time `json:"cooldown_until,omitempty"`
	LearnedRate    *float64   `json:"learned_rate,omitempty"` // requests/s learned from rate-limit answers
	LastCut        *time.Time `json:"last_cut,omitempty"`
	SlowStartRate  *float64   `json:"slow_start_rate,omitempty"` // requests/s the cluster ramps at before anything is learned
}

type instanceJSON struct {
	Instance       string    `json:"instance"`
	Host           string    `json:"host"`
	PID            int       `json:"pid"`
	Key            string    `json:"key"`
	StartedAt      time.Time `json:"started_at"`
	HeartbeatAt    time.Time `json:"heartbeat_at"`
	SharePerSecond float64   `json:"share_per_second"`
	RequestsSent   int64     `json:"requests_sent"`
}

type checkJSON struct {
	OK       bool     `json:"ok"`
	Problems []string `json:"problems"`
}

func toStatusJSON(st daemon.ClusterStatus) statusJSON {
	eff, reason, since := st.Provider.Effective()
	out := statusJSON{
		DatabaseTime: st.DatabaseNow,
		Provider: providerJSON{Name: st.Provider.Provider, Status: string(eff), Reason: reason, Since: since,
			Override: st.Provider.OverrideStatus != "", OverrideUntil: st.Provider.OverrideUntil,
			AutomaticStatus: string(st.Provider.Status)},
		Tiers:      []tierJSON{},
		LeasesHeld: st.Leased,
		ClaimLag: claimLagJSON{WindowSeconds: daemon.LagWindow.Seconds(), Claims: st.LagN,
			P50Seconds: st.LagP50.Seconds(), P99Seconds: st.LagP99.Seconds()},
		Outbox:    outboxJSON{Enabled: !st.NoOutbox, Unpublished: st.OutboxBacklog, OldestUnpublishedSeconds: st.OutboxOldest.Seconds(), Failed: st.OutboxFailed},
		Relay:     relayJSON{LanesHeld: st.Relay.LanesHeld, Owners: append([]string{}, st.Relay.Owners...), Stopped: []string{}},
		Budgets:   []budgetJSON{},
		Instances: []instanceJSON{},
		History:   historyJSON{Bytes: st.History.Bytes(), Tables: append([]history.TableUsage{}, st.History.Tables...)},
		Database:  databaseJSON{Writable: st.WriteRefused == "", Cause: string(st.WriteRefused), Detail: st.WriteDetail},
	}
	if !st.History.Since.IsZero() {
		out.History.KeptSince = &st.History.Since
	}
	if !st.Activity.LastCollected.IsZero() {
		out.Collections.LastCollectedAt = &st.Activity.LastCollected
	}
	if !st.Activity.OldestDue.IsZero() {
		out.Collections.OldestDueAt = &st.Activity.OldestDue
	}
	if st.Probe != nil {
		out.Provider.ProbeFailures, out.Provider.NextProbeAt = &st.Probe.Failures, &st.Probe.NextProbeAt
		if st.Probe.LeasedBy != "" {
			out.Provider.ProbeLeasedBy, out.Provider.ProbeLeaseUntil = st.Probe.LeasedBy, &st.Probe.LeaseExpiresAt
		}
	}
	for _, t := range st.Tiers {
		tj := tierJSON{Tier: t.Tier, Items: t.Items, Due: t.Due, Overdue: t.Overdue, Demand: tierplan.TierDemand(tiers.Tier(t.Tier), t.Requests)}
		out.Tiers = append(out.Tiers, tj)
		out.Totals.Items, out.Totals.Due, out.Totals.Overdue = out.Totals.Items+t.Items, out.Totals.Due+t.Due, out.Totals.Overdue+t.Overdue
		out.Totals.Demand += tj.Demand
	}
	for _, s := range st.Relay.Stops {
		out.Relay.Stopped = append(out.Relay.Stopped, s.Owner)
	}
	for _, b := range st.Budgets {
		out.Budgets = append(out.Budgets, budgetJSON{Key: b.KeyLabel, Instances: b.Instances, SharePerSecond: b.SharePerSec,
			RequestsSent: b.Used, CooldownUntil: b.CooldownUntil, LearnedRate: b.LearnedRate, LastCut: b.LastCut,
			SlowStartRate: b.SlowStartRate})
	}
	for _, i := range st.Instances {
		out.Instances = append(out.Instances, instanceJSON{Instance: i.Instance, Host: i.Host, PID: i.PID, Key: i.KeyLabel,
			StartedAt: i.Started, HeartbeatAt: i.Heartbeat, SharePerSecond: i.Share, RequestsSent: i.Used})
	}
	return out
}

// checkLimits are `collector status --check`'s thresholds.
type checkLimits struct {
	maxOverdue   int64
	maxOutboxAge time.Duration
	// maxIdle is how long items may wait with no successful collection anywhere (0: not
	// checked); minInstances how many live daemon instances are required (0: none, so a
	// deployment that collects from cron passes).
	maxIdle      time.Duration
	minInstances int
}

// maxMaintenance is how long the provider's own maintenance may last before --check names it
// (its weekly window is about four hours; CollectorProviderMaintenanceLong's for: too).
const maxMaintenance = 6 * time.Hour

// defaultMaxIdle is the longest tier interval (COLD, 10m) and a margin: a deployment whose
// collect-due runs are no further apart than that passes.
const defaultMaxIdle = 15 * time.Minute

// problems lists what --check fails on, the most urgent first.
func (l checkLimits) problems(st daemon.ClusterStatus) []string {
	var out []string
	if st.WriteRefused != "" {
		out = append(out, fmt.Sprintf("database refuses writes (%s): %s; no collector can claim or store anything until it takes them",
			st.WriteRefused, st.WriteDetail))
	}
	eff, reason, _ := st.Provider.Effective()
	if st.Provider.OverrideStatus != "" && !eff.CanDispatch() {
		out = append(out, fmt.Sprintf("provider %s paused by manual override: %s (%s)", st.Provider.Provider, eff, reason))
	}
	if n := len(st.Instances); n < l.minInstances {
		if n == 0 {
			out = append(out, fmt.Sprintf("no live collector instance (no heartbeat in the last 10s; --min-instances %d)", l.minInstances))
		} else {
			out = append(out, fmt.Sprintf("%d live collector instances, fewer than --min-instances %d", n, l.minInstances))
		}
	}
	for _, stop := range st.Relay.Stops {
		out = append(out, fmt.Sprintf("outbox relay %s STOPPED at %s: %s", stop.Owner, stop.StoppedAt.UTC().Format(time.RFC3339), stop.Reason))
	}
	var overdue, due int64
	for _, t := range st.Tiers {
		overdue, due = overdue+t.Overdue, due+t.Due
	}
	// The provider's own maintenance (weekly, about four hours) holds every item back by
	// design, as the alerts hold off then; one that lasts past maxMaintenance is named, as
	// CollectorProviderMaintenanceLong does. A manual pause is named above.
	if eff, _, since := st.Provider.Effective(); eff == provider.Maintenance && st.Provider.OverrideStatus == "" {
		overdue, due = 0, 0
		if d := st.DatabaseNow.Sub(since); !since.IsZero() && d > maxMaintenance {
			out = append(out, fmt.Sprintf("provider %s in MAINTENANCE for %s, longer than its weekly window: check its announcements",
				st.Provider.Provider, d.Round(time.Minute)))
		}
	} else if p := l.idle(st, due); p != "" {
		out = append(out, p)
	}
	if overdue > l.maxOverdue {
		out = append(out, fmt.Sprintf("%d items overdue by more than %s (--max-overdue %d)", overdue, daemon.OverdueAfter, l.maxOverdue))
	}
	if st.OutboxOldest > l.maxOutboxAge {
		out = append(out, fmt.Sprintf("oldest unpublished outbox event is %s old (--max-outbox-age %s)",
			st.OutboxOldest.Round(time.Second), l.maxOutboxAge))
	}
	return out
}

// idle names a deployment where collections stopped: items wait, and nothing was collected
// successfully for longer than maxIdle since they started waiting. Counting from the later of
// the last collection and the oldest due time keeps a fresh catalog, or one whose items are all
// scheduled ahead, from being called idle.
func (l checkLimits) idle(st daemon.ClusterStatus, due int64) string {
	act := st.Activity
	if l.maxIdle <= 0 || act.OldestDue.IsZero() {
		return ""
	}
	since := act.OldestDue
	if act.LastCollected.After(since) {
		since = act.LastCollected
	}
	if st.DatabaseNow.Sub(since) <= l.maxIdle {
		return ""
	}
	last := "yet"
	if !act.LastCollected.IsZero() {
		last = "for " + st.DatabaseNow.Sub(act.LastCollected).Round(time.Second).String()
	}
	cause := ""
	if eff, reason, _ := st.Provider.Effective(); !eff.CanDispatch() {
		cause = fmt.Sprintf("; provider %s %s: %s", st.Provider.Provider, eff, reason)
	}
	return fmt.Sprintf("collections are not happening: no successful collection %s, %d items due, the oldest for %s (--max-idle %s)%s",
		last, due, st.DatabaseNow.Sub(act.OldestDue).Round(time.Second), l.maxIdle, cause)
}

// errCheckFailed marks --check's failure, so the message names the first problem.
var errCheckFailed = errors.New("status check failed")

func writeStatusJSON(a *app, v statusJSON) error {
	enc := json.NewEncoder(a.stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func toPackingJSON(pk []dispatcher.PackingStatus) []packingJSON {
	out := []packingJSON{}
	for _, p := range pk {
		out = append(out, packingJSON{Endpoint: p.Endpoint, Enabled: p.Enabled, ChangedAt: p.ChangedAt, Reason: p.Reason})
	}
	return out
}
