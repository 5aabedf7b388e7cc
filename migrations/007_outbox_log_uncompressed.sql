-- An acknowledged batch's row in outbox_published lists up to a few thousand ids (8 bytes
-- each), past the size at which PostgreSQL compresses a value. pglz gains little on a sorted
-- id list and took most of the mark's time (1.5 ms for 2,000 ids against 0.2 ms stored
-- out of line uncompressed), once per batch on the relay's critical path. The list is read
-- only by operators' look-ups (outbox_events), so its size on disk does not matter.
ALTER TABLE outbox_published ALTER COLUMN ids SET STORAGE EXTERNAL;

---- create above / drop below ----

ALTER TABLE outbox_published ALTER COLUMN ids SET STORAGE EXTENDED;
