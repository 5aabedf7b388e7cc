-- The relay's bookkeeping, simplified (issue #18; internal/outbox, doc.go). An outbox row is
--   pending    while outbox_pending lists it (EnqueueSnapshots adds it in the row's own
--              transaction; the relay deletes it, fenced by its lane leases, once Kafka acked),
--   failed     when failed_at is set (the broker rejected it; `collector outbox retry` lists
--              it as pending again),
--   published  otherwise.
-- This replaces the per-statement queue and the publish log of migrations 006-008. Deleting an
-- outbox row (pruning, purge:synthetic) takes its pending entry with it (the foreign key).

DROP VIEW outbox_events;
DROP TRIGGER outbox_enqueue ON outbox;
DROP FUNCTION outbox_enqueue();

CREATE TABLE outbox_pending (
    id   bigint PRIMARY KEY REFERENCES outbox (id) ON DELETE CASCADE,
    lane smallint NOT NULL CHECK (lane BETWEEN 0 AND 15)
);
-- A queue: rows come and go all the time, so vacuum it by a fixed number of dead rows.
ALTER TABLE outbox_pending SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);

INSERT INTO outbox_pending (id, lane)
SELECT o.id, o.lane FROM outbox_queue q, unnest(q.ids) AS u(id) JOIN outbox o ON o.id = u.id
ON CONFLICT DO NOTHING;

DROP TABLE outbox_queue;
DROP FUNCTION outbox_queue_add(bigint[], smallint[]);
DROP TABLE outbox_published;

-- Pruning finds old rows by creation time; rows are appended in that order, which is what a
-- tiny BRIN index needs.
CREATE INDEX outbox_created_brin ON outbox USING brin (created_at) WITH (pages_per_range = 32);

-- A relay that stopped for good (missing topic, authorization, a bug) says why here, for
-- `collector status`; a relay that starts working clears the records.
CREATE TABLE outbox_relay_stops (
    owner      text PRIMARY KEY,
    stopped_at timestamptz NOT NULL DEFAULT now(),
    reason     text NOT NULL
);

-- Every outbox row with its state, for operators (`psql`, docs/events.md) and tests.
CREATE VIEW outbox_events AS
SELECT o.id, o.event_id, o.event_type, o.item_id, o.snapshot_id, o.payload, o.created_at, o.lane,
       o.attempts, o.failed_at, o.last_error,
       CASE WHEN p.id IS NOT NULL THEN 'pending'
            WHEN o.failed_at IS NOT NULL THEN 'failed'
            ELSE 'published' END AS state
FROM outbox o LEFT JOIN outbox_pending p ON p.id = o.id;

---- create above / drop below ----

DROP VIEW outbox_events;
DROP TABLE outbox_relay_stops;
DROP INDEX outbox_created_brin;

CREATE TABLE outbox_published (
    batch_id     bigserial PRIMARY KEY,
    published_at timestamptz NOT NULL DEFAULT now(),
    relay        text NOT NULL,
    first_id     bigint NOT NULL,
    last_id      bigint NOT NULL,
    ids          bigint[] NOT NULL
);
ALTER TABLE outbox_published ALTER COLUMN ids SET STORAGE EXTERNAL;
CREATE INDEX outbox_published_at_idx ON outbox_published (published_at);
CREATE INDEX outbox_published_range_idx ON outbox_published USING gist (int8range(first_id, last_id, '[]'));
INSERT INTO outbox_published (relay, first_id, last_id, ids)
SELECT 'migration 011', min(o.id), max(o.id), array_agg(o.id ORDER BY o.id)
FROM outbox o WHERE o.failed_at IS NULL AND NOT EXISTS (SELECT FROM outbox_pending p WHERE p.id = o.id)
HAVING count(*) > 0;

CREATE TABLE outbox_queue (
    entry_id bigserial PRIMARY KEY,
    ids      bigint[] NOT NULL,
    lanes    smallint[] NOT NULL,
    CONSTRAINT outbox_queue_lanes_check CHECK (cardinality(lanes) = cardinality(ids))
);
ALTER TABLE outbox_queue SET (autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000);

CREATE FUNCTION outbox_queue_add(rows_ids bigint[], rows_lanes smallint[]) RETURNS void
LANGUAGE sql AS $$
    INSERT INTO outbox_queue (ids, lanes)
    SELECT array_agg(id ORDER BY id), array_agg(lane ORDER BY id)
    FROM (SELECT u.id, u.lane, (row_number() OVER (ORDER BY u.id) - 1) / 500 AS chunk
          FROM unnest(rows_ids, rows_lanes) AS u(id, lane)) n
    GROUP BY chunk
    ORDER BY chunk
$$;
SELECT outbox_queue_add(array_agg(id ORDER BY id), array_agg(lane ORDER BY id)) FROM outbox_pending HAVING count(*) > 0;
DROP TABLE outbox_pending;

CREATE FUNCTION outbox_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM outbox_queue_add(array_agg(id), array_agg(lane)) FROM outbox_new WHERE failed_at IS NULL HAVING count(*) > 0;
    PERFORM pg_notify('outbox_pending', '');
    RETURN NULL;
END
$$;
CREATE TRIGGER outbox_enqueue AFTER INSERT ON outbox REFERENCING NEW TABLE AS outbox_new
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_enqueue();

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
