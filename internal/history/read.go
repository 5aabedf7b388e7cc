package history

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Point is one stored snapshot: the item's market from At until the next point.
type Point struct {
	At            time.Time `json:"collected_at"`
	Reason        string    `json:"reason"`
	ListingCount  int       `json:"listing_count"`
	Quantity      int64     `json:"listing_quantity"`
	Lowest        *int64    `json:"lowest_unit_price"`
	Median        *int64    `json:"median_unit_price"`
	Weighted      *float64  `json:"weighted_unit_price"`
	APIAverage    *int64    `json:"api_average_price"`
	Truncated     bool      `json:"listings_truncated"`
	SalesCount    int       `json:"sales_count"`
	SalesQuantity int64     `json:"sales_quantity"`
	SalesVWAP     *float64  `json:"sales_vwap"`
}

// Candle summarises an item's series and the sales sold in one hour or day (UTC): open and
// close are the lowest unit price first and last seen in the bucket, each snapshot holding
// until the next (price_candles says how); a bucket with no collection has none, and the
// price held from the previous candle's close.
type Candle struct {
	Bucket        time.Time `json:"bucket"`
	Snapshots     int       `json:"snapshots"`
	Open          *int64    `json:"open"`
	High          *int64    `json:"high"`
	Low           *int64    `json:"low"`
	Close         *int64    `json:"close"`
	ListingsMin   *int      `json:"listings_min"`
	ListingsMax   *int      `json:"listings_max"`
	SalesCount    int       `json:"sales_count"`
	SalesQuantity int64     `json:"sales_quantity"`
	SalesVWAP     *float64  `json:"sales_vwap"`
}

// Resolutions of price_candles.
const (
	Hourly = "1h"
	Daily  = "1d"
)

// Series is an item's stored history since a time, oldest first.
type Series struct {
	ItemID string
	Points []Point  // raw snapshots (Interval raw)
	Candle []Candle // candles (Interval 1h or 1d)
	// SeenUntil is the last collection that saw the last point's market: it held at least
	// until then. For a window that ends before the market changed again, the item's last
	// successful collection. Nil when the item was never collected (or it is unknown).
	SeenUntil *time.Time
}

// Document is a series as readers receive it: the read API's /timeseries answer and
// `collector history -o json`, one shape for both. Snapshots (interval raw) or Candles (1h, 1d)
// is present, empty or not; the other is left out.
type Document struct {
	ItemID    string     `json:"item_id"`
	Interval  string     `json:"interval"`
	Since     time.Time  `json:"since"`
	Until     *time.Time `json:"until,omitempty"`
	SeenUntil *time.Time `json:"seen_until"`
	Snapshots []Point    `json:"snapshots,omitzero"`
	Candles   []Candle   `json:"candles,omitzero"`
}

// Document is s as read over [since, until) (until zero: up to now) at interval.
func (s Series) Document(interval string, since, until time.Time) Document {
	d := Document{ItemID: s.ItemID, Interval: interval, Since: since.UTC(), SeenUntil: s.SeenUntil}
	if !until.IsZero() {
		u := until.UTC()
		d.Until = &u
	}
	if interval == "raw" {
		d.Snapshots = s.Points
		if d.Snapshots == nil {
			d.Snapshots = []Point{}
		}
	} else {
		d.Candles = s.Candle
		if d.Candles == nil {
			d.Candles = []Candle{}
		}
	}
	return d
}

// Reader is a pool, a connection or a transaction.
type Reader interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// ReadBetween returns one item's series from since up to until (exclusive; zero = no end) at a
// resolution: "raw", Hourly or Daily. Raw points start with the snapshot in force at since (the
// last one before it, which holds until the next), candles with the bucket that holds since, so
// the series covers the whole stretch asked for; candles are those whose bucket starts before
// until. Each read walks one index range, and for raw points one backward probe within a day
// before since (partitions outside are pruned); an item quiet for longer takes a second probe:
// at lastSnapshot (the item row's last_snapshot_at, nil when unknown) when that is before the
// first probe's range, since then it is the snapshot in force, else unbounded. It reads
// history's tables only: whether the item is tracked, SeenUntil and lastSnapshot come from its
// row (catalog.ReadSeries).
func ReadBetween(ctx context.Context, db Reader, itemID, resolution string, since, until time.Time, lastSnapshot *time.Time) (Series, error) {
	s := Series{ItemID: itemID}
	var err error
	switch resolution {
	case "raw":
		s.Points, err = readPoints(ctx, db, itemID, since, endOf(until), lastSnapshot)
	case Hourly, Daily:
		s.Candle, err = readCandles(ctx, db, itemID, resolution, since, endOf(until))
	default:
		return s, fmt.Errorf("resolution %q: allowed raw, 1h, 1d", resolution)
	}
	return s, err
}

// HeldUntil is, for a window ending at until, when the market of its last point was last
// seen: the first snapshot at or after until replaced it, and its previous_seen_at is the last
// collection that saw the old market unchanged (nil on an item's first snapshot). found is
// false when nothing replaced it: then the item's last collection saw it (catalog.ReadSeries).
//
// The first probe looks a day past until, where an item collected then wrote its next snapshot
// within a heartbeat; only when it finds none does a second one look further, unbounded.
func HeldUntil(ctx context.Context, db Reader, itemID string, until time.Time) (at *time.Time, found bool, err error) {
	for _, end := range []time.Time{until.Add(inForceLookback), endOf(time.Time{})} {
		err = db.QueryRow(ctx, `SELECT previous_seen_at FROM auction_snapshots WHERE item_id = $1 AND collected_at >= $2
			AND collected_at < $3 ORDER BY collected_at LIMIT 1`, itemID, until, end).Scan(&at)
		if err == nil {
			return at, true, nil
		}
		if !errors.Is(err, pgx.ErrNoRows) {
			return nil, false, fmt.Errorf("read when item %q's market before %s was last seen: %w", itemID, until.UTC().Format(time.RFC3339), err)
		}
	}
	return nil, false, nil
}

// inForceLookback is how far before `since` a raw read first looks for the snapshot in force
// there (and HeldUntil past its end for the next one). An item collected at all wrote one
// within a heartbeat (1 h by default) of any time, and a search bounded so plans only the
// partitions of about a day: unbounded, the planner opens and locks every partition on that
// side, a cost that grows with the days kept (3 ms at a month, 10× the read itself; two locks
// a partition, 820 at 400 days). Only an item quiet for longer needs a second search.
const inForceLookback = 25 * time.Hour

// endOf turns "no end" into a time past every row, so one statement serves both.
func endOf(until time.Time) time.Time {
	if until.IsZero() {
		return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	return until
}

const pointCols = `collected_at, reason, listing_count, listing_quantity, lowest_unit_price, median_unit_price,
	weighted_unit_price, api_average_price, listings_truncated, sales_count, sales_quantity, sales_vwap`

func readPoints(ctx context.Context, db Reader, itemID string, since, until time.Time, lastSnapshot *time.Time) ([]Point, error) {
	lookedFrom := since.Add(-inForceLookback)
	pts, err := queryPoints(ctx, db, itemID, `
		(SELECT `+pointCols+` FROM auction_snapshots WHERE item_id = $1 AND collected_at < $2 AND collected_at >= $3
		 ORDER BY collected_at DESC LIMIT 1)
		UNION ALL
		(SELECT `+pointCols+` FROM auction_snapshots WHERE item_id = $1 AND collected_at >= $2 AND collected_at < $4
		 ORDER BY collected_at)
		ORDER BY collected_at`, since, lookedFrom, until)
	if err != nil || (len(pts) > 0 && pts[0].At.Before(since)) {
		return pts, err
	}
	if lastSnapshot != nil && lastSnapshot.Before(lookedFrom) {
		// The item's newest snapshot is older than the first probe: it is the one in force. A
		// row that says otherwise (a fixture's) finds nothing here and takes the unbounded probe.
		older, err := queryPoints(ctx, db, itemID, `
			SELECT `+pointCols+` FROM auction_snapshots WHERE item_id = $1 AND collected_at = $2
			ORDER BY snapshot_id DESC LIMIT 1`, *lastSnapshot)
		if err != nil || len(older) > 0 {
			return append(older, pts...), err
		}
	}
	older, err := queryPoints(ctx, db, itemID, `
		SELECT `+pointCols+` FROM auction_snapshots WHERE item_id = $1 AND collected_at < $2
		ORDER BY collected_at DESC LIMIT 1`, lookedFrom)
	return append(older, pts...), err
}

func queryPoints(ctx context.Context, db Reader, itemID, sql string, args ...any) ([]Point, error) {
	rows, err := db.Query(ctx, sql, append([]any{itemID}, args...)...)
	if err != nil {
		return nil, fmt.Errorf("read snapshots of %q: %w", itemID, err)
	}
	pts, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Point, error) {
		var p Point
		err := r.Scan(&p.At, &p.Reason, &p.ListingCount, &p.Quantity, &p.Lowest, &p.Median, &p.Weighted,
			&p.APIAverage, &p.Truncated, &p.SalesCount, &p.SalesQuantity, &p.SalesVWAP)
		return p, err
	})
	if err != nil {
		return nil, fmt.Errorf("read snapshots of %q: %w", itemID, err)
	}
	return pts, nil
}

func readCandles(ctx context.Context, db Reader, itemID, resolution string, since, until time.Time) ([]Candle, error) {
	rows, err := db.Query(ctx, `
		SELECT bucket, snapshots, open_price, high_price, low_price, close_price, listings_min, listings_max,
		       sales_count, sales_quantity, sales_vwap
		FROM price_candles
		WHERE item_id = $1 AND resolution = $2
		  AND bucket >= date_bin(CASE $2 WHEN '1h' THEN interval '1 hour' ELSE interval '1 day' END, $3::timestamptz, '2000-01-01 00:00:00+00')
		  AND bucket < $4
		ORDER BY bucket`, itemID, resolution, since, until)
	if err != nil {
		return nil, fmt.Errorf("read %s candles of %q: %w", resolution, itemID, err)
	}
	cs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (Candle, error) {
		var c Candle
		err := r.Scan(&c.Bucket, &c.Snapshots, &c.Open, &c.High, &c.Low, &c.Close, &c.ListingsMin, &c.ListingsMax,
			&c.SalesCount, &c.SalesQuantity, &c.SalesVWAP)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("read %s candles of %q: %w", resolution, itemID, err)
	}
	return cs, nil
}

// recentSalesWindow is how far back RecentSales looks first: an item traded at all fills a
// page within it, and the read plans only the partitions it spans.
const recentSalesWindow = 48 * time.Hour

// RecentSales returns an item's newest sales, newest first: one backward walk of the sales key
// that stops after limit rows. It looks within recentSalesWindow of the host's clock first and
// past it only when that holds fewer than limit sales (a clock that is off costs the second
// read, never a sale): unbounded, the planner opens and locks every partition.
func RecentSales(ctx context.Context, db Reader, itemID string, limit int) ([]Sale, error) {
	var out []Sale
	for _, from := range []time.Time{time.Now().Add(-recentSalesWindow), time.Time{}} {
		rows, err := db.Query(ctx, `
			SELECT sold_at, seq, quantity, unit_price, total_price FROM auction_sales WHERE item_id = $1 AND sold_at >= $3
			ORDER BY sold_at DESC, seq DESC LIMIT $2`, itemID, limit, from)
		if err != nil {
			return nil, fmt.Errorf("read sales of %q: %w", itemID, err)
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Sale, error) {
			var s Sale
			return s, r.Scan(&s.SoldAt, &s.Seq, &s.Quantity, &s.UnitPrice, &s.Total)
		})
		if err != nil {
			return nil, fmt.Errorf("read sales of %q: %w", itemID, err)
		}
		if len(out) >= limit {
			break
		}
	}
	return out, nil
}
