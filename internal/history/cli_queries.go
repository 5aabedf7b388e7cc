package history

import (
	"context"
	"fmt"
	"time"
)

// Now is the database's clock, the one clock that decides "now".
func Now(ctx context.Context, db Reader) (time.Time, error) {
	var now time.Time
	if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return now, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
}
