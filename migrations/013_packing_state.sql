-- Whether packed (itemIds) calls are used, per endpoint, for the whole cluster. A shadow
-- verification mismatch switches an endpoint off until an operator turns it back on.
CREATE TABLE packing_state (
    endpoint   text PRIMARY KEY CHECK (endpoint IN ('/df/auction', '/df/auction-sold')),
    enabled    boolean NOT NULL,
    changed_at timestamptz NOT NULL DEFAULT now(),
    reason     text
);

---- create above / drop below ----

DROP TABLE packing_state;
