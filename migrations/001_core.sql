-- Core schema: tracked items and their leases, provider health, snapshots, sales, outbox.
-- Table names are a contract with other services; columns may grow.

-- tracked_items is rewritten on every claim and every reschedule: a lower fillfactor keeps
-- those updates HOT (heap-only, no index churn) as long as no indexed column changes.
CREATE TABLE tracked_items (
    item_id           text PRIMARY KEY,
    item_name         text NOT NULL,
    collection_tier   text NOT NULL DEFAULT 'WARM_5M'
        CHECK (collection_tier IN ('HOT_1M', 'ACTIVE_3M', 'WARM_5M', 'COLD_10M', 'DORMANT')),
    next_collect_at   timestamptz,          -- NULL = not scheduled (DORMANT)
    lease_expires_at  timestamptz,
    lease_token       uuid,
    leased_by         text,
    last_claimed_at   timestamptz,
    last_collected_at timestamptz,          -- last successful collection
    last_attempt_at   timestamptz,
    last_outcome      text,                 -- ok | item_error | transient | rate_limited | config | ...
    failure_streak    integer NOT NULL DEFAULT 0,
    last_error        text,
    popularity_score  double precision NOT NULL DEFAULT 0,
    tier_changed_at   timestamptz,
    tier_reason       text,
    created_at        timestamptz NOT NULL DEFAULT now(),
    updated_at        timestamptz NOT NULL DEFAULT now(),
    CHECK (collection_tier <> 'DORMANT' OR next_collect_at IS NULL)
) WITH (fillfactor = 70);

-- Only scheduled rows are ever claimed; DORMANT rows (NULL) stay out of the index entirely.
CREATE INDEX tracked_items_due_idx ON tracked_items (next_collect_at) WHERE next_collect_at IS NOT NULL;

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
    updated_at      timestamptz NOT NULL DEFAULT now()
);

INSERT INTO provider_status (provider, status, reason) VALUES ('neople', 'HEALTHY', 'initial')
ON CONFLICT (provider) DO NOTHING;

CREATE TABLE auction_snapshots (
    snapshot_id         bigserial PRIMARY KEY,
    item_id             text NOT NULL,
    -- One snapshot per claim: a retried write-back of the same claim cannot insert twice.
    claim_token         uuid NOT NULL UNIQUE,
    collected_at        timestamptz NOT NULL,
    tier                text NOT NULL,
    listing_count       integer NOT NULL,
    listing_quantity    bigint NOT NULL,
    lowest_unit_price   bigint,
    median_unit_price   bigint,
    weighted_unit_price double precision,
    api_average_price   bigint,
    sales_count         integer NOT NULL DEFAULT 0,
    sales_quantity      bigint NOT NULL DEFAULT 0,
    sales_vwap          double precision
);

CREATE INDEX auction_snapshots_item_idx ON auction_snapshots (item_id, collected_at DESC);

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
    PRIMARY KEY (item_id, sold_at, seq)
);

CREATE TABLE outbox (
    id           bigserial PRIMARY KEY,
    event_id     uuid NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    event_type   text NOT NULL,
    item_id      text NOT NULL,
    snapshot_id  bigint UNIQUE,
    payload      json NOT NULL,      -- json, not jsonb: the exact bytes we publish
    created_at   timestamptz NOT NULL DEFAULT now(),
    attempts     integer NOT NULL DEFAULT 0,
    published_at timestamptz,
    failed_at    timestamptz,
    last_error   text
);

CREATE INDEX outbox_pending_idx ON outbox (id) WHERE published_at IS NULL AND failed_at IS NULL;
CREATE INDEX outbox_item_idx ON outbox (item_id);

-- Interest signals written by other services (views, watches); read by popularity scoring.
CREATE TABLE item_interest (
    id          bigserial PRIMARY KEY,
    item_id     text NOT NULL,
    kind        text NOT NULL CHECK (kind IN ('view', 'watch', 'touch')),
    weight      double precision NOT NULL DEFAULT 1,
    occurred_at timestamptz NOT NULL DEFAULT now(),
    source      text NOT NULL DEFAULT ''
);

CREATE INDEX item_interest_item_idx ON item_interest (item_id, occurred_at DESC);

---- create above / drop below ----

DROP TABLE item_interest;
DROP TABLE outbox;
DROP TABLE auction_sales;
DROP TABLE auction_snapshots;
DROP TABLE provider_status;
DROP TABLE tracked_items;
