package dispatcher

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ClaimDue claims up to n due, unleased items, the longest-due first, with the claim statement
// a pass uses. For tools/bench's ceiling, which drives the product's statements without the
// dispatcher around them.
func ClaimDue(ctx context.Context, pool *pgxpool.Pool, n int, lease time.Duration, owner string) ([]Claim, error) {
	return claimDue(ctx, pool, n, lease, owner, false, 0)
}

// WriteCollected writes back claims as collected successfully at at, with the fenced statement
// a write-back uses (next slot, outcome, lease cleared), and returns the items still ours,
// locked until tx ends. What history stores comes after, in the same transaction.
func WriteCollected(ctx context.Context, tx pgx.Tx, claims []Claim, at time.Time) ([]string, error) {
	rs := make([]result, len(claims))
	for i, c := range claims {
		rs[i] = result{claim: c, at: at, outcome: "ok"}
	}
	live, err := writeItems(ctx, tx, rs)
	if err != nil {
		return nil, err
	}
	ids := make([]string, 0, len(live))
	for _, c := range claims {
		if live[c.ItemID] {
			ids = append(ids, c.ItemID)
		}
	}
	return ids, nil
}
