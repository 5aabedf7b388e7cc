// Package outbox owns the outbox table: rows are enqueued in the same transaction as the
// snapshot they announce (EnqueueSnapshots), and the Relay publishes them to Kafka afterwards.
//
// # Design
//
// A row is pending while outbox_pending lists it (migrations/011_outbox_pending.sql).
// EnqueueSnapshots adds the row and its pending entry in the caller's transaction. A relay
// reads pending rows of the lanes it leases in id order, returns the connection, produces
// them (key = item_id, CloudEvents headers, acks=all), then deletes their pending entries in
// one statement fenced by its lane lease tokens. Deleting an outbox row (pruning,
// purge:synthetic) takes its pending entry with it through the foreign key.
//
// # Guarantees
//
// At-least-once: a row stops being pending only after Kafka acknowledged it. A crash or an
// error between the acknowledgement and the mark sends the row again later with the same
// ce_id header, so consumers deduplicate by ce_id.
//
// Per-item order, with any number of relays at once: every row belongs to one of Lanes lanes,
// a stable hash of its item_id (a generated column), so all events of one item share a lane. A
// relay publishes a lane only while it holds that lane's lease in outbox_relay_lanes, one
// batch at a time, in id order, the next batch only after the previous one was acknowledged
// and marked. An item's next event is written only after its previous one committed, so its
// ids follow commit order; a row whose transaction commits late (after higher ids were
// published) is simply pending from its commit on, and there is no cursor that could skip it.
// One item's events go to one partition (key = item_id), one produce request per partition
// per call, so Kafka keeps them in order.
//
// Leases: each acquisition gets a fresh lease_token. The relay renews its leases between
// batches and while it backs off, starts a produce call only on lanes with more than two write
// timeouts of lease left (kafka.lease must be at least three write timeouts), and marks
// rows with a statement fenced by its tokens. So a relay never publishes a lane after it could
// have lost it, and one paused past its lease marks nothing. A relay that stops cleanly marks
// its last batch and releases its lanes at once; one that dies frees them when the lease
// expires, and what it had sent but not marked is sent again.
//
// No database connection or transaction is held while waiting for Kafka.
//
// # Failures
//
// A broker that is down or unreachable fails the batch from the failing produce call on;
// nothing after it is marked. RunOnce retries with backoff up to kafka.retry.attempts times,
// then returns an error; Run backs off and retries until its context ends. What retrying
// cannot fix (a missing topic it may not create, refused authorization, a panic) stops the
// relay: Health reports it down with the reason, and outbox_relay_stops records it for
// `collector status` until a relay works again.
//
// A message the broker rejects for what it is (too large, invalid record or timestamp) is
// retried alone to tell it from its neighbours, then marked failed with the broker's error
// and taken off the pending list: later events of the same item are published. So a failed
// row is the one exception to per-item order; `collector outbox retry` lists it as pending
// again, after newer events of its item. Consumers that need the latest state should compare
// collected_at (or snapshot_id) rather than trust arrival order alone.
//
// # Growth
//
// Published rows created more than kafka.outbox_retention ago are deleted by Prune, a bounded
// number per statement so no statement holds locks for long. Run prunes every PruneInterval.
package outbox
