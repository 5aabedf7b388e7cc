package catalog

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/tiers"
)

// What "claimable" means — due and not leased by a live lease — is the claim's (lease.go):
// claimSQL takes such items, and the statements below count them or find the next one
// for status, metrics and the daemon's wake-up, so they cannot disagree with the claim.

// TierDue is one tier's items: all of them, the claimable ones, and those claimable for longer
// than the overdue threshold.
type TierDue struct {
	Tier                tiers.Tier
	Items, Due, Overdue int64
	Leased              int64 // under a live lease
	// Requests is what one collection of every item of the tier costs, summed
	// (requests_per_collection: packed items cost less than 2).
	Requests float64
	// The tier's part of Activity (ActivityOf): its latest successful collection and the due
	// time of its longest-waiting claimable item; zero for none.
	LastCollected, OldestDue time.Time
}

// dueByTierSQL: $1 the overdue threshold in ms.
const dueByTierSQL = `
SELECT collection_tier, count(*),
       count(*) FILTER (WHERE next_collect_at <= now() AND (lease_expires_at IS NULL OR lease_expires_at <= now())),
       count(*) FILTER (WHERE next_collect_at <= now() - $1 * interval '1 millisecond'
                          AND (lease_expires_at IS NULL OR lease_expires_at <= now())),
       sum(requests_per_collection)::float8,
       count(*) FILTER (WHERE lease_expires_at > now()),
       max(last_collected_at),
       min(next_collect_at) FILTER (WHERE next_collect_at <= now() AND (lease_expires_at IS NULL OR lease_expires_at <= now()))
FROM tracked_items
WHERE NOT synthetic_item(item_id)
GROUP BY collection_tier`

// DueByTier counts tracked items per tier, most urgent tier first, leaving fixtures out. Status
// takes everything it says of the catalog's rows from this one scan (ActivityOf, the leases
// held): each scan of tracked_items costs as much as the catalog is large.
func DueByTier(ctx context.Context, pool *pgxpool.Pool, overdue time.Duration) ([]TierDue, error) {
	rows, err := pool.Query(ctx, dueByTierSQL, overdue.Milliseconds())
	if err != nil {
		return nil, fmt.Errorf("items by tier: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (TierDue, error) {
		var t TierDue
		var last, oldest *time.Time
		if err := r.Scan(&t.Tier, &t.Items, &t.Due, &t.Overdue, &t.Requests, &t.Leased, &last, &oldest); err != nil {
			return t, err
		}
		if last != nil {
			t.LastCollected = *last
		}
		if oldest != nil {
			t.OldestDue = *oldest
		}
		return t, nil
	})
	if err != nil {
		return nil, fmt.Errorf("items by tier: %w", err)
	}
	slices.SortStableFunc(out, func(a, b TierDue) int { return a.Tier.Rank() - b.Tier.Rank() })
	return out, nil
}

// NextClaimable's two reads: the earliest moment any scheduled item becomes claimable. Walking
// each tier's range of the due index in order, the first unleased row bounds the answer
// (firstFreeSQL); only leased rows before it (in flight, a handful) can become claimable
// earlier, when their lease expires (firstLeaseSQL). The second gets the first's time as a
// value: bounded by a subquery, the planner took the range for a third of the table and scanned
// all of it (30 ms at 100k items, after every pass). It also gets the first's now(): a lease
// that expired between the two reads must count as expired in both, or its item would be in
// neither. $1 of the first and $4 of the second list the tiers (tierOrder): the index leads
// with the tier.
const (
	firstFreeSQL = `
SELECT now(), (SELECT min(f.next_collect_at)
               FROM unnest($1::text[]) AS o(tier)
               CROSS JOIN LATERAL (
                   SELECT next_collect_at FROM tracked_items
                   WHERE collection_tier = o.tier AND next_collect_at IS NOT NULL
                     AND (lease_expires_at IS NULL OR lease_expires_at <= now())
                   ORDER BY next_collect_at LIMIT 1) f)`
	firstLeaseSQL = `
SELECT extract(epoch FROM least($1::timestamptz - $2 * interval '1 millisecond', min(lease_expires_at)) - $3::timestamptz) * 1000
FROM tracked_items
WHERE collection_tier = ANY($4::text[])
  AND next_collect_at IS NOT NULL AND next_collect_at <= coalesce($1::timestamptz, 'infinity') AND lease_expires_at > $3::timestamptz`
)

// NextClaimable is how long until the next item is claimable by a dispatcher that claims ahead
// (the dispatcher's Config.Ahead) (<= 0: now); ok is false when nothing is scheduled at all.
func NextClaimable(ctx context.Context, pool *pgxpool.Pool, ahead time.Duration) (wait time.Duration, ok bool, err error) {
	var now time.Time
	var first *time.Time // nil: every scheduled item is leased, or none is scheduled
	if err := pool.QueryRow(ctx, firstFreeSQL, tierOrder).Scan(&now, &first); err != nil {
		return 0, false, fmt.Errorf("next due item: %w", err)
	}
	var ms *float64
	if err := pool.QueryRow(ctx, firstLeaseSQL, first, ahead.Milliseconds(), now, tierOrder).Scan(&ms); err != nil {
		return 0, false, fmt.Errorf("next due item: %w", err)
	}
	if ms == nil {
		return 0, false, nil
	}
	// Capped: an item parked centuries ahead would overflow time.Duration into a negative wait
	// (a pass at once, over and over); the caller re-reads long before a day anyway.
	return time.Duration(min(*ms, float64(maxWait/time.Millisecond)) * float64(time.Millisecond)), true, nil
}

// maxWait bounds NextClaimable.
const maxWait = 24 * time.Hour

// Activity says whether collections keep happening, whoever makes them (daemons or cron
// one-shots): when an item was last collected successfully, and since when the
// longest-waiting claimable item has been due. A zero time means none.
type Activity struct {
	LastCollected time.Time
	OldestDue     time.Time
}

// ActivityOf is the collection activity of the tiers DueByTier read.
func ActivityOf(byTier []TierDue) Activity {
	var a Activity
	for _, t := range byTier {
		if t.LastCollected.After(a.LastCollected) {
			a.LastCollected = t.LastCollected
		}
		if !t.OldestDue.IsZero() && (a.OldestDue.IsZero() || t.OldestDue.Before(a.OldestDue)) {
			a.OldestDue = t.OldestDue
		}
	}
	return a
}

// ClaimLag is due → claim over a window's claims: overall and per tier (the item's tier now).
type ClaimLag struct {
	Now     time.Time // the database's clock when read
	Overall Lag
	ByTier  map[string]Lag
}

// Lag summarises due → claim delays.
type Lag struct {
	N        int64
	P50, P99 time.Duration
}

// One pass over the window's claims gives the lag overall (the empty grouping set, whose row
// exists even with no claims) and per tier. Items claimed early (up to MaxAhead) count as 0.
const claimLagSQL = `
SELECT now(),
       coalesce(collection_tier, ''), GROUPING(collection_tier) = 1, count(*),
       percentile_cont(0.5) WITHIN GROUP (ORDER BY lag), percentile_cont(0.99) WITHIN GROUP (ORDER BY lag)
FROM (SELECT collection_tier, greatest(extract(epoch FROM last_claimed_at - last_due_at), 0) AS lag FROM tracked_items
      WHERE last_claimed_at > now() - $1 * interval '1 millisecond'
        AND last_due_at <= last_claimed_at + $2 * interval '1 millisecond' AND NOT synthetic_item(item_id)) s
GROUP BY GROUPING SETS ((), (collection_tier))`

// ReadClaimLag reads the claim lag of the claims made within window, leaving fixtures out.
func ReadClaimLag(ctx context.Context, pool *pgxpool.Pool, window time.Duration) (ClaimLag, error) {
	out := ClaimLag{ByTier: map[string]Lag{}}
	rows, err := pool.Query(ctx, claimLagSQL, window.Milliseconds(), MaxAhead.Milliseconds())
	if err != nil {
		return out, fmt.Errorf("claim lag: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var tier string
		var total bool
		var n int64
		var p50, p99 *float64
		if err := rows.Scan(&out.Now, &tier, &total, &n, &p50, &p99); err != nil {
			return out, fmt.Errorf("claim lag: %w", err)
		}
		lag := Lag{N: n}
		if p50 != nil {
			lag.P50, lag.P99 = seconds(*p50), seconds(*p99)
		}
		if total {
			out.Overall = lag
		} else {
			out.ByTier[tier] = lag
		}
	}
	if err := rows.Err(); err != nil {
		return out, fmt.Errorf("claim lag: %w", err)
	}
	return out, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// probeItemSQL picks the item a probe asks for: a real one when there is any, whose last
// collection did not fail, the soonest due first. A probe asks whether the provider answers,
// not one item: an item failing on its own (a gateway refusing its URL with a 503) answered
// every probe with what paused everyone, so the pause never ended. The scheduled ones are tried
// first, the first such row of each tier's range of the due index: sorting every row for the one
// answer took a scan of the table (90 ms at 100k items) at every probe. ($1 lists the tiers,
// tierOrder; $2 an item not to ask, empty for none.)
const (
	probeScheduledSQL = `SELECT f.item_id
FROM unnest($1::text[]) AS o(tier)
CROSS JOIN LATERAL (
    SELECT item_id, next_collect_at FROM tracked_items
    WHERE collection_tier = o.tier AND next_collect_at IS NOT NULL AND NOT synthetic_item(item_id) AND failure_streak = 0
      AND item_id <> $2
    ORDER BY next_collect_at LIMIT 1) f
ORDER BY f.next_collect_at LIMIT 1`
	probeItemSQL = `SELECT item_id FROM tracked_items WHERE item_id <> $1
ORDER BY synthetic_item(item_id), failure_streak > 0, next_collect_at NULLS LAST LIMIT 1`
)

// ProbeItem is the item a provider probe or a key re-check asks the provider for; never
// except (an item whose own answer is in question, or "").
func ProbeItem(ctx context.Context, pool *pgxpool.Pool, except string) (string, error) {
	var id string
	err := pool.QueryRow(ctx, probeScheduledSQL, tierOrder, except).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		err = pool.QueryRow(ctx, probeItemSQL, except).Scan(&id)
	}
	if err != nil {
		return "", fmt.Errorf("pick a tracked item: %w", err)
	}
	return id, nil
}

// RecordProbeFailure writes that a probe of itemID (asked whether the provider answers another
// item) drew outcome too, without its lease, schedule or last attempt (it was not collected):
// from then on the probes ask another item (failure_streak > 0) rather than stopping at it for
// good. Its next collection, if it succeeds, clears it.
func RecordProbeFailure(ctx context.Context, pool *pgxpool.Pool, itemID, outcome, reason string) error {
	_, err := pool.Exec(ctx, `UPDATE tracked_items SET failure_streak = failure_streak + 1, last_outcome = $2,
    last_error = $3 WHERE item_id = $1`, itemID, outcome, reason)
	if err != nil {
		return fmt.Errorf("record the failed probe of %s: %w", itemID, err)
	}
	return nil
}

// CollectedWithin counts the items whose last successful collection, by whichever instance,
// is at most d old by the database's clock, up to enough: the scan stops there rather than
// reading the whole table.
func CollectedWithin(ctx context.Context, pool *pgxpool.Pool, d time.Duration, enough int) (int, error) {
	var n int
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT FROM tracked_items WHERE last_collected_at > now() - $1 * interval '1 millisecond' LIMIT $2) s`,
		d.Milliseconds(), enough).Scan(&n); err != nil {
		return 0, fmt.Errorf("count recent collections: %w", err)
	}
	return n, nil
}

// NotAttemptedSince counts the items that may still bring rows dated before t: tracked before t,
// collectable (not DORMANT, not a fixture), and not attempted since t. An item's sales reach the
// database only at its next collection, so a past day is not complete while any such item
// remains (a provider pause across midnight, a backlog). An item attempted since t and failed is
// not waited for: it may fail for good.
func NotAttemptedSince(ctx context.Context, db Reader, t time.Time) (int64, error) {
	var n int64
	if err := db.QueryRow(ctx, `
		SELECT count(*) FROM tracked_items
		WHERE created_at < $1 AND collection_tier <> 'DORMANT' AND NOT synthetic_item(item_id)
		  AND (last_attempt_at IS NULL OR last_attempt_at < $1)`, t).Scan(&n); err != nil {
		return 0, fmt.Errorf("count items not collected since %s: %w", t.UTC().Format(time.RFC3339), err)
	}
	return n, nil
}
