package catalog

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/tierplan"
	"github.com/duecollector/duecollector/internal/tiers"
)

// The lease: what the dispatcher's claims take, renew, hand back and fence with. The statements
// live here, with the table's others; the dispatcher decides when and how much to claim.

// Claim is one item leased to a worker. Token fences every write-back: once the lease has
// expired and another worker re-claimed the item, this token no longer matches.
type Claim struct {
	ItemID   string
	ItemName string
	Tier     tiers.Tier
	DueAt    time.Time // next_collect_at when claimed
	Token    pgtype.UUID
	DBNow    time.Time // the database's now() at claim time
	// LastSaleAt is the newest sale already stored: older sales in a response are known, and
	// so are the first LastSecondSales sales of its second.
	LastSaleAt      *time.Time
	LastSecondSales int32
	// What the item's answers looked like so far, to decide whether it may share a call and
	// what its next write-back adds to: listings at the last collection (nil: never
	// collected), the decayed change counts and the decayed new sales over the decayed seconds
	// they were observed in (their rate).
	SeenListings *int32
	Est          tierplan.Observations
	EstSales     float64
	// LastCollectedAt is the last successful collection (nil: never): the last time the item's
	// last snapshot was seen unchanged.
	LastCollectedAt *time.Time
	// LastSnapshot is the market of the item's last snapshot and when it was collected (nil:
	// none yet); history compares a collection with it.
	LastSnapshot *history.Written
	// Requests is what the plan counted one collection of the item as costing.
	Requests float64
	// FailureStreak is how many collections in a row failed up to this one, LastOutcome how
	// the last one ended (tracked_items.last_outcome; empty before the first).
	FailureStreak int32
	LastOutcome   string
	// TID is where the claim left the row: the write-back finds it there unless something
	// else updated the item meanwhile (WriteBack).
	TID pgtype.TID
}

// claimDueUpdate leases the rows of the claim statements' due CTE and returns what scanClaim
// reads ($2 the lease in ms, $3 the owner). The CTE hands over each locked row's ctid, not its
// key: the row stays locked until commit, so its ctid cannot move, and a TID lookup costs a
// third of a primary-key probe (a tenth of the claim at 1M items). last_due_at keeps when the
// item was due, for the due→claim lag.
const claimDueUpdate = `
UPDATE tracked_items t
` + claimSet + `
FROM due
WHERE t.ctid = due.tid
` + claimReturning

// claimSet is what every claim statement writes: a fresh lease and fencing token, its holder,
// and when the item was claimed and due. ($2 the lease in ms, $3 the owner.)
const claimSet = `SET lease_expires_at = now() + $2 * interval '1 millisecond',
    lease_token = gen_random_uuid(),
    leased_by = $3,
    last_claimed_at = now(),
    last_due_at = t.next_collect_at`

// claimReturning is what every claim statement returns, in scanClaim's order. An item claimed by
// name may have no schedule (DORMANT): it counts as due now.
const claimReturning = `RETURNING t.item_id, t.item_name, t.collection_tier, coalesce(t.next_collect_at, now()), t.lease_token, now(), t.last_sale_at, t.last_second_sales,
          t.est_sales, t.est_collections, t.est_changes, t.est_changed_seconds, t.est_unchanged_seconds, t.last_collected_at,
          t.requests_per_collection, t.failure_streak, coalesce(t.last_outcome, ''), t.ctid, ` + seenCols

// claimSQL claims up to $1 due, unleased items in one statement, the most urgent tier first
// ($5 lists the tiers in urgency order, tiers.All, so the order lives in one place), each tier
// the longest-due first; "due" includes what falls due within the next $4 milliseconds (the
// dispatcher's Config.Ahead), or, with $4 < 0, only what was due that long ago (a one-shot's
// start). The MATERIALIZED CTE makes PostgreSQL lock exactly the rows it picked (SKIP LOCKED
// passes over rows another collector is claiming at this moment), so any number of collectors
// can run side by side and each item goes to exactly one of them. An expired lease counts as no
// lease: a crashed worker's items come back by themselves.
//
// Each tier is a range of the due index (collection_tier, next_collect_at), walked in order,
// tier by tier until $1 rows are locked, so a claim reads about the rows it takes: one ORDER BY
// over tier and due time sorted the whole due backlog on every claim instead, which is largest
// when claims matter most (a cold start, a provider back from an outage). A row is locked as
// the walk pulls it, and the outer LIMIT stops pulling: $1 rows are locked in all, not $1 a
// tier (the LATERAL makes the tiers the outer side of a nested loop, in $5's order).
//
// Of the rows locked it takes, with $6 set, only a prefix whose requests_per_collection (what
// the plan counts a collection as costing) add up to at most $6, the first item always: a claim
// then holds about as much provider work as the budget serves in a short horizon, however the
// items are packed, so an item falling due soon after is next in line. The rows locked and not
// taken are left as they were (the locks end with the statement). Items of the most urgent
// tier are claimed up to $7 milliseconds ahead (the dispatcher's Config.TopAhead) when that is
// longer than $4; $8 true takes only those. The last column says how many rows were locked:
// more than were taken means the cost cut the claim short, and more is due.
const claimSQL = `
WITH locked AS MATERIALIZED (
	SELECT c.tid, c.item_id, c.next_collect_at, c.requests_per_collection, o.rank
	FROM unnest($5::text[]) WITH ORDINALITY AS o(tier, rank)
	CROSS JOIN LATERAL (
		SELECT ctid AS tid, item_id, next_collect_at, requests_per_collection
		FROM tracked_items
		WHERE collection_tier = o.tier
		  AND next_collect_at <= now() + CASE WHEN o.rank = 1 THEN greatest($4::bigint, $7::bigint) ELSE $4::bigint END * interval '1 millisecond'
		  AND (lease_expires_at IS NULL OR lease_expires_at <= now())
		  AND (NOT $8::bool OR o.rank = 1)
		ORDER BY next_collect_at
		LIMIT $1
		FOR UPDATE SKIP LOCKED
	) c
	LIMIT $1
), ranked AS (
	SELECT tid,
	       sum(requests_per_collection) OVER w AS upto,
	       row_number() OVER w AS pos,
	       count(*) OVER () AS n_locked
	FROM locked
	WINDOW w AS (ORDER BY rank, next_collect_at, item_id ROWS UNBOUNDED PRECEDING)
), due AS (
	SELECT tid, n_locked FROM ranked WHERE pos = 1 OR $6::real IS NULL OR upto <= $6
)` + claimDueUpdate + `, due.n_locked`

// claimOneSQL leases one named item whatever its schedule (operator's `collect ITEM_ID`), unless
// another worker holds a live lease on it, or it is a synthetic fixture: its write-back would
// schedule it at its tier, collected (and failing) for good.
const claimOneSQL = `
UPDATE tracked_items t
` + claimSet + `
WHERE t.item_id = $1
  AND (t.lease_expires_at IS NULL OR t.lease_expires_at <= now())
  AND NOT synthetic_item(t.item_id)
` + claimReturning

// MaxAhead bounds how far ahead a claim reaches (the dispatcher's Config.Ahead and TopAhead): half
// the shortest tier interval (dispatcher.Config.Ahead says why).
var MaxAhead = func() time.Duration {
	shortest := time.Duration(1<<63 - 1)
	for _, t := range tiers.All() {
		if iv, ok := t.Interval(); ok {
			shortest = min(shortest, iv)
		}
	}
	return shortest / 2
}()

// tierOrder is tiers.All as text, most urgent first.
var tierOrder = func() []string {
	out := []string{}
	for _, t := range tiers.All() {
		out = append(out, string(t))
	}
	return out
}()

// ClaimDue leases up to n due items to owner for lease, the most urgent tier first and each
// tier the longest-due first, counting as due what falls due within ahead.
func ClaimDue(ctx context.Context, pool *pgxpool.Pool, n int, lease time.Duration, owner string, ahead time.Duration) ([]Claim, error) {
	claims, _, err := claim(ctx, pool, n, lease, owner, ahead, ahead, nil, false)
	return claims, err
}

// ClaimByCost claims, most urgent tier first, up to n due items whose collections the plan
// counts at most maxRequests requests together (at least one item). cut reports that the cost,
// not what was due, ended the claim. topOnly takes items of the most urgent tier only.
func ClaimByCost(ctx context.Context, pool *pgxpool.Pool, n int, lease time.Duration, owner string, ahead, topAhead time.Duration, maxRequests float64, topOnly bool) (claims []Claim, cut bool, err error) {
	return claim(ctx, pool, n, lease, owner, ahead, topAhead, &maxRequests, topOnly)
}

// claim runs claimSQL; maxRequests nil takes every row it locks.
func claim(ctx context.Context, pool *pgxpool.Pool, n int, lease time.Duration, owner string, ahead, topAhead time.Duration, maxRequests *float64, topOnly bool) (claims []Claim, cut bool, err error) {
	rows, err := pool.Query(ctx, claimSQL, n, lease.Milliseconds(), owner, ahead.Milliseconds(), tierOrder, maxRequests, topAhead.Milliseconds(), topOnly)
	if err != nil {
		return nil, false, fmt.Errorf("claim due items: %w", err)
	}
	var locked int64
	claims, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (Claim, error) { return scanClaim(row, &locked) })
	if err != nil {
		return nil, false, fmt.Errorf("claim due items: %w", err)
	}
	return claims, int(locked) > len(claims), nil
}

// ClaimOne leases the named item whatever its schedule, unless another worker holds it or it is
// a synthetic fixture.
func ClaimOne(ctx context.Context, pool *pgxpool.Pool, itemID string, lease time.Duration, owner string) ([]Claim, error) {
	rows, err := pool.Query(ctx, claimOneSQL, itemID, lease.Milliseconds(), owner)
	if err != nil {
		return nil, fmt.Errorf("claim item %s: %w", itemID, err)
	}
	claims, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Claim, error) { return scanClaim(row) })
	if err != nil {
		return nil, fmt.Errorf("claim item %s: %w", itemID, err)
	}
	return claims, nil
}

// scanClaim scans a claim's columns and, after them, extra.
func scanClaim(row pgx.CollectableRow, extra ...any) (Claim, error) {
	var c Claim
	var tier string
	var sn seen
	err := row.Scan(append([]any{&c.ItemID, &c.ItemName, &tier, &c.DueAt, &c.Token, &c.DBNow, &c.LastSaleAt, &c.LastSecondSales,
		&c.EstSales, &c.Est.Accesses, &c.Est.Changes, &c.Est.ChangedSeconds, &c.Est.UnchangedSeconds, &c.LastCollectedAt, &c.Requests,
		&c.FailureStreak, &c.LastOutcome, &c.TID}, append(sn.dest(), extra...)...)...)
	c.Tier = tiers.Tier(tier)
	c.SeenListings, c.LastSnapshot = sn.count, sn.written()
	return c, err
}

// ReleaseLeases hands unfinished items back at once (instead of after lease expiry), leaving
// their schedule untouched so the next claim takes them. Fenced like every write-back. It runs
// in the simple protocol, so it works even where the pool's prepared statements fail (behind
// PgBouncer in transaction mode with the default query mode) and a pass fails for that.
func ReleaseLeases(ctx context.Context, pool *pgxpool.Pool, claims []Claim) (int64, error) {
	if len(claims) == 0 {
		return 0, nil
	}
	ids, tokens := leaseArrays(claims)
	tag, err := pool.Exec(ctx, heldInOrder+`
		UPDATE tracked_items t
		SET lease_expires_at = NULL, lease_token = NULL, leased_by = NULL
		FROM held WHERE t.ctid = held.tid`, pgx.QueryExecModeSimpleProtocol, ids, tokens)
	if err != nil {
		return 0, fmt.Errorf("release %d leases: %w", len(claims), err)
	}
	return tag.RowsAffected(), nil
}

// leaseArrays is the claims' ids and tokens in item_id order. Every statement that locks several
// tracked_items rows takes them in that order: two of them then wait for each other instead of
// deadlocking, which cost a whole recalculation or a write-back group. UPDATE … FROM unnest
// locks in the arrays' order only while its plan walks them (a nested loop, the write-back's
// ctid lookup); a hash join that spills yields a few sorted runs, so a statement whose arrays
// may be long locks in heldInOrder first.
//
// heldInOrder locks the rows of $1 and $2 (leaseArrays) still under their token, in item_id
// order (the FOR UPDATE sits above the ORDER BY), and hands their ctids to the UPDATE after it.
const heldInOrder = `
WITH held AS MATERIALIZED (
	SELECT t.ctid AS tid FROM tracked_items t JOIN unnest($1::text[], $2::uuid[]) AS u(item_id, token)
	    ON t.item_id = u.item_id AND t.lease_token = u.token
	ORDER BY t.item_id FOR UPDATE OF t)`

func leaseArrays(claims []Claim) ([]string, []pgtype.UUID) {
	sorted := slices.SortedFunc(slices.Values(claims), func(a, b Claim) int { return strings.Compare(a.ItemID, b.ItemID) })
	ids := make([]string, len(sorted))
	tokens := make([]pgtype.UUID, len(sorted))
	for i, c := range sorted {
		ids[i], tokens[i] = c.ItemID, c.Token
	}
	return ids, tokens
}

// EstSeconds is the decayed time the item's counts were observed over.
func (c Claim) EstSeconds() float64 { return c.Est.ChangedSeconds + c.Est.UnchangedSeconds }

// HeldLeases returns the ids of claims whose lease is still theirs (token unchanged), expired
// or not: for a batch that lets its leases lapse, which items another collector took.
func HeldLeases(ctx context.Context, pool *pgxpool.Pool, claims []Claim) ([]string, error) {
	ids, tokens := leaseArrays(claims)
	rows, _ := pool.Query(ctx, `
		SELECT t.item_id FROM tracked_items t JOIN unnest($1::text[], $2::uuid[]) AS u(item_id, token)
		    ON t.item_id = u.item_id AND t.lease_token = u.token`, ids, tokens)
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read %d leases: %w", len(claims), err)
	}
	return held, nil
}

// RenewLeases pushes the lease expiry of claims still held (token unchanged) one lease ahead
// and returns the ids it renewed: the others were written back, or taken by another collector
// once their lease ran out.
func RenewLeases(ctx context.Context, pool *pgxpool.Pool, claims []Claim, lease time.Duration) ([]string, error) {
	ids, tokens := leaseArrays(claims)
	rows, _ := pool.Query(ctx, heldInOrder+`
		UPDATE tracked_items t
		SET lease_expires_at = now() + $3 * interval '1 millisecond'
		FROM held WHERE t.ctid = held.tid
		RETURNING t.item_id`, ids, tokens, lease.Milliseconds())
	renewed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("renew %d leases: %w", len(claims), err)
	}
	return renewed, nil
}
