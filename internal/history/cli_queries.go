package history

import (
	"context"
	"fmt"
	"time"
)

// ReadRecent is Read over the last age, counted back from the database's clock (the one clock
// that decides "now"); it returns the window's start with the series.
func ReadRecent(ctx context.Context, db Reader, itemID, resolution string, age time.Duration) (Series, time.Time, error) {
	now, err := Now(ctx, db)
	if err != nil {
		return Series{ItemID: itemID}, now, err
	}
	since := now.Add(-age)
	s, err := Read(ctx, db, itemID, resolution, since)
	return s, since, err
}

// Now is the database's clock, the one clock that decides "now".
func Now(ctx context.Context, db Reader) (time.Time, error) {
	var now time.Time
	if err := db.QueryRow(ctx, `SELECT now()`).Scan(&now); err != nil {
		return now, fmt.Errorf("read the database clock: %w", err)
	}
	return now, nil
}
