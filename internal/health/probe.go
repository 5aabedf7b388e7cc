package health

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ProbeState is the provider probe's back-off in the current outage.
type ProbeState struct {
	Failures    int
	NextProbeAt time.Time
	LastResult  string
}

// ReadProbe reads the probe state of the outage that began at since; nil when no probe ran in it.
func ReadProbe(ctx context.Context, pool *pgxpool.Pool, providerName string, since time.Time) (*ProbeState, error) {
	var p ProbeState
	var last *string
	err := pool.QueryRow(ctx, `SELECT failures, next_probe_at, last_result FROM provider_probe WHERE provider = $1 AND episode_since = $2`,
		providerName, since).Scan(&p.Failures, &p.NextProbeAt, &last)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("read provider probe: %w", err)
	}
	if last != nil {
		p.LastResult = *last
	}
	return &p, nil
}
