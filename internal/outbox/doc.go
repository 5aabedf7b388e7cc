// Package outbox owns the outbox: EnqueueSnapshots writes events in their snapshots'
// transaction, and the Relay publishes them to Kafka.
//
// A relay leases lanes (a hash of item_id), reads their pending rows in id order, returns the
// connection, produces them (key = item_id, CloudEvents headers, acks=all), and then takes them
// off the pending list with one statement fenced by its lease tokens: at least once, and each
// item's events in order however many relays run. Events the broker rejects are marked failed,
// the one gap. docs/architecture.md (step 7) has leases and failures, docs/events.md the rest.
package outbox
