-- The relay's database work per event, cut down (internal/outbox, doc.go). Before, each event
-- cost a queue row inserted (outbox_pending), read, deleted, and its outbox row rewritten with
-- published_at, payload and all. Now:
--   * the queue holds one entry per lane and inserting statement (at most 500 ids each), so a
--     write-back of 500 snapshots enqueues ~16 entries, and a batch is marked by deleting a
--     few entries;
--   * publishing does not touch outbox rows: each acknowledged batch is one outbox_published
--     row listing its ids.
-- An outbox row is
--   pending    while its id is in an outbox_queue entry,
--   failed     when failed_at is set (the broker rejected it for good),
--   published  otherwise; it is listed in exactly one outbox_published batch, which says when.

-- Entries follow the ids (and so commit order, per item: an item's next snapshot is written
-- only after its previous one committed), and the relay publishes a lane entry by entry, each
-- in id order.
CREATE TABLE outbox_queue (
    entry_id bigserial PRIMARY KEY,
    lane     smallint NOT NULL CHECK (lane BETWEEN 0 AND 15),
    ids      bigint[] NOT NULL CHECK (cardinality(ids) > 0)
);
CREATE INDEX outbox_queue_lane_idx ON outbox_queue (lane, entry_id);
-- A queue: entries come and go all the time. Vacuum it once 1,000 entries are dead whatever
-- its size, so the relay's walks from its head do not step over dead entries for long.
ALTER TABLE outbox_queue SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);

-- Entries of at most 500 ids, so one entry never makes a relay batch unbounded.
CREATE FUNCTION outbox_queue_add(rows_ids bigint[], rows_lanes smallint[]) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO outbox_queue (lane, ids)
    SELECT lane, array_agg(id ORDER BY id)
    FROM (SELECT u.id, u.lane, (row_number() OVER (PARTITION BY u.lane ORDER BY u.id) - 1) / 500 AS chunk
          FROM unnest(rows_ids, rows_lanes) AS u(id, lane)) n
    GROUP BY lane, chunk
    ORDER BY min(id)
$$;

SELECT outbox_queue_add(array_agg(id ORDER BY id), array_agg(lane ORDER BY id)) FROM outbox_pending;

CREATE OR REPLACE FUNCTION outbox_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM outbox_queue_add(array_agg(id), array_agg(lane)) FROM outbox_new WHERE failed_at IS NULL HAVING count(*) > 0;
    PERFORM pg_notify('outbox_pending', '');
    RETURN NULL;
END
$$;

DROP TABLE outbox_pending;

CREATE TABLE outbox_published (
    batch_id     bigserial PRIMARY KEY,
    published_at timestamptz NOT NULL DEFAULT now(),
    relay        text NOT NULL,
    first_id     bigint NOT NULL,
    last_id      bigint NOT NULL,
    ids          bigint[] NOT NULL
);
CREATE INDEX outbox_published_at_idx ON outbox_published (published_at);
-- Which batch published row N (outbox_events below): the batches whose id range holds N.
CREATE INDEX outbox_published_range_idx ON outbox_published USING gist (int8range(first_id, last_id, '[]'));

-- Rows published before this migration become one batch per publish time.
INSERT INTO outbox_published (published_at, relay, first_id, last_id, ids)
SELECT published_at, 'migration 006', min(id), max(id), array_agg(id ORDER BY id)
FROM outbox WHERE published_at IS NOT NULL AND failed_at IS NULL
GROUP BY published_at;

ALTER TABLE outbox DROP COLUMN published_at;
-- Rows are no longer updated on publish, so the free room kept for HOT updates is not needed
-- on new pages; failed rows (rare) still are updated.
ALTER TABLE outbox SET (fillfactor = 100);
-- Pruning goes through outbox_published now, not by creation time.
DROP INDEX outbox_created_brin;

-- Every outbox row with its state and, when published, the batch's publish time: for
-- operators (`psql`, docs/events.md) and tests. The relay and metrics read the tables.
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

---- create above / drop below ----

DROP VIEW outbox_events;
CREATE INDEX outbox_created_brin ON outbox USING brin (created_at) WITH (pages_per_range = 32);
ALTER TABLE outbox SET (fillfactor = 50);
ALTER TABLE outbox ADD COLUMN published_at timestamptz;
UPDATE outbox o SET published_at = b.published_at
FROM (SELECT unnest(ids) AS id, published_at FROM outbox_published) b
WHERE o.id = b.id;
DROP TABLE outbox_published;

CREATE TABLE outbox_pending (
    id   bigint PRIMARY KEY REFERENCES outbox (id) ON DELETE CASCADE,
    lane smallint NOT NULL
);
CREATE INDEX outbox_pending_lane_idx ON outbox_pending (lane, id);
INSERT INTO outbox_pending (id, lane)
SELECT o.id, o.lane FROM outbox_queue q, unnest(q.ids) AS u(id) JOIN outbox o ON o.id = u.id;
DROP TABLE outbox_queue;

CREATE OR REPLACE FUNCTION outbox_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_pending (id, lane)
    SELECT id, lane FROM outbox_new WHERE published_at IS NULL AND failed_at IS NULL;
    PERFORM pg_notify('outbox_pending', '');
    RETURN NULL;
END
$$;
DROP FUNCTION outbox_queue_add(bigint[], smallint[]);
