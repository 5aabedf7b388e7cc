package health

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ProbeState is the provider probe's back-off in the current outage, and who holds it.
type ProbeState struct {
	Failures    int
	NextProbeAt time.Time
	LastResult  string
	// LeasedBy holds the probe until LeaseExpiresAt (empty when nobody does). A lease past
	// its expiry is a holder that died or hangs: any instance's next check takes it.
	LeasedBy       string
	LeaseExpiresAt time.Time
}

// Describe says where the probe stands at now, for `collector status` and the console.
func (p ProbeState) Describe(now time.Time) string {
	switch {
	case p.LeasedBy != "" && p.LeaseExpiresAt.After(now):
		return fmt.Sprintf("in flight from %s (lease for %s more); %d failed before", p.LeasedBy,
			p.LeaseExpiresAt.Sub(now).Round(time.Second), p.Failures)
	case p.LeasedBy != "":
		return fmt.Sprintf("%s's lease ran out %s ago (it died or hangs): the next check of any instance takes it; %d failed",
			p.LeasedBy, now.Sub(p.LeaseExpiresAt).Round(time.Second), p.Failures)
	}
	return fmt.Sprintf("%d failed, next in %s", p.Failures, max(p.NextProbeAt.Sub(now), 0).Round(time.Second))
}

// ReadProbe reads the probe state of the outage that began at since; nil when no probe ran in it.
func ReadProbe(ctx context.Context, pool *pgxpool.Pool, providerName string, since time.Time) (*ProbeState, error) {
	var p ProbeState
	var last, by *string
	var until *time.Time
	err := pool.QueryRow(ctx, `SELECT failures, next_probe_at, last_result, leased_by, lease_expires_at
		FROM provider_probe WHERE provider = $1 AND episode_since = $2`,
		providerName, since).Scan(&p.Failures, &p.NextProbeAt, &last, &by, &until)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read provider probe: %w", err)
	}
	if last != nil {
		p.LastResult = *last
	}
	if by != nil && until != nil {
		p.LeasedBy, p.LeaseExpiresAt = *by, *until
	}
	return &p, nil
}
