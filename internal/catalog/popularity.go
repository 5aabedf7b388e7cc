package catalog

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/duecollector/duecollector/internal/config"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

// Policy is the popularity configuration (catalog.*): how signals make a score here, and the
// settings of the tier policy (internal/tierplan) that turns scores into tiers.
type Policy struct {
	Window           time.Duration
	InterestHalfLife time.Duration
	Weights          config.ScoreWeights
	// Rules are the threshold policy's settings.
	tierplan.Rules
	// Mode is config.PolicyBudget or config.PolicyThresholds (catalog.policy).
	Mode string
	// Limit is the requests per second the budget policy plans within (budget.PlanLimit).
	Limit float64
	// Packing is how the dispatcher shares calls now (dispatcher.PackingModelNow): what a
	// collection costs, for the plan and the demand.
	Packing packing.Model
}

// PolicyFromConfig converts the validated catalog section, the requests per second the budget
// policy plans within (budget.PlanLimit), and how the dispatcher packs calls now
// (dispatcher.PackingModelNow).
func PolicyFromConfig(c config.CatalogConfig, limit float64, pack packing.Model) Policy {
	rt, err := tiers.Parse(c.ReactivateTier)
	if err != nil {
		rt = tiers.Active
	}
	return Policy{
		Window: c.SignalWindow, InterestHalfLife: c.InterestHalfLife, Weights: c.Weights, Mode: c.Policy,
		Rules: tierplan.Rules{DormantAfter: c.DormantAfter, DemotionHold: c.DemotionHold, ReactivateTier: rt,
			Thresholds: c.Thresholds.Tiers()},
		Limit: limit, Packing: pack,
	}
}

// Signals are one item's inputs to its score, as of Now (the database clock).
type Signals struct {
	Sales    int64   // sales in the window
	Gold     float64 // gold traded in the window
	Churn    float64 // Σ|Δ listing_count| between consecutive snapshots in the window
	Interest float64 // Σ kind weight × event weight × 0.5^(age / half-life)
}

// Score combines the signals; rates are per hour of the window so the score does not
// depend on how long the window is. It is rounded to 3 decimals so that interest decaying a
// little between runs does not rewrite every row.
func Score(s Signals, w config.ScoreWeights, window time.Duration) float64 {
	h := window.Hours()
	if h <= 0 {
		h = 1
	}
	v := w.Sales*float64(s.Sales)/h +
		w.Volume*math.Log10(1+math.Max(s.Gold, 0)/h) +
		w.Churn*s.Churn/h +
		s.Interest
	return math.Round(v*1000) / 1000
}

// itemState is one tracked item as the recalculation reads it.
type itemState struct {
	ItemID        string
	NextCollectAt *time.Time
	Score         float64
	Requests      float64 // requests_per_collection as stored
	tierplan.State
	Signals
}

// Result is what one recalculation did.
type Result struct {
	// Skipped: another process was recalculating at the same moment; this run did nothing.
	Skipped      bool
	lastPlan     *time.Time // when Skipped: the last plan committed when this one found the lock held
	Now          time.Time  // the database clock the run used
	Scored       int        // items scored (synthetic items are left alone)
	ScoreChanged int        // items whose stored score changed
	Promoted     int
	Demoted      int // includes Dormant
	Dormant      int
	Reactivated  int
	Held         int // demotions postponed by catalog.demotion_hold
	Conflicts    int // tier changed concurrently (a touch); decided again next run
	Changes      []TierChange
	// Plan is what the budget policy planned (nil under the thresholds policy).
	Plan *tierplan.PlanSummary
}

// TierChange is one item that moved tier.
type TierChange struct {
	ItemID        string
	From, To      tiers.Tier
	Reason        string
	NextCollectAt *time.Time
}

// recalcLockKey is an arbitrary advisory-lock key owned by popularity recalculation.
const recalcLockKey int64 = 0x706f70756c6172 // "popular"

// updateBatch bounds each UPDATE's arrays and the time it holds row locks.
const updateBatch = 2000

// RecalculatePopularity scores every non-synthetic tracked item from its sales, listing
// churn and interest events, maps the score to a tier and applies tier changes:
// DORMANT when there was no sale and no interest for catalog.dormant_after; reactivation
// (due now) for a DORMANT or COLD_10M item with an interest event newer than its last tier
// change; otherwise the tier of its score. A changed tier is rescheduled on the new tier's
// phase (tiers.NextDue from the database's now), and neither a promotion nor any move of an
// item never collected and due already (an import) moves the next collection later than it
// already was. Leases are never touched. Synthetic items are left as seed:synthetic wrote
// them, so recalculation can never schedule a fixture. What the tiers it applied predict per
// tier (demand, popularity-weighted freshness) replaces the stored forecast (ReadForecast).
//
// When another process holds the recalculation, it waits for it (up to recalcWait) and skips
// if that one committed a plan; a holder that died (its session lets go once its statement
// ends) committed none, so this one recalculates instead of leaving the tiers to the next
// scheduled run.
func RecalculatePopularity(ctx context.Context, db DB, p Policy) (Result, error) {
	res, err := recalculate(ctx, db, p, true)
	if err != nil || !res.Skipped {
		return res, err
	}
	committed, err := waitForRecalculation(ctx, db, res.lastPlan)
	if err != nil || committed {
		return res, err
	}
	return recalculate(ctx, db, p, true)
}

// recalcWait bounds the wait for another process's recalculation: a live one takes about a
// second at 20,000 items. It outlasts the server's idle bound of our sessions
// (store.IdleInTransactionDefault), so a wait under way when the holder froze ends with the
// lock, once the server ends the frozen transaction, not with a skip.
const recalcWait = store.IdleInTransactionDefault + 15*time.Second

// waitForRecalculation waits until no process holds the recalculation and says whether a plan
// was committed meanwhile (tier_forecast.planned_at moved). A wait past recalcWait is reported
// as committed: the holder is alive and busy, and this run skips as before.
func waitForRecalculation(ctx context.Context, db DB, before *time.Time) (committed bool, err error) {
	var after *time.Time
	recalcWaiting()
	err = pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// A statement_timeout of the role or database under the wait would end it first.
		wait := fmt.Sprintf("%dms", recalcWait.Milliseconds())
		if _, err := tx.Exec(ctx, `SELECT set_config('lock_timeout', $1, true), set_config('statement_timeout', $2, true)`,
			wait, fmt.Sprintf("%dms", (recalcWait+10*time.Second).Milliseconds())); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, recalcLockKey)
		return err
	})
	if isLockTimeout(err) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("recalculate popularity: wait for another process's recalculation: %w", err)
	}
	if err := db.QueryRow(ctx, `SELECT max(planned_at) FROM tier_forecast`).Scan(&after); err != nil {
		return false, fmt.Errorf("recalculate popularity: read the last plan: %w", err)
	}
	return after != nil && (before == nil || after.After(*before)), nil
}

// recalcWaiting tells tests that a recalculation is about to wait for another's.
var recalcWaiting = func() {}

// recalcRead tells tests that a recalculation has read the items and is about to decide.
var recalcRead = func() {}

// recalcReading tells tests that a recalculation holds the first row of a read (what:
// "signals" or "activity").
var recalcReading = func(what string) {}

func isLockTimeout(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "55P03" // lock_not_available
}

// PlanTiers decides like RecalculatePopularity and reports the moves and the plan, changing
// nothing.
func PlanTiers(ctx context.Context, db DB, p Policy) (Result, error) {
	return recalculate(ctx, db, p, false)
}

func recalculate(ctx context.Context, db DB, p Policy, apply bool) (Result, error) {
	var res Result
	// One transaction: now() is then the same instant for the read, the decisions made in
	// Go from it, and the writes.
	err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		// Several daemons may run the popularity loop; one pass at a time is enough.
		var locked bool
		if err := tx.QueryRow(ctx, `SELECT pg_try_advisory_xact_lock($1)`, recalcLockKey).Scan(&locked); err != nil {
			return err
		}
		if !locked {
			res.Skipped = true
			// Read here, while the holder still holds: a plan it commits after this moves it.
			return tx.QueryRow(ctx, `SELECT max(planned_at) FROM tier_forecast`).Scan(&res.lastPlan)
		}
		items, now, err := readSignals(ctx, tx, p)
		if err != nil {
			return err
		}
		recalcRead()
		res.Now = now
		res.Scored = len(items)
		scores := make([]float64, len(items))
		states := make([]tierplan.State, len(items))
		ds := make([]tierplan.Decision, len(items))
		for i, it := range items {
			scores[i] = Score(it.Signals, p.Weights, p.Window)
			states[i] = it.State
			ds[i] = tierplan.Decide(now, it.State, scores[i], p.Rules)
		}
		if p.Mode == config.PolicyBudget {
			res.Plan = tierplan.ApplyBudget(states, scores, ds, p.Limit, p.Packing)
		}
		var batch updates
		for i, it := range items {
			score, d := scores[i], ds[i]
			if d.Held {
				res.Held++
			}
			scoreChanged := score != it.Score
			if scoreChanged {
				res.ScoreChanged++
			}
			requests := tierplan.Cost(it.State, p.Packing).RequestsAtTier(d.Tier)
			if d.Tier == it.Tier && !scoreChanged && math.Abs(requests-it.Requests) < 1e-3 {
				continue
			}
			var next *time.Time
			if d.Tier != it.Tier {
				if n, ok := tiers.NextDue(it.ItemID, d.Tier, now); ok {
					next = &n
				}
			}
			if !apply {
				if d.Tier != it.Tier {
					res.Changes = append(res.Changes, TierChange{ItemID: it.ItemID, From: it.Tier, To: d.Tier, Reason: d.Reason, NextCollectAt: next})
				}
				continue
			}
			firstDue := it.SeenListings == nil && it.NextCollectAt != nil && !it.NextCollectAt.After(now)
			batch.add(it, score, d, next, requests, firstDue)
			if batch.len() >= updateBatch {
				if err := batch.flush(ctx, tx, &res); err != nil {
					return err
				}
			}
		}
		if err := batch.flush(ctx, tx, &res); err != nil {
			return err
		}
		if !apply {
			return nil
		}
		// What the applied tiers predict, for the console and status, which must not plan.
		var prior tierplan.Prior
		if res.Plan != nil {
			prior = res.Plan.Prior
		} else {
			prior = tierplan.PriorOf(states)
		}
		return writeForecast(ctx, tx, tierplan.Forecast(states, scores, ds, prior, p.Packing))
	})
	if err != nil {
		return res, fmt.Errorf("recalculate popularity: %w", err)
	}
	return res, nil
}

// readSignals reads every item with its signals: its interest here, in one statement whose
// LATERAL subqueries walk item_interest's (item_id, time) index over just the horizon, then
// its market activity from history (RecentActivity), in the same transaction and so at the
// same now(). The last sale is the item's own watermark, not max(sold_at), which would probe
// every day's partition of auction_sales for every item. Both come through cursors
// (store.EachRow), a batch at a time: the transaction holds the recalculation's lock, and a
// process frozen while one statement streamed every item to it kept that lock, and every
// other instance's recalculation waiting, for as long as it stayed frozen.
func readSignals(ctx context.Context, tx pgx.Tx, p Policy) ([]itemState, time.Time, error) {
	horizon := 10 * p.InterestHalfLife // older events weigh under 0.1 %
	var (
		out []itemState
		now time.Time
	)
	err := store.EachRow(ctx, tx, "popularity_signals", `
		SELECT t.item_id, t.collection_tier, t.next_collect_at, t.popularity_score, t.created_at, t.tier_changed_at,
		       t.last_sale_at,
		       li.occurred_at, coalesce(li.kind, ''),
		       ia.interest, now(), coalesce(t.pinned_tier, ''),
		       t.est_collections, t.est_changes, t.est_changed_seconds, t.est_unchanged_seconds, t.est_sales,
		       t.seen_listing_count, t.requests_per_collection
		FROM tracked_items t
		LEFT JOIN LATERAL (
			SELECT occurred_at, kind FROM item_interest i WHERE i.item_id = t.item_id
			ORDER BY occurred_at DESC LIMIT 1
		) li ON true
		CROSS JOIN LATERAL (
			SELECT coalesce(sum(i.weight
			         * CASE i.kind WHEN 'view' THEN $1::float8 WHEN 'watch' THEN $2::float8 ELSE $3::float8 END
			         -- Clamp: an event stamped in the future by a skewed clock counts as new, not more.
			         * power(0.5, greatest(0, extract(epoch FROM now() - i.occurred_at)) / $4::float8)), 0)::float8 AS interest
			FROM item_interest i WHERE i.item_id = t.item_id AND i.occurred_at > now() - $5::float8 * interval '1 second'
		) ia
		WHERE NOT synthetic_item(t.item_id)
		ORDER BY t.item_id`, []any{p.Weights.View, p.Weights.Watch, p.Weights.Touch,
		p.InterestHalfLife.Seconds(), horizon.Seconds()}, func(rows pgx.Rows) error {
		var it itemState
		var tier, pinned string
		o := &it.Observed
		if err := rows.Scan(&it.ItemID, &tier, &it.NextCollectAt, &it.Score, &it.CreatedAt, &it.TierChangedAt,
			&it.LastSale, &it.LastInterest, &it.LastKind,
			&it.Interest, &now, &pinned,
			&o.Accesses, &o.Changes, &o.ChangedSeconds, &o.UnchangedSeconds, &it.ObservedSales,
			&it.SeenListings, &it.Requests); err != nil {
			return err
		}
		it.Tier, it.Pinned = tiers.Tier(tier), tiers.Tier(pinned)
		out = append(out, it)
		if len(out) == 1 {
			recalcReading("signals")
		}
		return nil
	})
	if err != nil {
		return nil, now, fmt.Errorf("read popularity signals: %w", err)
	}
	if len(out) == 0 {
		now, err = store.Now(ctx, tx)
		return nil, now, err
	}
	ids := make([]string, len(out))
	at := make(map[string]int, len(out))
	for i := range out {
		ids[i], at[out[i].ItemID] = out[i].ItemID, i
	}
	// now is the transaction's, as the statement's now() would be.
	first := true
	err = history.RecentActivity(ctx, tx, ids, now.Add(-p.Window), func(id string, a history.Activity) error {
		if first {
			first = false
			recalcReading("activity")
		}
		it := &out[at[id]]
		it.Sales, it.Gold, it.Churn = a.Sales, a.Gold, a.Churn
		return nil
	})
	if err != nil {
		return nil, now, fmt.Errorf("read popularity signals: %w", err)
	}
	return out, now, nil
}

// updates accumulates one batched UPDATE ... FROM unnest.
type updates struct {
	ids, oldTiers, oldPins, newTiers, reasons []string
	scores, requests                          []float64
	nexts                                     []*time.Time
	dueNow, promote                           []bool
}

func (u *updates) len() int { return len(u.ids) }

// add queues one row. firstDue marks an item never collected and due already (an import): a
// move does not put its first collection off, as a promotion puts off none.
func (u *updates) add(it itemState, score float64, d tierplan.Decision, next *time.Time, requests float64, firstDue bool) {
	u.ids = append(u.ids, it.ItemID)
	u.requests = append(u.requests, requests)
	u.oldTiers = append(u.oldTiers, string(it.Tier))
	u.oldPins = append(u.oldPins, string(it.Pinned))
	u.newTiers = append(u.newTiers, string(d.Tier))
	u.reasons = append(u.reasons, d.Reason)
	u.scores = append(u.scores, score)
	u.nexts = append(u.nexts, next)
	u.dueNow = append(u.dueNow, d.DueNow)
	u.promote = append(u.promote, tiers.IsPromotion(it.Tier, d.Tier) || firstDue)
}

// flush writes the batch. A row whose tier or pin changed since it was read (a concurrent
// touch, an operator's pin) is skipped and counted as a conflict. For a tier change the schedule is computed against
// the row as it is now: LEAST with the current next_collect_at (LEAST ignores NULL) keeps a
// promotion, or any move of an item whose first collection is due, from delaying a
// collection. Lease columns are not touched.
//
// The rows are locked in item_id order first (u's FOR UPDATE above its sort), as every statement
// that locks several tracked_items rows takes them (leaseArrays), and then updated by ctid: the
// update's own join locked in whatever order its plan yielded, which for a hash join that spills
// (100k items, the default work_mem) is a few sorted runs, and a write-back holding B while
// waiting for A then deadlocked with it, costing the whole recalculation.
func (u *updates) flush(ctx context.Context, tx pgx.Tx, res *Result) error {
	if u.len() == 0 {
		return nil
	}
	rows, err := tx.Query(ctx, `
		WITH u AS MATERIALIZED (
			SELECT t.ctid AS tid, u.*
			FROM tracked_items t JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[], $6::timestamptz[], $7::bool[], $8::bool[], $9::float8[], $10::text[])
			     AS u(item_id, old_tier, new_tier, reason, score, next, due_now, promote, requests, old_pin) ON t.item_id = u.item_id
			ORDER BY t.item_id FOR UPDATE OF t)
		UPDATE tracked_items t SET
			popularity_score = u.score,
			collection_tier  = u.new_tier,
			next_collect_at  = CASE
				WHEN u.new_tier = u.old_tier THEN t.next_collect_at
				WHEN u.new_tier = 'DORMANT'  THEN NULL
				-- Being collected now: that collection serves the move, the next is on the new
				-- tier's phase (its write-back keeps this schedule, the tier having changed).
				WHEN coalesce(t.lease_expires_at > now(), false) THEN u.next
				WHEN u.due_now               THEN LEAST(t.next_collect_at, now())
				WHEN u.promote               THEN LEAST(t.next_collect_at, u.next)
				ELSE u.next END,
			tier_changed_at  = CASE WHEN u.new_tier = u.old_tier THEN t.tier_changed_at ELSE now() END,
			tier_reason      = CASE WHEN u.new_tier = u.old_tier THEN t.tier_reason ELSE u.reason END,
			requests_per_collection = u.requests,
			updated_at       = now()
		FROM u
		WHERE t.ctid = u.tid AND t.collection_tier = u.old_tier AND coalesce(t.pinned_tier, '') = u.old_pin
		RETURNING t.item_id, u.old_tier, u.new_tier, u.reason, u.due_now, t.next_collect_at`,
		u.ids, u.oldTiers, u.newTiers, u.reasons, u.scores, u.nexts, u.dueNow, u.promote, u.requests, u.oldPins)
	if err != nil {
		return fmt.Errorf("update %d tracked items: %w", u.len(), err)
	}
	defer rows.Close()
	applied := 0
	for rows.Next() {
		applied++
		var c TierChange
		var from, to string
		var dueNow bool
		if err := rows.Scan(&c.ItemID, &from, &to, &c.Reason, &dueNow, &c.NextCollectAt); err != nil {
			return fmt.Errorf("update tracked items: %w", err)
		}
		if from == to {
			continue
		}
		c.From, c.To = tiers.Tier(from), tiers.Tier(to)
		res.Changes = append(res.Changes, c)
		switch {
		case dueNow:
			res.Reactivated++
			res.Promoted++
		case tiers.IsPromotion(c.From, c.To):
			res.Promoted++
		default:
			res.Demoted++
			if c.To == tiers.Dormant {
				res.Dormant++
			}
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("update %d tracked items: %w", u.len(), err)
	}
	res.Conflicts += u.len() - applied
	*u = updates{}
	return nil
}
