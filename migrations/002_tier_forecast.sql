-- What the last tier plan predicted, per scheduled tier, for the console and `collector status`:
-- they read it instead of planning on their request path. Popularity recalculation
-- (internal/catalog, under either catalog.policy) rewrites every row in the transaction that
-- applies the plan; a tier the plan left empty has no row.
CREATE TABLE tier_forecast (
    tier       text PRIMARY KEY CHECK (tier IN ('HOT_1M', 'ACTIVE_3M', 'WARM_5M', 'COLD_10M')),
    items      integer NOT NULL CHECK (items > 0),
    -- Requests per second the tier's items ask at the costs the plan counted.
    demand     double precision NOT NULL CHECK (demand >= 0),
    -- Predicted, not measured: the share of time an item's stored copy matches the market,
    -- weighted by popularity (internal/tierplan.Freshness, Cho & Garcia-Molina).
    freshness  double precision NOT NULL CHECK (freshness BETWEEN 0 AND 1),
    -- The tier's items' summed popularity: what its freshness weighs in the whole catalog's.
    weight     double precision NOT NULL CHECK (weight >= 0),
    planned_at timestamptz NOT NULL
);

---- create above / drop below ----

DROP TABLE tier_forecast;
