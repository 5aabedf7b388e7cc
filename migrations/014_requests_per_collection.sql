-- What one collection of the item is expected to cost in provider requests at its tier: 2 when
-- it has its own calls, less when it shares packed (itemIds) calls. Popularity recalculation
-- writes it with the tier; status, the demand gauges and the budget planner sum it, so the
-- demand they show is what the daemon really spends. New items start at 2: their first
-- collection is alone.
ALTER TABLE tracked_items ADD COLUMN requests_per_collection real NOT NULL DEFAULT 2
    CHECK (requests_per_collection > 0);

---- create above / drop below ----

ALTER TABLE tracked_items DROP COLUMN requests_per_collection;
