-- The collector's schema. Table names are a contract with other services; columns may grow.

-- Items and their schedule ---------------------------------------------------------------------

-- tracked_items is rewritten on every claim and every reschedule: a lower fillfactor keeps
-- those updates on their page (and HOT, heap-only with no index churn, as long as no indexed
-- column changes). Columns are ordered by how often they change, rarest first: PostgreSQL logs
-- an update that stays on its page as only the bytes between the row's unchanged prefix and
-- suffix, so what every collection changes (estimates, outcome, schedule, lease) sits together
-- at the end, and the rest of the row is not logged again.
CREATE TABLE tracked_items (
    item_id                 text PRIMARY KEY,
    -- As long as the provider's names are kept (provider.MaxNameRunes, and the ellipsis Clean
    -- ends a cut one with): the read API's copy of /latest and the console hold every name.
    item_name               text NOT NULL CHECK (char_length(item_name) <= 201),

    -- Tier and schedule.
    collection_tier         text NOT NULL DEFAULT 'WARM_5M'
        CHECK (collection_tier IN ('HOT_1M', 'ACTIVE_3M', 'WARM_5M', 'COLD_10M', 'DORMANT')),
    -- An operator's tier for the budget planner, which otherwise chooses one.
    pinned_tier             text
        CHECK (pinned_tier IN ('HOT_1M', 'ACTIVE_3M', 'WARM_5M', 'COLD_10M')),
    tier_changed_at         timestamptz,
    tier_reason             text,
    popularity_score        double precision NOT NULL DEFAULT 0,
    -- What one collection is expected to cost in provider requests at its tier: 2 when the item
    -- has its own calls, less when it shares packed (itemIds) calls. Popularity recalculation
    -- writes it with the tier; status, the demand gauges and the budget planner sum it, so the
    -- demand they show is what the daemon really spends. New items start at 2: their first
    -- collection is alone.
    requests_per_collection real NOT NULL DEFAULT 2
        CHECK (requests_per_collection > 0 AND requests_per_collection < 'Infinity'), -- not NaN either
    created_at              timestamptz NOT NULL DEFAULT now(),

    -- The market of the item's last snapshot (internal/history): a collection that sees the
    -- same, and no new sale, writes no snapshot, only last_collected_at, so the last snapshot
    -- held at least until then. last_snapshot_at is that snapshot's collected_at, for the
    -- heartbeat.
    seen_lowest_price       bigint,
    seen_median_price       bigint,
    seen_weighted_price     double precision,
    seen_api_average_price  bigint,
    seen_listing_count      integer,
    seen_listing_quantity   bigint,
    seen_truncated          boolean,
    last_snapshot_at        timestamptz,

    -- The newest sale stored. A re-fetch of /df/auction-sold returns up to 100 sales, nearly all
    -- stored already; with this watermark only the sales of that second and newer are offered to
    -- the insert, instead of a page of rows that all conflict.
    last_sale_at            timestamptz,
    -- How many sales of last_sale_at's second are stored (their positions 0..n-1, the key's seq):
    -- with it the write-back knows which sales of a response are new before it writes anything,
    -- so it decides change or no change up front and fences with the item's own UPDATE.
    last_second_sales       integer NOT NULL DEFAULT 0,

    -- Lost-sale gaps the sales estimator saw (a gap is rare).
    sales_gaps              bigint NOT NULL DEFAULT 0,

    -- What write-backs learn, for the estimators in internal/tierplan: decayed counts of
    -- collections, detected changes and the time they spanned (the change rate), new sales over
    -- that time (the sales rate).
    est_collections         double precision NOT NULL DEFAULT 0,
    est_changes             double precision NOT NULL DEFAULT 0,
    est_changed_seconds     double precision NOT NULL DEFAULT 0,
    est_unchanged_seconds   double precision NOT NULL DEFAULT 0,
    est_sales               double precision NOT NULL DEFAULT 0,
    -- A count the arithmetic ever made infinite would make every recalculation's forecast NaN:
    -- refused here, the write-back keeps that item's old counts (write_refused) instead.
    CHECK (est_collections >= 0 AND est_collections < 'Infinity' AND est_changes >= 0 AND est_changes < 'Infinity'
           AND est_changed_seconds >= 0 AND est_changed_seconds < 'Infinity'
           AND est_unchanged_seconds >= 0 AND est_unchanged_seconds < 'Infinity'
           AND est_sales >= 0 AND est_sales < 'Infinity'),

    -- Outcome of the last collection.
    last_collected_at       timestamptz,          -- last successful collection
    last_attempt_at         timestamptz,
    last_outcome            text,                 -- ok | item_error | transient | rate_limited | config | ...
    failure_streak          integer NOT NULL DEFAULT 0,
    last_error              text,
    next_collect_at         timestamptz,          -- NULL = not scheduled (DORMANT)

    updated_at              timestamptz NOT NULL DEFAULT now(),

    -- The claim's lease.
    lease_expires_at        timestamptz,
    lease_token             uuid,
    leased_by               text,
    last_claimed_at         timestamptz,
    -- The schedule the last claim served, so `collector status` can report due→claim lag
    -- (last_claimed_at - last_due_at). Every claim statement sets it.
    last_due_at             timestamptz,

    CHECK (collection_tier <> 'DORMANT' OR next_collect_at IS NULL),
    -- An infinite time (an operator's '-infinity' to make an item due) cannot be scanned into
    -- Go or subtracted: the claim would lease a batch it cannot read, over and over.
    CHECK (isfinite(next_collect_at) AND isfinite(last_sale_at) AND isfinite(last_collected_at)
           AND isfinite(last_attempt_at) AND isfinite(last_snapshot_at) AND isfinite(tier_changed_at)
           AND isfinite(lease_expires_at) AND isfinite(last_claimed_at) AND isfinite(last_due_at)
           AND isfinite(created_at) AND isfinite(updated_at)),
    -- Not NaN nor ±Infinity (NaN sorts above 'Infinity'): the read API and the console encode them.
    CHECK (popularity_score > '-Infinity' AND popularity_score < 'Infinity'
           AND seen_weighted_price > '-Infinity' AND seen_weighted_price < 'Infinity')
) WITH (fillfactor = 70);

-- Which text of this file made the schema (migrations.Revision, filled in when it is applied):
-- until the first release this file changes in place at version 1, and store's schema checks
-- refuse a database made by an earlier text instead of failing later on what it lacks.
COMMENT ON TABLE tracked_items IS 'duecollector schema {{ .revision }}';

-- Only scheduled rows are ever claimed; DORMANT rows (NULL) stay out of the index entirely.
-- The tier leads: a claim takes the most urgent tier first, each tier in due order, and reads
-- one range per tier in index order instead of sorting the whole due backlog. Reads of the
-- earliest due item overall take the first row of each tier's range.
CREATE INDEX tracked_items_due_idx ON tracked_items (collection_tier, next_collect_at) WHERE next_collect_at IS NOT NULL;

-- The console's item list (catalog.BrowseItems) pages by keyset, each filter down an index in
-- its own order, so a page never costs the catalog's size. Every write-back moves
-- next_collect_at, so it is never a HOT update and adds an entry to each index on
-- tracked_items: only partial indexes whose rows are few (pinned items, items with sales gaps)
-- live here. The orders every item takes part in (popularity, tier and popularity, name) live
-- on item_browse, a copy of the columns they sort by that only imports, recalculations and
-- tier changes write (a trigger keeps it, so no writer can forget).
CREATE INDEX tracked_items_pinned_idx ON tracked_items (popularity_score, item_id) WHERE pinned_tier IS NOT NULL;
CREATE INDEX tracked_items_gaps_idx ON tracked_items (sales_gaps, item_id) WHERE sales_gaps > 0;

CREATE TABLE item_browse (
    item_id  text PRIMARY KEY REFERENCES tracked_items (item_id) ON DELETE CASCADE,
    -- Name search is a case-insensitive prefix; in the "C" collation LIKE 'prefix%' is an
    -- index range.
    name_key text COLLATE "C" NOT NULL,
    score    double precision NOT NULL,
    tier     text NOT NULL
);

CREATE INDEX item_browse_score_idx ON item_browse (score, item_id);
CREATE INDEX item_browse_tier_score_idx ON item_browse (tier, score, item_id);
CREATE INDEX item_browse_name_idx ON item_browse (name_key, item_id);

CREATE FUNCTION item_browse_insert() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO item_browse (item_id, name_key, score, tier)
    SELECT item_id, lower(item_name), popularity_score, collection_tier FROM new_items
    ON CONFLICT (item_id) DO UPDATE SET name_key = excluded.name_key, score = excluded.score, tier = excluded.tier;
    RETURN NULL;
END
$$;

CREATE FUNCTION item_browse_update() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE item_browse SET name_key = lower(NEW.item_name), score = NEW.popularity_score, tier = NEW.collection_tier
    WHERE item_id = NEW.item_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER item_browse_insert AFTER INSERT ON tracked_items
    REFERENCING NEW TABLE AS new_items FOR EACH STATEMENT EXECUTE FUNCTION item_browse_insert();
-- Fires only for statements that set one of these columns: never for claims and write-backs.
CREATE TRIGGER item_browse_update AFTER UPDATE OF item_name, popularity_score, collection_tier ON tracked_items
    FOR EACH ROW WHEN (OLD.item_name IS DISTINCT FROM NEW.item_name OR OLD.popularity_score IS DISTINCT FROM NEW.popularity_score
                       OR OLD.collection_tier IS DISTINCT FROM NEW.collection_tier)
    EXECUTE FUNCTION item_browse_update();

-- Wakes sleeping daemons when an item becomes due earlier than it was (import, touch, a tier
-- promotion). Write-backs move next_collect_at later and stay silent, so a busy cluster does
-- not wake itself on every write. PostgreSQL folds identical notifications of a transaction
-- into one. Daemons never depend on it (PgBouncer in transaction mode drops LISTEN).
CREATE FUNCTION tracked_items_due_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('tracked_items_due', '');
    RETURN NULL;
END
$$;

CREATE TRIGGER tracked_items_due_insert AFTER INSERT ON tracked_items
    FOR EACH ROW WHEN (NEW.next_collect_at IS NOT NULL)
    EXECUTE FUNCTION tracked_items_due_notify();

CREATE TRIGGER tracked_items_due_update AFTER UPDATE OF next_collect_at ON tracked_items
    FOR EACH ROW WHEN (NEW.next_collect_at IS NOT NULL
                       AND (OLD.next_collect_at IS NULL OR NEW.next_collect_at < OLD.next_collect_at))
    EXECUTE FUNCTION tracked_items_due_notify();

-- Items handed back at shutdown (lease released, schedule untouched, so due) are claimable at
-- once: tell the sleeping instances instead of leaving them to their lease-expiry wake-up.
-- Write-backs also clear the lease but move next_collect_at into the future, so stay silent.
CREATE TRIGGER tracked_items_due_release AFTER UPDATE OF lease_token ON tracked_items
    FOR EACH ROW WHEN (OLD.lease_token IS NOT NULL AND NEW.lease_token IS NULL
                       AND NEW.next_collect_at IS NOT NULL AND NEW.next_collect_at <= now())
    EXECUTE FUNCTION tracked_items_due_notify();

-- Interest signals written by other services (views, watches); read by popularity scoring.
CREATE TABLE item_interest (
    id          bigserial PRIMARY KEY,
    item_id     text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('view', 'watch', 'touch')),
    -- Other services insert here directly: a weight or time the scoring cannot use would fail
    -- every recalculation, so it is refused at the insert, where its writer sees why.
    -- Capped well below where the scoring's sums and products leave double precision.
    weight      double precision NOT NULL DEFAULT 1 CHECK (weight >= 0 AND weight <= 1e9),
    occurred_at timestamptz NOT NULL DEFAULT now() CHECK (isfinite(occurred_at)),
    source      text NOT NULL DEFAULT ''
);

CREATE INDEX item_interest_item_idx ON item_interest (item_id, occurred_at DESC);

-- Provider health -------------------------------------------------------------------------------

CREATE TABLE provider_status (
    provider        text PRIMARY KEY,
    status          text NOT NULL CHECK (status IN ('HEALTHY', 'DEGRADED', 'MAINTENANCE', 'RECOVERING')),
    reason          text NOT NULL DEFAULT '',
    since           timestamptz NOT NULL DEFAULT now(),
    -- A manual override wins over the automatic status while it is active.
    override_status text CHECK (override_status IN ('HEALTHY', 'DEGRADED', 'MAINTENANCE', 'RECOVERING')),
    override_reason text,
    override_since  timestamptz,
    override_until  timestamptz,            -- NULL with an override_status = until cleared
    updated_at      timestamptz NOT NULL DEFAULT now(),
    -- Every pass of every collector reads this row: a time it cannot scan ('infinity' for
    -- "forever", which NULL says) would stop collection everywhere.
    CHECK (isfinite(since) AND isfinite(override_since) AND isfinite(override_until) AND isfinite(updated_at))
);

INSERT INTO provider_status (provider, status, reason) VALUES ('neople', 'HEALTHY', 'initial');

-- The provider's recent transitions, for the console: every change of the automatic status or
-- of the manual override, whoever made it (a trigger, so no writer can forget). Transitions are
-- rare; the newest 200 per provider are kept.
CREATE TABLE provider_status_log (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    provider   text NOT NULL,
    at         timestamptz NOT NULL DEFAULT now() CHECK (isfinite(at)),
    kind       text NOT NULL CHECK (kind IN ('automatic', 'override', 'override cleared')),
    status     text,          -- the automatic status, or the override's (NULL when cleared)
    reason     text NOT NULL DEFAULT ''
);

CREATE INDEX provider_status_log_provider_idx ON provider_status_log (provider, id);

CREATE FUNCTION provider_status_log_write() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' OR NEW.status IS DISTINCT FROM OLD.status OR NEW.since IS DISTINCT FROM OLD.since THEN
        INSERT INTO provider_status_log (provider, kind, status, reason) VALUES (NEW.provider, 'automatic', NEW.status, NEW.reason);
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.override_status IS NOT NULL AND NEW.override_status IS NULL THEN
        INSERT INTO provider_status_log (provider, kind, status, reason) VALUES (NEW.provider, 'override cleared', NULL, '');
    ELSIF NEW.override_status IS NOT NULL AND (TG_OP = 'INSERT' OR NEW.override_since IS DISTINCT FROM OLD.override_since) THEN
        INSERT INTO provider_status_log (provider, kind, status, reason) VALUES (NEW.provider, 'override', NEW.override_status, coalesce(NEW.override_reason, ''));
    END IF;
    DELETE FROM provider_status_log WHERE provider = NEW.provider
        AND id <= (SELECT id FROM provider_status_log WHERE provider = NEW.provider ORDER BY id DESC OFFSET 200 LIMIT 1);
    RETURN NULL;
END
$$;

CREATE TRIGGER provider_status_log AFTER INSERT OR UPDATE ON provider_status
    FOR EACH ROW EXECUTE FUNCTION provider_status_log_write();

-- One probe at a time per provider, across every instance: the probe is leased like an item,
-- and its back-off grows with failures within one outage (episode = provider_status.since).
CREATE TABLE provider_probe (
    provider         text PRIMARY KEY,
    episode_since    timestamptz NOT NULL,
    failures         integer NOT NULL DEFAULT 0,
    next_probe_at    timestamptz NOT NULL,
    leased_by        text,
    lease_expires_at timestamptz,
    last_result      text,
    updated_at       timestamptz NOT NULL DEFAULT now(),
    CHECK (isfinite(episode_since) AND isfinite(next_probe_at) AND isfinite(lease_expires_at) AND isfinite(updated_at))
);

-- Whether packed (itemIds) calls are used, per endpoint, for the whole cluster. A shadow
-- verification mismatch switches an endpoint off until an operator turns it back on.
CREATE TABLE packing_state (
    endpoint   text PRIMARY KEY CHECK (endpoint IN ('/df/auction', '/df/auction-sold')),
    enabled    boolean NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now() CHECK (isfinite(changed_at)),
    reason     text
);

-- Budgets of the API keys -----------------------------------------------------------------------

-- Live collector processes. Each heartbeats one row per API key it spends (key_label is a
-- hash, never the key); the live rows of a key divide its budget (internal/budget).
CREATE TABLE collector_instances (
    key_label    text NOT NULL,
    instance     text NOT NULL,
    host         text NOT NULL DEFAULT '',
    pid          integer NOT NULL DEFAULT 0,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    used         bigint NOT NULL DEFAULT 0,    -- requests sent, cumulative (for status)
    share        double precision NOT NULL DEFAULT 0, -- requests/s this instance may send
    PRIMARY KEY (key_label, instance),
    -- An 'infinity' heartbeat would count an instance live, and take its share, for good.
    CHECK (isfinite(started_at) AND isfinite(heartbeat_at) AND share >= 0 AND share < 'Infinity')
);

-- A rate-limit answer puts the whole key into a cool-down that every instance honours.
CREATE TABLE budget_cooldowns (
    key_label text PRIMARY KEY,
    until     timestamptz NOT NULL CHECK (isfinite(until)),
    reason    text NOT NULL DEFAULT ''
);

-- The cluster rate each API key may use, learned from the provider's answers (AIMD): cut on a
-- rate-limit answer, raised step by step toward the configured ceiling while no cut happens;
-- before any answer, a slow start's ramp.
CREATE TABLE budget_rates (
    key_label  text PRIMARY KEY,
    rate       double precision NOT NULL,          -- requests per second, the whole cluster
    cut_from   double precision,                   -- the rate the last cut started from
    cut_at     timestamptz,                        -- the last cut (held for a while after it)
    changed_at timestamptz NOT NULL DEFAULT now(), -- the last cut or step up
    reason     text,                               -- the answer that caused the last cut
    -- Slow start: nothing is learned yet (no rate-limit answer, ceiling not reached); rate is
    -- the cluster's ramp from a conservative start, doubled each second it is used.
    slow_start boolean NOT NULL DEFAULT false,
    CHECK (rate > 0 AND rate < 'Infinity' AND cut_from > 0 AND cut_from < 'Infinity'
           AND isfinite(cut_at) AND isfinite(changed_at))
);

-- Collected data --------------------------------------------------------------------------------

-- What the last tier plan predicted, per scheduled tier, for the console and `collector status`:
-- they read it instead of planning on their request path. Popularity recalculation
-- (internal/catalog, under either catalog.policy) rewrites every row in the transaction that
-- applies the plan; a tier the plan left empty has no row.
CREATE TABLE tier_forecast (
    tier       text PRIMARY KEY CHECK (tier IN ('HOT_1M', 'ACTIVE_3M', 'WARM_5M', 'COLD_10M')),
    items      integer NOT NULL CHECK (items > 0),
    -- Requests per second the tier's items ask at the costs the plan counted.
    demand     double precision NOT NULL CHECK (demand >= 0 AND demand < 'Infinity'),
    -- Predicted, not measured: the share of time an item's stored copy matches the market,
    -- weighted by popularity (internal/tierplan.Freshness, Cho & Garcia-Molina).
    freshness  double precision NOT NULL CHECK (freshness BETWEEN 0 AND 1),
    -- The tier's items' summed popularity: what its freshness weighs in the whole catalog's.
    weight     double precision NOT NULL CHECK (weight >= 0 AND weight < 'Infinity'),
    planned_at timestamptz NOT NULL CHECK (isfinite(planned_at))
);

-- auction_snapshots and auction_sales are partitioned by time (internal/history keeps them:
-- partitions created ahead, those past retention detached and dropped whole, never deleted row
-- by row). An archive partition from MINVALUE holds what is older than the regular ones (a
-- first collection's old sales), so no time is without a home. Keys include the partition
-- column, as PostgreSQL requires.

-- A snapshot holds from its collected_at until the item's next one: history.mode changes
-- writes one only when the market changed, at the first collection, or on the heartbeat.
CREATE TABLE auction_snapshots (
    snapshot_id         bigint GENERATED ALWAYS AS IDENTITY,
    item_id             text NOT NULL,
    claim_token         uuid NOT NULL,
    collected_at        timestamptz NOT NULL,
    tier                text NOT NULL,
    reason              text NOT NULL DEFAULT 'change' CHECK (reason IN ('first', 'change', 'heartbeat', 'repeat')),
    listing_count       integer NOT NULL,
    listing_quantity    bigint NOT NULL,
    lowest_unit_price   bigint,
    median_unit_price   bigint,
    weighted_unit_price double precision,
    api_average_price   bigint,
    sales_count         integer NOT NULL DEFAULT 0,
    sales_quantity      bigint NOT NULL DEFAULT 0,
    sales_vwap          double precision,
    -- How the snapshot was fetched. listings_truncated: the listings answer reached the API's
    -- 400-row cap, so its median and quantity describe only the cheapest 400. packed: the item
    -- shared an itemIds call with other items (and its part was proven complete).
    listings_truncated  boolean NOT NULL DEFAULT false,
    packed              boolean NOT NULL DEFAULT false,
    -- The item's last collection before this one, which saw the previous snapshot's market
    -- unchanged (NULL on an item's first snapshot): the previous state held at least until
    -- then, so a candle bucket entered before this snapshot opens with it.
    previous_seen_at    timestamptz,
    CHECK (isfinite(collected_at) AND isfinite(previous_seen_at)
           AND weighted_unit_price > '-Infinity' AND weighted_unit_price < 'Infinity'
           AND sales_vwap > '-Infinity' AND sales_vwap < 'Infinity'),
    -- Reads go by item and time; the key is also that index.
    PRIMARY KEY (item_id, collected_at, snapshot_id),
    -- One snapshot per claim: a retried write-back of the same claim (same collected_at)
    -- cannot insert twice.
    UNIQUE (claim_token, collected_at)
) PARTITION BY RANGE (collected_at);

-- snapshot_id is in every event, and consumers order by it: it starts at the time the schema
-- is made, in microseconds since 1970, so a database made again goes on past the ids the old
-- one published instead of repeating them (a JSON number stays exact until 2255).
SELECT setval(pg_get_serial_sequence('auction_snapshots', 'snapshot_id'),
              (extract(epoch FROM clock_timestamp()) * 1e6)::bigint);

-- The API has no sale id and identical rows are distinct sales, so a sale is keyed by its
-- second and its position among the sales of that second.
CREATE TABLE auction_sales (
    item_id       text NOT NULL,
    sold_at       timestamptz NOT NULL,
    seq           integer NOT NULL,
    quantity      bigint NOT NULL,
    unit_price    bigint NOT NULL,
    total_price   bigint NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    CHECK (isfinite(sold_at) AND isfinite(first_seen_at)),
    PRIMARY KEY (item_id, sold_at, seq)
) PARTITION BY RANGE (sold_at);

-- Price candles per item, hour and day (UTC), kept when raw partitions are dropped
-- (retention.candles_*). Write-backs fold each stored snapshot and each new sale into its
-- buckets in the same transaction. A candle summarises the item's series over its bucket as
-- the collections saw it, each snapshot holding until the next: when collections in the bucket
-- saw the previous snapshot's market unchanged before the bucket's first snapshot (or it has
-- none: written when the next snapshot is), that market counts too, opening the bucket at its
-- start. open / close are the lowest unit price first / last seen in the bucket, high / low
-- its extremes, listings_min / _max the listing count range, snapshots the rows stored in it;
-- sales_* the sales sold in it.
CREATE TABLE price_candles (
    item_id        text NOT NULL,
    resolution     text NOT NULL CHECK (resolution IN ('1h', '1d')),
    bucket         timestamptz NOT NULL,
    snapshots      integer NOT NULL DEFAULT 0,
    open_at        timestamptz,
    open_price     bigint,
    high_price     bigint,
    low_price      bigint,
    close_at       timestamptz,
    close_price    bigint,
    listings_min   integer,
    listings_max   integer,
    sales_count    integer NOT NULL DEFAULT 0,
    sales_quantity bigint NOT NULL DEFAULT 0,
    sales_value    numeric NOT NULL DEFAULT 0, -- sum of quantity × unit price, exact
    sales_vwap     double precision GENERATED ALWAYS AS
        (CASE WHEN sales_quantity > 0 THEN (sales_value / sales_quantity)::double precision END) STORED,
    CHECK (isfinite(bucket) AND isfinite(open_at) AND isfinite(close_at)),
    -- An item's candles are written hour by hour among every other item's, so they sit on as
    -- many pages as there are buckets: the key carries the figures, and a read of an item's
    -- month of hours is an index-only range scan instead of 720 page reads.
    PRIMARY KEY (item_id, resolution, bucket) INCLUDE (snapshots, open_price, high_price, low_price, close_price,
        listings_min, listings_max, sales_count, sales_quantity, sales_vwap)
) WITH (
    -- Index-only scans need the visibility map kept current on a table that only grows.
    autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_insert_scale_factor = 0.01
);
-- Retention deletes old candles by bucket; rows are appended in bucket order.
CREATE INDEX price_candles_bucket_brin ON price_candles USING brin (bucket);

-- Retention deletes interest events in small batches, oldest first, through this index.
CREATE INDEX item_interest_occurred_at_idx ON item_interest (occurred_at);

-- Outbox (internal/outbox) ----------------------------------------------------------------------

-- An outbox row is
--   pending    while outbox_pending lists it (EnqueueSnapshots adds it in the row's own
--              transaction; the relay deletes it, fenced by its lane leases, once Kafka acked),
--   failed     when failed_at is set (the broker rejected it; `collector outbox retry` lists
--              it as pending again),
--   published  otherwise.
-- Publishing never updates the outbox row, so its pages are filled completely.
CREATE TABLE outbox (
    id           bigserial PRIMARY KEY,
    -- Consumers deduplicate by it. Random, and looked up by nothing here, so not indexed: a
    -- unique index on random UUIDs costs every insert a random leaf page.
    event_id     uuid NOT NULL DEFAULT gen_random_uuid(),
    event_type   text NOT NULL,
    item_id      text NOT NULL,
    snapshot_id  bigint UNIQUE,
    payload      json NOT NULL,      -- json, not jsonb: the exact bytes we publish
    created_at   timestamptz NOT NULL DEFAULT now() CHECK (isfinite(created_at)),
    attempts     integer NOT NULL DEFAULT 0,
    failed_at    timestamptz CHECK (isfinite(failed_at)),
    last_error   text,
    -- Every row belongs to one of 16 lanes by a stable hash of its item_id, so all events of
    -- one item share a lane. A relay publishes a lane only while it holds that lane's lease, in
    -- id order, which keeps per-item order with any number of relays running.
    -- hashtextextended is immutable (it backs hash partitioning), so a row's lane never changes.
    lane         smallint NOT NULL
        GENERATED ALWAYS AS ((hashtextextended(item_id, 0) & 15)::smallint) STORED
) WITH (fillfactor = 100);

-- Failed rows for `collector outbox list --failed`.
CREATE INDEX outbox_failed_idx ON outbox (id) WHERE failed_at IS NOT NULL;
-- Pruning walks the primary key from the oldest row: ids follow created_at, so it needs no
-- index on created_at (a BRIN's ranges widen to match every page once pruning reuses them).

-- An entry goes when the relay publishes its row, or with its row (purge:synthetic); pruning
-- deletes only rows with no entry. No foreign key: its check on every insert cost a fifth of
-- enqueuing an event, and the rows are written together in one statement.
CREATE TABLE outbox_pending (
    id   bigint PRIMARY KEY,
    lane smallint NOT NULL CHECK (lane BETWEEN 0 AND 15)
) WITH (
    -- A queue: rows come and go all the time, so vacuum it by a fixed number of dead rows
    -- whatever its size, and the relay's reads do not step over dead rows for long.
    autovacuum_vacuum_scale_factor = 0, autovacuum_vacuum_threshold = 1000
);

-- One row per lane. lease_token is new for every acquisition, and marking rows is fenced by
-- it: a relay that lost its lane (paused past its lease) cannot mark anything there.
CREATE TABLE outbox_relay_lanes (
    lane             smallint PRIMARY KEY CHECK (lane BETWEEN 0 AND 15),
    owner            text,
    lease_token      uuid,
    lease_expires_at timestamptz CHECK (isfinite(lease_expires_at)),
    acquired_at      timestamptz CHECK (isfinite(acquired_at))
);

INSERT INTO outbox_relay_lanes (lane) SELECT generate_series(0, 15);

-- A relay that stopped for good (missing topic, authorization, a bug) says why here, for
-- `collector status`; a relay that starts working clears the records.
CREATE TABLE outbox_relay_stops (
    owner      text PRIMARY KEY,
    stopped_at timestamptz NOT NULL DEFAULT now() CHECK (isfinite(stopped_at)),
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

-- Fixtures (seed:synthetic's seed-…, integration tests' integration-item-…) share the item id
-- space with real items; this is the one rule that tells them apart, and every statement that
-- ranks, counts, probes or purges calls it. Real Neople ids are 32 lowercase hex characters,
-- which never hold '-'. A one-expression IMMUTABLE SQL function: the planner inlines it.
CREATE FUNCTION synthetic_item(text) RETURNS boolean LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT $1 LIKE 'seed-%' OR $1 LIKE 'integration-item-%'
$$;

---- create above / drop below ----

DROP VIEW outbox_events;
DROP TABLE outbox_relay_stops;
DROP TABLE outbox_relay_lanes;
DROP TABLE outbox_pending;
DROP TABLE outbox;
DROP TABLE price_candles;
DROP TABLE auction_sales;
DROP TABLE auction_snapshots;
DROP TABLE tier_forecast;
DROP TABLE budget_rates;
DROP TABLE budget_cooldowns;
DROP TABLE collector_instances;
DROP TABLE packing_state;
DROP TABLE provider_probe;
DROP TABLE provider_status;
DROP TABLE provider_status_log;
DROP FUNCTION provider_status_log_write();
DROP TABLE item_interest;
DROP TABLE item_browse;
DROP TABLE tracked_items;
DROP FUNCTION item_browse_insert();
DROP FUNCTION item_browse_update();
DROP FUNCTION tracked_items_due_notify();
DROP FUNCTION synthetic_item(text);
