package outbox

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// laneLease is one held lane; validUntil counts from before the statement was sent (monotonic
// clock), so it never overestimates the lease the database granted.
type laneLease struct {
	token      string
	validUntil time.Time
}

// laneSet is the lanes one relay holds. Only the relay's own loop touches it.
type laneSet struct {
	pool  *pgxpool.Pool
	owner string
	lease time.Duration
	held  map[int16]laneLease
}

// acquire takes every lane whose lease is free or expired. SKIP LOCKED lets relays acquire at
// the same time without waiting on each other; each lane goes to exactly one of them.
func (s *laneSet) acquire(ctx context.Context) ([]int16, error) {
	if len(s.held) == Lanes {
		return nil, nil
	}
	start := time.Now()
	rows, err := s.pool.Query(ctx, `
		WITH free AS (
			SELECT lane FROM outbox_relay_lanes
			WHERE lease_expires_at IS NULL OR lease_expires_at <= now()
			ORDER BY lane
			FOR UPDATE SKIP LOCKED)
		UPDATE outbox_relay_lanes l
		SET owner = $1, lease_token = gen_random_uuid(), lease_expires_at = now() + $2::interval, acquired_at = now()
		FROM free WHERE l.lane = free.lane
		RETURNING l.lane, l.lease_token::text`, s.owner, s.lease)
	if err != nil {
		return nil, fmt.Errorf("acquire outbox lanes: %w", err)
	}
	got, err := s.collect(rows, start)
	if err != nil {
		return nil, fmt.Errorf("acquire outbox lanes: %w", err)
	}
	return got, nil
}

func (s *laneSet) collect(rows pgx.Rows, start time.Time) ([]int16, error) {
	var lanes []int16
	var lane int16
	var token string
	_, err := pgx.ForEachRow(rows, []any{&lane, &token}, func() error {
		s.held[lane] = laneLease{token: token, validUntil: start.Add(s.lease)}
		lanes = append(lanes, lane)
		return nil
	})
	return lanes, err
}

// renew extends every held lease whose token is unchanged, and forgets the others: a changed
// token means another relay acquired the lane after this one's lease expired. The lease is
// renewed even if it expired meanwhile, since an unchanged token proves nobody else held it.
func (s *laneSet) renew(ctx context.Context) (lost []int16, err error) {
	if len(s.held) == 0 {
		return nil, nil
	}
	start := time.Now()
	rows, err := s.pool.Query(ctx, `
		UPDATE outbox_relay_lanes SET lease_expires_at = now() + $2::interval
		WHERE lease_token = ANY($1::uuid[])
		RETURNING lane, lease_token::text`, s.tokens(), s.lease)
	if err != nil {
		return nil, fmt.Errorf("renew outbox lane leases: %w", err)
	}
	before := s.held
	s.held = make(map[int16]laneLease, len(before))
	if _, err := s.collect(rows, start); err != nil {
		s.held = before // unknown outcome: keep the old (shorter) view, it only expires sooner
		return nil, fmt.Errorf("renew outbox lane leases: %w", err)
	}
	for lane := range before {
		if _, ok := s.held[lane]; !ok {
			lost = append(lost, lane)
		}
	}
	slices.Sort(lost)
	return lost, nil
}

// release gives every held lane back at once, without waiting for the WAL flush: a release
// lost in a crash only leaves the lanes to expire (a lost acquisition or renewal could let two
// relays publish one lane, so those do wait).
func (s *laneSet) release(ctx context.Context) error {
	if len(s.held) == 0 {
		return nil
	}
	tokens := s.tokens()
	s.held = map[int16]laneLease{}
	_, err := s.pool.Exec(ctx, `
		WITH sc AS (SELECT set_config('synchronous_commit', 'off', true))
		UPDATE outbox_relay_lanes SET owner = NULL, lease_token = NULL, lease_expires_at = NULL, acquired_at = NULL
		FROM sc WHERE lease_token = ANY($1::uuid[])`, tokens)
	if err != nil {
		return fmt.Errorf("release outbox lanes: %w", err)
	}
	return nil
}

// usable lists the held lanes with more than margin of lease left, in lane order.
func (s *laneSet) usable(margin time.Duration) []int16 {
	deadline := time.Now().Add(margin)
	var lanes []int16
	for lane, l := range s.held {
		if l.validUntil.After(deadline) {
			lanes = append(lanes, lane)
		}
	}
	slices.Sort(lanes)
	return lanes
}

// minValid is when the first held lease runs out (zero when none are held).
func (s *laneSet) minValid() time.Time {
	var first time.Time
	for _, l := range s.held {
		if first.IsZero() || l.validUntil.Before(first) {
			first = l.validUntil
		}
	}
	return first
}

func (s *laneSet) tokens() []string {
	out := make([]string, 0, len(s.held))
	for _, l := range s.held {
		out = append(out, l.token)
	}
	return out
}

// busy fills in res the lanes other relays lease, the rows pending in them and who holds them.
func (s *laneSet) busy(ctx context.Context, res *Result) error {
	err := s.pool.QueryRow(ctx, `
		WITH b AS (
		    SELECT lane, owner FROM outbox_relay_lanes
		    WHERE lease_expires_at > now() AND NOT (lease_token = ANY ($1::uuid[])))
		SELECT (SELECT count(*) FROM b),
		       (SELECT count(*) FROM outbox_pending WHERE lane IN (SELECT lane FROM b)),
		       (SELECT coalesce(array_agg(DISTINCT owner), '{}') FROM b)`, s.tokens()).
		Scan(&res.LanesBusy, &res.PendingBusy, &res.BusyOwners)
	if err != nil {
		return fmt.Errorf("read outbox lanes held by other relays: %w", err)
	}
	return nil
}
