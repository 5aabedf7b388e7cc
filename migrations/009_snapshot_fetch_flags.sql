-- How a snapshot was fetched. listings_truncated: the listings answer reached the API's 400-row
-- cap, so its median and quantity describe only the cheapest 400. packed: the item shared an
-- itemIds call with other items (and its part was proven complete).
ALTER TABLE auction_snapshots
    ADD COLUMN listings_truncated boolean NOT NULL DEFAULT false,
    ADD COLUMN packed boolean NOT NULL DEFAULT false;

---- create above / drop below ----

ALTER TABLE auction_snapshots DROP COLUMN listings_truncated, DROP COLUMN packed;
