package store_test

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// Every time and float column a loop reads refuses the values that loop could not get past:
// ±infinity in a timestamptz (pgx cannot scan it into a time.Time, and one such row failed
// every read of its table: the provider gate, the relay's batch, an export day), NaN and
// ±Infinity in a float (the read API's JSON cannot hold them; sums and forecasts turn NaN).
// Other services and operators write some tables directly, so the schema refuses them where
// they are written, and a new column must say how it is bounded.
func TestEveryTimeAndFloatColumnIsFinite(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	rows, err := pool.Query(context.Background(), `
		SELECT c.table_name, c.column_name, c.data_type,
		       coalesce((SELECT string_agg(pg_get_constraintdef(k.oid), ' ') FROM pg_constraint k
		                 WHERE k.conrelid = format('%I.%I', c.table_schema, c.table_name)::regclass AND k.contype = 'c'), '')
		FROM information_schema.columns c
		JOIN pg_class r ON r.oid = format('%I.%I', c.table_schema, c.table_name)::regclass
		WHERE c.table_schema = current_schema() AND r.relkind IN ('r', 'p') AND NOT r.relispartition
		  AND c.data_type IN ('timestamp with time zone', 'double precision', 'real')
		  AND c.is_generated = 'NEVER'
		ORDER BY 1, 2`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	// Copies kept by a trigger from a column that is checked.
	copies := map[string]bool{"item_browse.score": true}
	n := 0
	for rows.Next() {
		var table, column, typ, checks string
		if err := rows.Scan(&table, &column, &typ, &checks); err != nil {
			t.Fatal(err)
		}
		n++
		name := table + "." + column
		col := regexp.QuoteMeta(column)
		switch {
		case copies[name]:
		case typ == "timestamp with time zone":
			if !regexp.MustCompile(`isfinite\(` + col + `\)`).MatchString(checks) {
				t.Errorf("%s: no CHECK (isfinite(%s))", name, column)
			}
		default:
			lower := regexp.MustCompile(`\b` + col + ` >=? `).MatchString(checks)
			upper := regexp.MustCompile(`\b` + col + ` <=? `).MatchString(checks)
			if !lower || !upper {
				t.Errorf("%s: want a CHECK bounding it below and above (which also refuses NaN), have %q", name, checks)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n < 30 {
		t.Fatalf("only %d columns checked: the query finds too little to prove anything", n)
	}
}

// A value pgx cannot scan is the row's fault, not a lost connection: a loop must not retry it
// as one, nor report the database as unreachable.
func TestAValueThatCannotBeScannedIsNotTransient(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	var at time.Time
	err := pool.QueryRow(context.Background(), `SELECT 'infinity'::timestamptz`).Scan(&at)
	if err == nil {
		t.Fatal("pgx scanned infinity into a time.Time: the test proves nothing")
	}
	if store.Transient(err) || store.RefusedCause(err) != "" {
		t.Fatalf("scan error %v: Transient %v, RefusedCause %q; want neither", err, store.Transient(err), store.RefusedCause(err))
	}
}

// An item name longer than the provider's names are kept is refused where it is written: the
// read API's /latest copy and the console hold every name. A provider's name cut by Clean (its
// MaxNameRunes and an ellipsis) is stored: refused, it would fail the whole import.
func TestAnItemNameIsBounded(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	cut := provider.Clean(strings.Repeat("검", 300), provider.MaxNameRunes)
	if _, err := pool.Exec(context.Background(), `INSERT INTO tracked_items (item_id, item_name) VALUES ('n', $1)`, cut); err != nil {
		t.Fatalf("a provider's name as Clean cut it (%d characters): %v", utf8.RuneCountInString(cut), err)
	}
	_, err := pool.Exec(context.Background(), `INSERT INTO tracked_items (item_id, item_name) VALUES ('m', $1 || 'x')`, cut)
	if err == nil {
		t.Fatal("a name longer than a cut provider name was stored")
	}
}

// snapshot_id starts at the time the schema was made (µs since 1970): events of a database made
// again go on past the ids the old one published, as consumers that order by it expect.
func TestSnapshotIDsStartAtTheSchemasCreation(t *testing.T) {
	t.Parallel()
	pool, _ := storetest.NewPool(t)
	var first int64
	if err := pool.QueryRow(context.Background(),
		`SELECT nextval(pg_get_serial_sequence('auction_snapshots', 'snapshot_id'))`).Scan(&first); err != nil {
		t.Fatal(err)
	}
	// The test database is cloned from a template made at most a few days ago.
	made := time.UnixMicro(first)
	if made.After(time.Now()) || time.Since(made) > 7*24*time.Hour {
		t.Fatalf("first snapshot_id %d (%s as µs since 1970): want the schema's creation time", first, made)
	}
}
