package history

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// advanceSnapshotIDsSQL moves snapshot_id's sequence on to the server's clock in microseconds
// when it lags behind it, as the schema started it. Every event carries snapshot_id and
// consumers take one id for one event; a database that lost its last commits (a failover to an
// asynchronous replica, a restore from a backup) hands out again the ids of snapshots whose
// events the relay had already published, each now another snapshot. The ids grow by the
// snapshots written, far slower than the clock, so moving them to the clock whenever a
// collector connects (which every process does after such a loss) puts them past every id
// the lost commits used. It changes nothing where it may not write: before the schema, on a
// standby, or for a role without the right.
const advanceSnapshotIDsSQL = `
DO $$
DECLARE
    seq regclass;
    now_us bigint;
BEGIN
    IF to_regclass('auction_snapshots') IS NULL OR pg_is_in_recovery()
       OR current_setting('transaction_read_only') = 'on' THEN
        RETURN;
    END IF;
    seq := pg_get_serial_sequence('auction_snapshots', 'snapshot_id')::regclass;
    -- Each right on its own: given a list, has_sequence_privilege asks for any of them.
    IF NOT (has_sequence_privilege(seq, 'SELECT') AND has_sequence_privilege(seq, 'UPDATE')) THEN
        RETURN;
    END IF;
    -- Not waited on: a synchronous standby gone missing (after a failover) would hang this
    -- commit, and every connection behind its lock; a move lost in a crash is made again by
    -- the next connection.
    PERFORM set_config('synchronous_commit', 'off', true);
    -- One connection at a time, the clock read once the lock is ours: two reading it first
    -- could each set it, the later one to the earlier time, and take the ids back.
    PERFORM pg_advisory_xact_lock(` + snapshotIDsLockKey + `);
    now_us := (extract(epoch FROM clock_timestamp()) * 1e6)::bigint;
    IF coalesce(pg_sequence_last_value(seq), 0) < now_us THEN
        PERFORM setval(seq, now_us);
    END IF;
END $$`

// snapshotIDsLockKey is the advisory lock advanceSnapshotIDsSQL serialises on.
const snapshotIDsLockKey = "7305118220503" // beside the partition keeper's 7_305_118_220_501 and 502

// AdvanceSnapshotIDs moves snapshot ids on to the database's clock (advanceSnapshotIDsSQL);
// the primary pool runs it on every new connection.
func AdvanceSnapshotIDs(ctx context.Context, db interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}) error {
	if _, err := db.Exec(ctx, advanceSnapshotIDsSQL); err != nil {
		return fmt.Errorf("move snapshot ids on to the clock: %w", err)
	}
	return nil
}
