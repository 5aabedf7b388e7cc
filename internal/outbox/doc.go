// Package outbox owns the outbox table: rows are enqueued in the same transaction as the
// snapshot they announce (EnqueueSnapshots), and the Relay publishes them to Kafka afterwards.
//
// # Guarantees
//
// At-least-once: a row is marked published only after Kafka acknowledged it with acks=all. A
// crash or a broker error between the acknowledgement and the mark re-sends the row later
// with the same ce_id header, so consumers deduplicate by ce_id. Nothing is lost: a row stays
// in the table until it is published or marked failed.
//
// Per-item order, with any number of relays at once (the daemon's relay plus one-shots from a
// scheduler): every row belongs to one of Lanes lanes, a stable hash of its item_id computed
// by PostgreSQL (a generated column, migrations/002_outbox_relay.sql), so all events of one
// item share a lane. A relay publishes a lane only while it holds that lane's lease in
// outbox_relay_lanes, and within a lane it publishes in queue order (see below), one batch at
// a time, the next batch only after the previous one was acknowledged. One item's events go to one Kafka
// partition (key = item_id), in one produce request per batch, so Kafka keeps them in order.
//
// Why lanes instead of a cursor: a "last published id" cursor skips rows whose transaction
// commits after a higher id was published. The relay instead reads every entry still queued
// in its lanes, whatever its ids, so a late commit is published on the next pass. Why lanes
// instead of one global lock: a relay that dies only stalls its lanes for one lease, and lanes
// can be spread over relays.
//
// Leases: each acquisition gets a fresh lease_token. The relay renews its leases between
// batches and while it backs off, starts a produce call only on lanes with more than two write
// timeouts of lease left (RelayConfig.Lease must be at least three write timeouts), and marks
// rows published with a statement fenced by its tokens. So a relay never publishes a lane after
// it could have lost it, and one that was paused past its lease cannot mark anything. A relay
// that stops cleanly waits for the batch in flight (at most the write timeout), marks it and
// releases its lanes at once, so a clean hand-over sends nothing twice; one that dies frees
// its lanes when the lease expires, and what it had sent but not marked is sent again.
//
// No database connection or transaction waits on Kafka. The relay is a small pipeline: while
// batch k is being published, batch k-1 is marked and batch k+1 read on two other pooled
// connections (in turns on one while working through a backlog), so database and broker work
// overlap; batches still reach Kafka one produce call at a time, in order, and the read-ahead
// is dropped on any failure. A batch read from the database is several produce calls
// (readsPerBatch): the database's cost per statement is spread over more rows while the
// broker sees requests of the configured size. The messages of the read-ahead are built on
// its goroutine, off the publishing path, in the memory of a batch already marked (batchMem),
// so that a backlog is published without allocating per event.
//
// What the database does per event is kept small, since it is the relay's cost: pending rows
// are listed in outbox_queue, one entry per inserting statement (at most 500 ids, with their
// lanes), read in entry order. A relay holding every lane reads a run of entries of
// consecutive ids (one writer's statements, the usual queue) with one range scan of the
// primary key, having listed the entries without matching their lanes against its own, and
// reads only the columns a message needs; relays that split the lanes read their lanes' rows
// of the entries they share, entry by entry. Marking a batch published deletes the entries it
// read whole, takes its rows out of entries it shares with relays holding other lanes (or read
// only in part), and writes one outbox_published row listing the ids (for whole entries all
// published, the deleted entries' ids as they come, unsorted). The outbox row itself,
// payload and all, is not rewritten (migrations/006_outbox_publish_log.sql,
// 008_outbox_queue_per_statement.sql). Entries follow commit order per item (an item's next
// snapshot is written only after its previous one committed), so publishing entry by entry,
// each in id order, keeps per-item order in every lane.
// Marks are committed without waiting for the WAL flush: a mark lost in a database crash
// means a duplicate, never a loss.
//
// # Failures
//
// A broker that is down or unreachable fails the whole batch; nothing is marked. RunOnce
// retries with backoff up to RelayConfig.Attempts times, then returns an error; Run backs off
// and retries until its context ends, renewing its leases meanwhile.
//
// A message the broker rejects for what it is (too large, invalid record or timestamp) is
// retried alone to tell it from its batch neighbours, then marked failed with the broker's
// error and skipped: the rows behind it, including later events of the same item, are
// published. So a failed row is the one exception to per-item order; `collector outbox retry`
// re-publishes it later, after newer events of its item. Consumers that need the latest state
// should compare collected_at (or snapshot_id) rather than trust arrival order alone.
//
// # Growth
//
// Rows published more than RelayConfig.Retention ago are deleted by Prune with their
// outbox_published batches, a bounded number of rows per statement so no statement holds locks
// for long. Run prunes every PruneInterval.
package outbox
