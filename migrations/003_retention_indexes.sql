-- Time-ordered indexes so retention jobs can delete old snapshots, sales and interest events
-- in small batches without scanning whole tables.
CREATE INDEX auction_sales_sold_at_idx ON auction_sales (sold_at);
CREATE INDEX auction_snapshots_collected_at_idx ON auction_snapshots (collected_at);
CREATE INDEX item_interest_occurred_at_idx ON item_interest (occurred_at);

---- create above / drop below ----

DROP INDEX item_interest_occurred_at_idx;
DROP INDEX auction_snapshots_collected_at_idx;
DROP INDEX auction_sales_sold_at_idx;
