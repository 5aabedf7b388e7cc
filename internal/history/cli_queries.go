package history

import (
	"context"
	"fmt"
	"time"
)

// ReadRecent is Read over the last age, counted back from the database's clock (the one clock
// that decides "now"); it returns the window's start with the series.
func ReadRecent(ctx context.Context, db Reader, itemID, resolution string, age time.Duration) (Series, time.Time, error) {
	var now time.Time
	if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return Series{ItemID: itemID}, now, fmt.Errorf("read the database clock: %w", err)
	}
	since := now.Add(-age)
	s, err := Read(ctx, db, itemID, resolution, since)
	return s, since, err
}
