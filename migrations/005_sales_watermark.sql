-- The newest sale stored per item. A re-fetch of /df/auction-sold returns up to 100 sales,
-- nearly all of them stored already; with the watermark the collector only offers the sales of
-- that second and newer to the insert, instead of ~100 conflicting rows per item and pass.
ALTER TABLE tracked_items ADD COLUMN last_sale_at timestamptz;

UPDATE tracked_items t SET last_sale_at = s.last
FROM (SELECT item_id, max(sold_at) AS last FROM auction_sales GROUP BY item_id) s
WHERE t.item_id = s.item_id;

---- create above / drop below ----

ALTER TABLE tracked_items DROP COLUMN last_sale_at;
