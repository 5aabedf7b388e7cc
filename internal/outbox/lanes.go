package outbox

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/store"
)

// laneSet is the lanes a relay's loop holds, each under its token, all until at least validUntil.
type laneSet struct {
	pool       *pgxpool.Pool
	owner      string
	lease      time.Duration
	held       map[int16]string // lane → lease token
	validUntil time.Time        // counted from before the statement was sent: never too late
	renewedAt  time.Time        // when the last renewal that worked was sent
}

// renew extends each lease still under our token, even an expired one (nobody took it), and with
// acquire takes free lanes; SKIP LOCKED keeps relays acquiring at once from waiting on each other.
// An acquisition under way at a stop finishes, so that the stop's release frees what it took.
func (s *laneSet) renew(ctx context.Context, acquire bool) (got, lost []int16, err error) {
	if acquire {
		var cancel context.CancelFunc
		ctx, cancel = store.LetFinish(ctx)
		defer cancel()
	}
	start := time.Now()
	rows, _ := s.pool.Query(ctx, `
		WITH mine AS (
		    UPDATE outbox_relay_lanes SET lease_expires_at = now() + $2::interval
		    WHERE lease_token = ANY ($1::uuid[])
		    RETURNING lane, lease_token),
		     free AS (
		    SELECT lane FROM outbox_relay_lanes
		    WHERE $3 AND (lease_expires_at IS NULL OR lease_expires_at <= now())
		      AND (lease_token IS NULL OR lease_token <> ALL (coalesce($1::uuid[], '{}')))
		    ORDER BY lane
		    FOR UPDATE SKIP LOCKED),
		     taken AS (
		    UPDATE outbox_relay_lanes l
		    SET owner = $4, lease_token = gen_random_uuid(), lease_expires_at = now() + $2::interval, acquired_at = now()
		    FROM free WHERE l.lane = free.lane
		    RETURNING l.lane, l.lease_token)
		SELECT lane, lease_token::text FROM mine UNION ALL SELECT lane, lease_token::text FROM taken`,
		s.tokens(), s.lease, acquire, s.owner)
	held := map[int16]string{}
	var lane int16
	var token string
	if _, err := pgx.ForEachRow(rows, []any{&lane, &token}, func() error { held[lane] = token; return nil }); err != nil {
		// Unknown outcome: keep the old view, whose lease only runs out sooner.
		return nil, nil, fmt.Errorf("renew outbox lane leases: %w", err)
	}
	for lane, token := range held {
		if s.held[lane] != token {
			got = append(got, lane)
		}
	}
	for lane := range s.held {
		if _, ok := held[lane]; !ok {
			lost = append(lost, lane)
		}
	}
	s.held, s.validUntil, s.renewedAt = held, start.Add(s.lease), start
	slices.Sort(got)
	slices.Sort(lost)
	return got, lost, nil
}

// release gives the held lanes up: free at once, or only once freeAfter has passed (a produce
// call that timed out may still land until then, and another relay publishing the lane's later
// events before it would reorder them). It need not wait for the WAL flush: a release lost in
// a crash only leaves lanes to expire.
func (s *laneSet) release(ctx context.Context, freeAfter time.Duration) error {
	if len(s.held) == 0 {
		return nil
	}
	tokens := s.tokens()
	s.held = map[int16]string{}
	_, err := s.pool.Exec(ctx, `
		WITH sc AS (SELECT set_config('synchronous_commit', 'off', true))
		UPDATE outbox_relay_lanes SET owner = NULL, lease_token = NULL, acquired_at = NULL,
			lease_expires_at = CASE WHEN $2::interval > interval '0' THEN now() + $2::interval END
		FROM sc WHERE lease_token = ANY($1::uuid[])`, tokens, freeAfter)
	if err != nil {
		return fmt.Errorf("release outbox lanes: %w", err)
	}
	return nil
}

// usable lists the held lanes if they have more than margin of lease left.
func (s *laneSet) usable(margin time.Duration) []int16 {
	if time.Until(s.validUntil) <= margin {
		return nil
	}
	return slices.Sorted(maps.Keys(s.held))
}

// tokens is never nil: a nil slice is sent as NULL, and every comparison with NULL is NULL,
// so a relay holding nothing would find no lane free, not even one whose holder died.
func (s *laneSet) tokens() []string {
	return append([]string{}, slices.Collect(maps.Values(s.held))...)
}
