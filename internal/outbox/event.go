package outbox

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/store"
)

// SchemaVersion is the version of the snapshot event's JSON value (docs/events.md). 2: events
// only on first, change and heartbeat, with reason, previous_snapshot_at and unchanged_until.
const SchemaVersion = 2

// EventTypeSnapshot is the CloudEvents type of a snapshot event.
const EventTypeSnapshot = "com.duecollector.auction.snapshot.v1"

// SnapshotEvent is each stored snapshot's JSON value; a test keeps docs/events.md and its schema in step.
type SnapshotEvent struct {
	SchemaVersion int    `json:"schema_version"`
	SnapshotID    int64  `json:"snapshot_id"`
	ItemID        string `json:"item_id"`
	ItemName      string `json:"item_name"`
	Tier          string `json:"tier"`
	// Reason is why the snapshot was written: first, change, heartbeat, or repeat
	// (history.mode every). The snapshot holds until the item's next one.
	Reason      string    `json:"reason"`
	CollectedAt time.Time `json:"collected_at"`
	// PreviousSnapshotAt is the collected_at of the item's previous snapshot, and
	// UnchangedUntil the last collection that still saw that snapshot's market (both null
	// for the first): the change happened after UnchangedUntil.
	PreviousSnapshotAt *time.Time `json:"previous_snapshot_at"`
	UnchangedUntil     *time.Time `json:"unchanged_until"`
	ListingCount       int        `json:"listing_count"`
	ListingQuantity    int64      `json:"listing_quantity"`
	LowestUnitPrice    *int64     `json:"lowest_unit_price"`
	MedianUnitPrice    *int64     `json:"median_unit_price"`
	WeightedUnitPrice  *float64   `json:"weighted_unit_price"`
	APIAveragePrice    *int64     `json:"api_average_price"`
	SalesCount         int        `json:"sales_count"`
	SalesQuantity      int64      `json:"sales_quantity"`
	SalesVWAP          *float64   `json:"sales_vwap"`
	ListingsTruncated  bool       `json:"listings_truncated"`
	Packed             bool       `json:"packed"`
	// SalesGap: sales were lost since the previous collection (a full page of only newer sales).
	SalesGap bool `json:"sales_gap"`
}

// EnqueueSnapshots runs in the snapshots' transaction, so an event exists if and only if its snapshot does.
func EnqueueSnapshots(ctx context.Context, tx pgx.Tx, events []SnapshotEvent) error {
	if len(events) == 0 {
		return nil
	}
	items := make([]string, len(events))
	snaps := make([]int64, len(events))
	payloads := make([]string, len(events))
	for i, ev := range events {
		ev.SchemaVersion = SchemaVersion
		b, err := json.Marshal(ev)
		if err != nil {
			return &store.DataError{Err: fmt.Errorf("encode snapshot event for item %s: %w", ev.ItemID, err)}
		}
		items[i], snaps[i], payloads[i] = ev.ItemID, ev.SnapshotID, string(b)
	}
	if _, err := tx.Exec(ctx, enqueueSQL, EventTypeSnapshot, items, snaps, payloads); err != nil {
		return fmt.Errorf("enqueue %d snapshot events: %w", len(events), err)
	}
	return nil
}

// enqueueSQL: $1 type, $2 item ids, $3 snapshot ids, $4 payloads.
const enqueueSQL = `
WITH o AS (
    INSERT INTO outbox (event_type, item_id, snapshot_id, payload)
    SELECT $1, u.item_id, u.snapshot_id, u.payload::json
    FROM unnest($2::text[], $3::bigint[], $4::text[]) AS u(item_id, snapshot_id, payload)
    ON CONFLICT (snapshot_id) DO NOTHING
    RETURNING id, lane),
     p AS (INSERT INTO outbox_pending (id, lane) SELECT id, lane FROM o)
SELECT pg_notify('outbox_pending', '')`
