-- Publishing no longer rewrites outbox rows. Setting published_at on each row wrote a whole
-- new version of it (payload included) to the heap and the WAL: more than half of the
-- relay's database work per event. The relay now takes the rows off outbox_pending and
-- writes one row here per acknowledged batch, in the same statement. An outbox row is
--   pending    while it is listed in outbox_pending,
--   failed     when failed_at is set (the broker rejected it for good),
--   published  otherwise; it is listed in exactly one batch here, which says when.
-- Pruning deletes expired batches together with the outbox rows they list.
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

-- The queue trigger no longer sees published_at (a new row is never published yet).
CREATE OR REPLACE FUNCTION outbox_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_pending (id, lane)
    SELECT id, lane FROM outbox_new WHERE failed_at IS NULL;
    PERFORM pg_notify('outbox_pending', '');
    RETURN NULL;
END
$$;

ALTER TABLE outbox DROP COLUMN published_at;
-- Rows are no longer updated on publish, so the free room kept for HOT updates is not needed
-- on new pages; failed rows (rare) still are updated.
ALTER TABLE outbox SET (fillfactor = 100);
-- Pruning goes through outbox_published now, not by creation time.
DROP INDEX outbox_created_brin;

-- Every outbox row with its state and, when published, the batch's publish time: for
-- operators (`psql`, docs/operations.md) and tests. The relay and metrics read the tables.
CREATE VIEW outbox_events AS
SELECT o.id, o.event_id, o.event_type, o.item_id, o.snapshot_id, o.payload, o.created_at, o.lane,
       o.attempts, o.failed_at, o.last_error,
       CASE WHEN p.id IS NOT NULL THEN 'pending'
            WHEN o.failed_at IS NOT NULL THEN 'failed'
            ELSE 'published' END AS state,
       b.published_at
FROM outbox o
LEFT JOIN outbox_pending p ON p.id = o.id
LEFT JOIN LATERAL (
    SELECT b.published_at FROM outbox_published b
    WHERE int8range(b.first_id, b.last_id, '[]') @> o.id AND o.id = ANY (b.ids)
    LIMIT 1) b ON p.id IS NULL AND o.failed_at IS NULL;

---- create above / drop below ----

DROP VIEW outbox_events;
CREATE INDEX outbox_created_brin ON outbox USING brin (created_at) WITH (pages_per_range = 32);
ALTER TABLE outbox SET (fillfactor = 50);
ALTER TABLE outbox ADD COLUMN published_at timestamptz;
UPDATE outbox o SET published_at = b.published_at
FROM (SELECT unnest(ids) AS id, published_at FROM outbox_published) b
WHERE o.id = b.id;
DROP TABLE outbox_published;
CREATE OR REPLACE FUNCTION outbox_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_pending (id, lane)
    SELECT id, lane FROM outbox_new WHERE published_at IS NULL AND failed_at IS NULL;
    PERFORM pg_notify('outbox_pending', '');
    RETURN NULL;
END
$$;
