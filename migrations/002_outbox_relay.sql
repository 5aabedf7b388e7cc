-- Outbox relay: lanes for per-item order across several relays, lane leases, a wake-up
-- notification and the indexes the relay, the pruner and `collector outbox` use.

-- Every row belongs to one of 16 lanes by a stable hash of its item_id, so all events of one
-- item share a lane. A relay publishes a lane only while it holds that lane's lease, in id
-- order, which keeps per-item order with any number of relays running (internal/outbox).
-- hashtextextended is immutable (it backs hash partitioning), so the lane never changes.
-- Adding a stored column rewrites the table once; the outbox is small (rows are pruned).
ALTER TABLE outbox ADD COLUMN lane smallint NOT NULL
    GENERATED ALWAYS AS ((hashtextextended(item_id, 0) & 15)::smallint) STORED;

-- The relay reads the oldest pending rows of each lane it holds; the (id)-only index of 001
-- would make it walk other relays' rows.
DROP INDEX outbox_pending_idx;
CREATE INDEX outbox_lane_pending_idx ON outbox (lane, id) WHERE published_at IS NULL AND failed_at IS NULL;
-- Pruning deletes the oldest published rows; `collector outbox list --failed` reads failed rows.
CREATE INDEX outbox_published_idx ON outbox (published_at) WHERE published_at IS NOT NULL;
CREATE INDEX outbox_failed_idx ON outbox (id) WHERE failed_at IS NOT NULL;

-- One row per lane. lease_token is new for every acquisition, and marking rows published is
-- fenced by it: a relay that lost its lane (paused past its lease) cannot mark anything.
CREATE TABLE outbox_relay_lanes (
    lane             smallint PRIMARY KEY CHECK (lane BETWEEN 0 AND 15),
    owner            text,
    lease_token      uuid,
    lease_expires_at timestamptz,
    acquired_at      timestamptz
);

INSERT INTO outbox_relay_lanes (lane) SELECT generate_series(0, 15);

-- Wakes a following relay when rows commit, instead of it polling the table. A statement-level
-- trigger sends one notification per INSERT, and PostgreSQL folds identical notifications of a
-- transaction into one, delivered at commit.
CREATE FUNCTION outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outbox_pending', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER outbox_notify AFTER INSERT ON outbox FOR EACH STATEMENT EXECUTE FUNCTION outbox_notify();

---- create above / drop below ----

DROP TRIGGER outbox_notify ON outbox;
DROP FUNCTION outbox_notify();
DROP TABLE outbox_relay_lanes;
DROP INDEX outbox_failed_idx;
DROP INDEX outbox_published_idx;
DROP INDEX outbox_lane_pending_idx;
ALTER TABLE outbox DROP COLUMN lane;
CREATE INDEX outbox_pending_idx ON outbox (id) WHERE published_at IS NULL AND failed_at IS NULL;
