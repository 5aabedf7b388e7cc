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
    now_us bigint := (extract(epoch FROM clock_timestamp()) * 1e6)::bigint;
BEGIN
    IF to_regclass('auction_snapshots') IS NULL OR pg_is_in_recovery()
       OR current_setting('transaction_read_only') = 'on' THEN
        RETURN;
    END IF;
    seq := pg_get_serial_sequence('auction_snapshots', 'snapshot_id')::regclass;
    IF has_sequence_privilege(seq, 'SELECT, UPDATE') AND coalesce(pg_sequence_last_value(seq), 0) < now_us THEN
        PERFORM setval(seq, now_us);
    END IF;
END $$`

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
