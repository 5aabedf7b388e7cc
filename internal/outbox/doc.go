// Package outbox owns the outbox table: rows are enqueued in the same transaction as the
// snapshot they announce (EnqueueSnapshots), and the Relay publishes them to Kafka afterwards.
//
// # Design
//
// A row is pending while outbox_pending lists it (migrations/011_outbox_pending.sql). A relay
// reads pending rows of the lanes it leases in id order, returns the connection, produces them
// (key = item_id, CloudEvents headers, acks=all), then deletes their pending entries in one
// statement fenced by its lane lease tokens. Deleting an outbox row (pruning, purge:synthetic)
// takes its pending entry with it through the foreign key. No database connection or
// transaction is held while waiting for Kafka.
//
// # Guarantees
//
// At least once: a row stops being pending only after Kafka acknowledged it; one sent but not
// marked (crash, error) is sent again with the same ce_id, by which consumers deduplicate.
//
// Per-item order with any number of relays: all events of an item share a lane (a hash of
// item_id), a lane is published only under its lease, one batch at a time, in id order, the
// next after the previous one was acknowledged and marked. An item's next event is written only
// after its previous one committed, so its ids follow commit order; a row committing late is
// simply pending from then on (there is no cursor to skip it). key = item_id and one produce
// request per partition per call keep the order in Kafka.
//
// Leases: each acquisition gets a fresh token. The relay renews between batches and while it
// backs off, starts a produce call only with more than two write timeouts of lease left
// (kafka.lease is at least three), and marks with a statement fenced by its tokens, so a relay
// paused past its lease marks nothing. A relay that stops releases its lanes; one that dies
// frees them when the lease expires.
//
// # Failures
//
// A broker that is down fails the batch from the failing produce call on; nothing after it is
// marked. RunOnce retries up to kafka.retry.attempts times, Run until its context ends. What
// retrying cannot fix (a missing topic it may not create, refused authorization, a panic) stops
// the relay: Health reports why, and outbox_relay_stops records it until a relay works again.
//
// A message the broker rejects for what it is (too large, invalid) is retried alone to tell it
// from its neighbours, then marked failed and taken off the pending list, so later events of its
// item go on: the one exception to per-item order. RetryFailed lists it as pending again.
//
// # Growth
//
// Prune deletes published rows older than kafka.outbox_retention, a bounded number per
// statement; Run prunes every kafka.prune_interval.
package outbox
