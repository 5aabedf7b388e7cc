-- The cluster rate each API key may use, learned from the provider's answers (AIMD): cut on a
-- rate-limit answer, raised step by step toward the configured ceiling while no cut happens.
CREATE TABLE budget_rates (
    key_label  text PRIMARY KEY,
    rate       double precision NOT NULL,          -- requests per second, the whole cluster
    cut_from   double precision,                   -- the rate the last cut started from
    cut_at     timestamptz,                        -- the last cut (held for a while after it)
    changed_at timestamptz NOT NULL DEFAULT now(), -- the last cut or step up
    reason     text                                -- the answer that caused the last cut
);

---- create above / drop below ----

DROP TABLE budget_rates;
