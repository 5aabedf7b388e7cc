-- The relay's queue, one entry per inserting statement instead of one per lane and statement
-- (internal/outbox, doc.go). With the collector's write-backs of 50 snapshots spread over 16
-- lanes, an entry held ~3 ids: the relay read ~700 entries and probed the primary key ~2,000
-- times per 2,000 events, and deleted the ~700 entries again, most of PostgreSQL's share of the
-- relay's cost. Now an entry holds a statement's ids (at most 500, in id order) and, in step,
-- their lanes: a relay holding every lane reads an entry's rows with one range scan of the
-- primary key when its ids are consecutive (the usual case), and deletes it whole. Relays
-- that split the lanes each take their lanes' ids out of an entry; the last one deletes it.
DROP VIEW outbox_events;
ALTER TABLE outbox_queue ADD COLUMN lanes smallint[];
UPDATE outbox_queue SET lanes = array_fill(lane, ARRAY[cardinality(ids)]);
ALTER TABLE outbox_queue ALTER COLUMN lanes SET NOT NULL;
-- An entry whose ids were all taken out is deleted in the same transaction (outbox.recordOutcome).
ALTER TABLE outbox_queue DROP CONSTRAINT outbox_queue_ids_check;
ALTER TABLE outbox_queue ADD CONSTRAINT outbox_queue_lanes_check CHECK (cardinality(lanes) = cardinality(ids));
DROP INDEX outbox_queue_lane_idx;
ALTER TABLE outbox_queue DROP COLUMN lane;

CREATE OR REPLACE FUNCTION outbox_queue_add(rows_ids bigint[], rows_lanes smallint[]) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO outbox_queue (ids, lanes)
    SELECT array_agg(id ORDER BY id), array_agg(lane ORDER BY id)
    FROM (SELECT u.id, u.lane, (row_number() OVER (ORDER BY u.id) - 1) / 500 AS chunk
          FROM unnest(rows_ids, rows_lanes) AS u(id, lane)) n
    GROUP BY chunk
    ORDER BY chunk
$$;

-- Pending rows are found by joining the queue's ids once (the queue holds only what waits).
CREATE VIEW outbox_events AS
SELECT o.id, o.event_id, o.event_type, o.item_id, o.snapshot_id, o.payload, o.created_at, o.lane,
       o.attempts, o.failed_at, o.last_error,
       CASE WHEN p.id IS NOT NULL THEN 'pending'
            WHEN o.failed_at IS NOT NULL THEN 'failed'
            ELSE 'published' END AS state,
       b.published_at
FROM outbox o
LEFT JOIN (SELECT unnest(q.ids) AS id FROM outbox_queue q) p ON p.id = o.id
LEFT JOIN LATERAL (
    SELECT b.published_at FROM outbox_published b
    WHERE int8range(b.first_id, b.last_id, '[]') @> o.id AND o.id = ANY (b.ids)
    LIMIT 1) b ON p.id IS NULL AND o.failed_at IS NULL;

---- create above / drop below ----

DROP VIEW outbox_events;
CREATE TABLE outbox_queue_006 (
    entry_id bigserial PRIMARY KEY,
    lane     smallint NOT NULL CHECK (lane BETWEEN 0 AND 15),
    ids      bigint[] NOT NULL CHECK (cardinality(ids) > 0)
);
INSERT INTO outbox_queue_006 (lane, ids)
SELECT u.lane, array_agg(u.id ORDER BY u.id)
FROM outbox_queue q, unnest(q.ids, q.lanes) AS u(id, lane)
GROUP BY q.entry_id, u.lane
ORDER BY q.entry_id, min(u.id);
DROP TABLE outbox_queue;
ALTER TABLE outbox_queue_006 RENAME TO outbox_queue;
ALTER SEQUENCE outbox_queue_006_entry_id_seq RENAME TO outbox_queue_entry_id_seq;
ALTER INDEX outbox_queue_006_pkey RENAME TO outbox_queue_pkey;
ALTER TABLE outbox_queue RENAME CONSTRAINT outbox_queue_006_lane_check TO outbox_queue_lane_check;
ALTER TABLE outbox_queue RENAME CONSTRAINT outbox_queue_006_ids_check TO outbox_queue_ids_check;
CREATE INDEX outbox_queue_lane_idx ON outbox_queue (lane, entry_id);
ALTER TABLE outbox_queue SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);

CREATE OR REPLACE FUNCTION outbox_queue_add(rows_ids bigint[], rows_lanes smallint[]) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO outbox_queue (lane, ids)
    SELECT lane, array_agg(id ORDER BY id)
    FROM (SELECT u.id, u.lane, (row_number() OVER (PARTITION BY u.lane ORDER BY u.id) - 1) / 500 AS chunk
          FROM unnest(rows_ids, rows_lanes) AS u(id, lane)) n
    GROUP BY lane, chunk
    ORDER BY min(id)
$$;

CREATE VIEW outbox_events AS
SELECT o.id, o.event_id, o.event_type, o.item_id, o.snapshot_id, o.payload, o.created_at, o.lane,
       o.attempts, o.failed_at, o.last_error,
       CASE WHEN q.pending THEN 'pending'
            WHEN o.failed_at IS NOT NULL THEN 'failed'
            ELSE 'published' END AS state,
       b.published_at
FROM outbox o
CROSS JOIN LATERAL (
    SELECT EXISTS (SELECT FROM outbox_queue q WHERE q.lane = o.lane AND o.id = ANY (q.ids)) AS pending) q
LEFT JOIN LATERAL (
    SELECT b.published_at FROM outbox_published b
    WHERE int8range(b.first_id, b.last_id, '[]') @> o.id AND o.id = ANY (b.ids)
    LIMIT 1) b ON NOT q.pending AND o.failed_at IS NULL;
