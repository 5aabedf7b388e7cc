package dispatcher

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/history"
)

// WriteCollected writes claims back as collected successfully at at, claims[i] having seen
// states[i] and no sales, in one transaction as a pass's writer does (the fenced item write,
// then history.Policy.Write), and returns how many were still ours. For tools/bench's ceiling,
// which drives the product's statements without the dispatcher's pass around them.
func WriteCollected(ctx context.Context, pool *pgxpool.Pool, hist history.Policy, claims []catalog.Claim, states []history.State, at time.Time, window time.Duration) (int, error) {
	rs := make([]result, len(claims))
	for i, c := range claims {
		rs[i] = result{claim: c, at: at, outcome: "ok", window: window, listings: states[i]}
	}
	ws, err := writeBack(ctx, pool, hist, rs, nil)
	if err != nil {
		return 0, err
	}
	return len(rs) - len(ws.fenced), nil
}
