-- Outbox relay: lanes for per-item order across several relays, lane leases, a queue of
-- pending rows, a wake-up notification, and what pruning needs (internal/outbox).

-- Every row belongs to one of 16 lanes by a stable hash of its item_id, so all events of one
-- item share a lane. A relay publishes a lane only while it holds that lane's lease, in id
-- order, which keeps per-item order with any number of relays running.
-- hashtextextended is immutable (it backs hash partitioning), so a row's lane never changes.
-- Adding a stored column rewrites the table once; the outbox is small (rows are pruned).
ALTER TABLE outbox ADD COLUMN lane smallint NOT NULL
    GENERATED ALWAYS AS ((hashtextextended(item_id, 0) & 15)::smallint) STORED;

-- Pending rows are listed in outbox_pending instead of a partial index on outbox: marking a
-- row published then changes no indexed column of outbox, so with free room on the page
-- (fillfactor) it is a HOT update that touches none of outbox's indexes; the relay's cost per
-- event is a small delete plus that update. A row is pending exactly while it is listed here.
ALTER TABLE outbox SET (fillfactor = 50);
DROP INDEX outbox_pending_idx;

CREATE TABLE outbox_pending (
    id   bigint PRIMARY KEY REFERENCES outbox (id) ON DELETE CASCADE,
    lane smallint NOT NULL
);
CREATE INDEX outbox_pending_lane_idx ON outbox_pending (lane, id);

INSERT INTO outbox_pending (id, lane)
SELECT id, lane FROM outbox WHERE published_at IS NULL AND failed_at IS NULL;

-- Failed rows for `collector outbox list --failed` (failed_at does not change on publish).
CREATE INDEX outbox_failed_idx ON outbox (id) WHERE failed_at IS NOT NULL;
-- Pruning finds old rows by creation time; rows stay in insertion order on disk (HOT updates,
-- appends), which is what a tiny BRIN index needs.
CREATE INDEX outbox_created_brin ON outbox USING brin (created_at) WITH (pages_per_range = 32);

-- One row per lane. lease_token is new for every acquisition, and marking rows is fenced by
-- it: a relay that lost its lane (paused past its lease) cannot mark anything there.
CREATE TABLE outbox_relay_lanes (
    lane             smallint PRIMARY KEY CHECK (lane BETWEEN 0 AND 15),
    owner            text,
    lease_token      uuid,
    lease_expires_at timestamptz,
    acquired_at      timestamptz
);

INSERT INTO outbox_relay_lanes (lane) SELECT generate_series(0, 15);

-- Every inserted row joins the queue, whoever inserts it, and a following relay is woken
-- instead of polling. Statement-level: one notification per INSERT, and PostgreSQL folds the
-- notifications of a transaction into one, delivered at commit.
CREATE FUNCTION outbox_enqueue() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO outbox_pending (id, lane)
    SELECT id, lane FROM outbox_new WHERE published_at IS NULL AND failed_at IS NULL;
    PERFORM pg_notify('outbox_pending', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_enqueue AFTER INSERT ON outbox REFERENCING NEW TABLE AS outbox_new
    FOR EACH STATEMENT EXECUTE FUNCTION outbox_enqueue();

---- create above / drop below ----

DROP TRIGGER outbox_enqueue ON outbox;
DROP FUNCTION outbox_enqueue();
DROP TABLE outbox_relay_lanes;
DROP INDEX outbox_created_brin;
DROP INDEX outbox_failed_idx;
DROP TABLE outbox_pending;
ALTER TABLE outbox RESET (fillfactor);
ALTER TABLE outbox DROP COLUMN lane;
CREATE INDEX outbox_pending_idx ON outbox (id) WHERE published_at IS NULL AND failed_at IS NULL;
