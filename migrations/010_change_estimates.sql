-- What the collector learns per item at write-back (issue #16): decayed counts of collections,
-- detected changes and the time they spanned (for the change-rate estimator in
-- internal/budgetplan), new sales over that time (the sales rate), the listings last seen (to
-- detect a change), lost-sale gaps, and an operator's pinned tier for the budget planner.
-- Adding columns with constant defaults rewrites nothing; none is indexed, so updates stay HOT.
ALTER TABLE tracked_items
    ADD COLUMN est_collections       double precision NOT NULL DEFAULT 0,
    ADD COLUMN est_changes           double precision NOT NULL DEFAULT 0,
    ADD COLUMN est_changed_seconds   double precision NOT NULL DEFAULT 0,
    ADD COLUMN est_unchanged_seconds double precision NOT NULL DEFAULT 0,
    ADD COLUMN est_sales             double precision NOT NULL DEFAULT 0,
    ADD COLUMN seen_lowest_price     bigint,
    ADD COLUMN seen_listing_count    integer,
    ADD COLUMN seen_listing_quantity bigint,
    ADD COLUMN sales_gaps            bigint NOT NULL DEFAULT 0,
    ADD COLUMN pinned_tier           text
        CHECK (pinned_tier IN ('HOT_1M', 'ACTIVE_3M', 'WARM_5M', 'COLD_10M'));

---- create above / drop below ----

ALTER TABLE tracked_items
    DROP COLUMN est_collections, DROP COLUMN est_changes, DROP COLUMN est_changed_seconds,
    DROP COLUMN est_unchanged_seconds, DROP COLUMN est_sales, DROP COLUMN seen_lowest_price,
    DROP COLUMN seen_listing_count, DROP COLUMN seen_listing_quantity, DROP COLUMN sales_gaps,
    DROP COLUMN pinned_tier;
