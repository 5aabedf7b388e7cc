-- collector run: early wake-ups, claim lag for `collector status`, the provider probe, live
-- instances and their shared budgets.

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

-- last_due_at is the schedule a claim served, so `collector status` can report due→claim lag
-- (last_claimed_at - last_due_at). Kept by a trigger so the claim statement stays as it is.
ALTER TABLE tracked_items ADD COLUMN last_due_at timestamptz;

CREATE FUNCTION tracked_items_claim_due() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.last_due_at := OLD.next_collect_at;
    RETURN NEW;
END
$$;

CREATE TRIGGER tracked_items_claim_due BEFORE UPDATE OF last_claimed_at ON tracked_items
    FOR EACH ROW WHEN (NEW.last_claimed_at IS DISTINCT FROM OLD.last_claimed_at)
    EXECUTE FUNCTION tracked_items_claim_due();

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
    updated_at       timestamptz NOT NULL DEFAULT now()
);

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
    PRIMARY KEY (key_label, instance)
);

-- A rate-limit answer puts the whole key into a cool-down that every instance honours.
CREATE TABLE budget_cooldowns (
    key_label text PRIMARY KEY,
    until     timestamptz NOT NULL,
    reason    text NOT NULL DEFAULT ''
);

---- create above / drop below ----

DROP TABLE budget_cooldowns;
DROP TABLE collector_instances;
DROP TABLE provider_probe;
DROP TRIGGER tracked_items_claim_due ON tracked_items;
DROP FUNCTION tracked_items_claim_due();
ALTER TABLE tracked_items DROP COLUMN last_due_at;
DROP TRIGGER tracked_items_due_release ON tracked_items;
DROP TRIGGER tracked_items_due_update ON tracked_items;
DROP TRIGGER tracked_items_due_insert ON tracked_items;
DROP FUNCTION tracked_items_due_notify();
