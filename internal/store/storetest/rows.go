package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/tiers"
)

// Execer runs one statement: a pool, a connection or a transaction.
type Execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// Time is a fixture row's timestamp: by the database clock (Now, In, Ago), absolute (At) or
// NULL (Null). The zero value takes the column's default named on the row type. Times by the
// database clock keep a fixture consistent with the SQL under test, which reads now() too.
type Time struct {
	set, null bool
	at        time.Time // absolute when not zero
	offset    time.Duration
}

// Now is the database's now() when the row is written.
func Now() Time { return Time{set: true} }

// In is now() + d by the database clock.
func In(d time.Duration) Time { return Time{set: true, offset: d} }

// Ago is now() - d by the database clock.
func Ago(d time.Duration) Time { return In(-d) }

// At is t itself.
func At(t time.Time) Time { return Time{set: true, at: t} }

// Null leaves the column NULL.
func Null() Time { return Time{set: true, null: true} }

func (v Time) or(def Time) Time {
	if v.set {
		return v
	}
	return def
}

// insert is one INSERT … SELECT FROM unnest(…) statement built a column at a time, each column
// read from the rows by a function, so the statement's columns and the row type's fields stay
// side by side.
type insert struct {
	table   string
	columns []string
	exprs   []string
	args    []any
	types   []string
}

func (s *insert) array(arr any, typ string) string {
	s.args, s.types = append(s.args, arr), append(s.types, typ)
	return fmt.Sprintf("u.c%d", len(s.args))
}

// col adds a column filled from each row by get.
func col[R, V any](s *insert, name string, rows []R, get func(R) V) {
	vals := make([]V, len(rows))
	for i, r := range rows {
		vals[i] = get(r)
	}
	s.columns, s.exprs = append(s.columns, name), append(s.exprs, s.array(vals, arrayType(vals)))
}

// timeCol adds a timestamp column: as two arrays, an absolute time, else an offset from now()
// in microseconds; both NULL make the column NULL.
func timeCol[R any](s *insert, name string, rows []R, get func(R) Time) {
	at, offset := make([]*time.Time, len(rows)), make([]*int64, len(rows))
	for i, r := range rows {
		switch v := get(r); {
		case v.null:
		case !v.at.IsZero():
			at[i] = &v.at
		default:
			us := v.offset.Microseconds()
			offset[i] = &us
		}
	}
	expr := fmt.Sprintf("coalesce(%s, now() + %s * interval '1 microsecond')", s.array(at, "timestamptz[]"), s.array(offset, "bigint[]"))
	s.columns, s.exprs = append(s.columns, name), append(s.exprs, expr)
}

// value adds a column every row gets the same SQL expression for.
func (s *insert) value(name, expr string) {
	s.columns, s.exprs = append(s.columns, name), append(s.exprs, expr)
}

func (s *insert) exec(tb testing.TB, db Execer) {
	tb.Helper()
	params := make([]string, len(s.args))
	aliases := make([]string, len(s.args))
	for i := range s.args {
		params[i] = fmt.Sprintf("$%d::%s", i+1, s.types[i])
		aliases[i] = fmt.Sprintf("c%d", i+1)
	}
	sql := fmt.Sprintf("INSERT INTO %s (%s) SELECT %s FROM unnest(%s) AS u(%s)", s.table,
		strings.Join(s.columns, ", "), strings.Join(s.exprs, ", "), strings.Join(params, ", "), strings.Join(aliases, ", "))
	if _, err := db.Exec(context.Background(), sql, s.args...); err != nil {
		tb.Fatalf("storetest: insert into %s: %v", s.table, err)
	}
}

func arrayType(a any) string {
	switch a.(type) {
	case []string, []*string:
		return "text[]"
	case []int32, []*int32:
		return "integer[]"
	case []int64:
		return "bigint[]"
	case []float64:
		return "double precision[]"
	}
	panic(fmt.Sprintf("storetest: no array type for %T", a))
}

func nullIfEmpty(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// Item is a tracked_items row; a zero field takes the default noted beside it.
type Item struct {
	ID               string
	Name             string     // default ID
	Tier             tiers.Tier // default tiers.Warm
	NextCollectAt    Time       // default Now() (due), Null() for tiers.Dormant
	CreatedAt        Time       // default Now()
	TierChangedAt    Time       // default NULL
	TierReason       string     // default NULL
	LastSaleAt       Time       // default NULL
	SeenListingCount *int32     // default NULL (never collected)
	// The change estimates (est_*); 0 is an item never observed.
	EstCollections, EstChanges, EstChangedSeconds, EstUnchangedSeconds float64
	Requests                                                           float64 // requests_per_collection; default 2 (alone)
}

// Items inserts tracked items in one statement, failing tb on error.
func Items(tb testing.TB, db Execer, items ...Item) {
	tb.Helper()
	rows := make([]Item, len(items))
	for i, it := range items {
		if it.ID == "" {
			tb.Fatalf("storetest: an Item needs an ID: %+v", it)
		}
		if it.Name == "" {
			it.Name = it.ID
		}
		if it.Tier == "" {
			it.Tier = tiers.Warm
		}
		due := Now()
		if it.Tier == tiers.Dormant {
			due = Null()
		}
		if it.Requests == 0 {
			it.Requests = 2
		}
		it.NextCollectAt, it.CreatedAt = it.NextCollectAt.or(due), it.CreatedAt.or(Now())
		it.TierChangedAt, it.LastSaleAt = it.TierChangedAt.or(Null()), it.LastSaleAt.or(Null())
		rows[i] = it
	}
	s := insert{table: "tracked_items"}
	col(&s, "item_id", rows, func(r Item) string { return r.ID })
	col(&s, "item_name", rows, func(r Item) string { return r.Name })
	col(&s, "collection_tier", rows, func(r Item) string { return string(r.Tier) })
	timeCol(&s, "next_collect_at", rows, func(r Item) Time { return r.NextCollectAt })
	timeCol(&s, "created_at", rows, func(r Item) Time { return r.CreatedAt })
	timeCol(&s, "tier_changed_at", rows, func(r Item) Time { return r.TierChangedAt })
	col(&s, "tier_reason", rows, func(r Item) *string { return nullIfEmpty(r.TierReason) })
	timeCol(&s, "last_sale_at", rows, func(r Item) Time { return r.LastSaleAt })
	col(&s, "seen_listing_count", rows, func(r Item) *int32 { return r.SeenListingCount })
	col(&s, "est_collections", rows, func(r Item) float64 { return r.EstCollections })
	col(&s, "est_changes", rows, func(r Item) float64 { return r.EstChanges })
	col(&s, "est_changed_seconds", rows, func(r Item) float64 { return r.EstChangedSeconds })
	col(&s, "est_unchanged_seconds", rows, func(r Item) float64 { return r.EstUnchangedSeconds })
	col(&s, "requests_per_collection", rows, func(r Item) float64 { return r.Requests })
	s.exec(tb, db)
}

// Sale is an auction_sales row; a zero field takes the default noted beside it.
type Sale struct {
	ItemID     string
	SoldAt     Time  // default Now()
	Seq        int32 // position among the item's sales of that second
	Quantity   int64 // default 1
	UnitPrice  int64 // default 100
	TotalPrice int64 // default Quantity × UnitPrice
}

// Sales inserts sales in one statement, failing tb on error.
func Sales(tb testing.TB, db Execer, sales ...Sale) {
	tb.Helper()
	rows := make([]Sale, len(sales))
	for i, r := range sales {
		r.SoldAt = r.SoldAt.or(Now())
		if r.Quantity == 0 {
			r.Quantity = 1
		}
		if r.UnitPrice == 0 {
			r.UnitPrice = 100
		}
		if r.TotalPrice == 0 {
			r.TotalPrice = r.Quantity * r.UnitPrice
		}
		rows[i] = r
	}
	s := insert{table: "auction_sales"}
	col(&s, "item_id", rows, func(r Sale) string { return r.ItemID })
	timeCol(&s, "sold_at", rows, func(r Sale) Time { return r.SoldAt })
	col(&s, "seq", rows, func(r Sale) int32 { return r.Seq })
	col(&s, "quantity", rows, func(r Sale) int64 { return r.Quantity })
	col(&s, "unit_price", rows, func(r Sale) int64 { return r.UnitPrice })
	col(&s, "total_price", rows, func(r Sale) int64 { return r.TotalPrice })
	s.exec(tb, db)
	// The items' sale watermark moves as the write-back moves it: popularity reads the last sale there.
	ids := make([]string, len(rows))
	for i, r := range rows {
		ids[i] = r.ItemID
	}
	if _, err := db.Exec(context.Background(), `
		UPDATE tracked_items t SET last_sale_at = s.sold_at, last_second_sales = s.n
		FROM (SELECT DISTINCT ON (item_id) item_id, sold_at, count(*) OVER (PARTITION BY item_id, sold_at) AS n
		      FROM auction_sales WHERE item_id = ANY($1) ORDER BY item_id, sold_at DESC) s
		WHERE t.item_id = s.item_id AND (t.last_sale_at IS NULL OR s.sold_at > t.last_sale_at)`, ids); err != nil {
		tb.Fatalf("storetest: sale watermark: %v", err)
	}
}

// Snapshot is an auction_snapshots row with a claim token of its own; a zero field takes the
// default noted beside it.
type Snapshot struct {
	ItemID          string
	CollectedAt     Time       // default Now()
	Tier            tiers.Tier // default tiers.Warm
	ListingCount    int32
	ListingQuantity int64
}

// Snapshots inserts snapshots in one statement, failing tb on error.
func Snapshots(tb testing.TB, db Execer, snaps ...Snapshot) {
	tb.Helper()
	rows := make([]Snapshot, len(snaps))
	for i, r := range snaps {
		r.CollectedAt = r.CollectedAt.or(Now())
		if r.Tier == "" {
			r.Tier = tiers.Warm
		}
		rows[i] = r
	}
	s := insert{table: "auction_snapshots"}
	col(&s, "item_id", rows, func(r Snapshot) string { return r.ItemID })
	s.value("claim_token", "gen_random_uuid()")
	timeCol(&s, "collected_at", rows, func(r Snapshot) Time { return r.CollectedAt })
	col(&s, "tier", rows, func(r Snapshot) string { return string(r.Tier) })
	col(&s, "listing_count", rows, func(r Snapshot) int32 { return r.ListingCount })
	col(&s, "listing_quantity", rows, func(r Snapshot) int64 { return r.ListingQuantity })
	s.exec(tb, db)
}

// Interest is an item_interest event; a zero field takes the default noted beside it.
type Interest struct {
	ItemID     string
	Kind       string  // default "view"
	Weight     float64 // default 1
	OccurredAt Time    // default Now()
	Source     string
}

// Interests inserts interest events in one statement, failing tb on error.
func Interests(tb testing.TB, db Execer, events ...Interest) {
	tb.Helper()
	rows := make([]Interest, len(events))
	for i, r := range events {
		r.OccurredAt = r.OccurredAt.or(Now())
		if r.Kind == "" {
			r.Kind = "view"
		}
		if r.Weight == 0 {
			r.Weight = 1
		}
		rows[i] = r
	}
	s := insert{table: "item_interest"}
	col(&s, "item_id", rows, func(r Interest) string { return r.ItemID })
	col(&s, "kind", rows, func(r Interest) string { return r.Kind })
	col(&s, "weight", rows, func(r Interest) float64 { return r.Weight })
	timeCol(&s, "occurred_at", rows, func(r Interest) Time { return r.OccurredAt })
	col(&s, "source", rows, func(r Interest) string { return r.Source })
	s.exec(tb, db)
}

// PartitionDays replaces the partitions of each table (auction_snapshots, auction_sales) by one
// per day from `from` to `to` days from today's UTC midnight (exclusive), named
// <table>_day<d+100>, as a database kept without retention for a while has; it returns that
// midnight.
func PartitionDays(tb testing.TB, pool *pgxpool.Pool, from, to int, tables ...string) time.Time {
	tb.Helper()
	ctx := context.Background()
	var today time.Time
	if err := pool.QueryRow(ctx, `SELECT date_bin('1 day', now(), '2000-01-01 00:00:00+00')`).Scan(&today); err != nil {
		tb.Fatal(err)
	}
	for _, table := range tables {
		rows, err := pool.Query(ctx, `SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = $1::regclass`, table)
		if err != nil {
			tb.Fatal(err)
		}
		parts, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			tb.Fatal(err)
		}
		for _, p := range parts {
			if _, err := pool.Exec(ctx, `DROP TABLE `+pgx.Identifier{p}.Sanitize()); err != nil {
				tb.Fatal(err)
			}
		}
		for d := from; d < to; d++ {
			if _, err := pool.Exec(ctx, fmt.Sprintf(`CREATE TABLE %s PARTITION OF %s FOR VALUES FROM ('%s') TO ('%s')`,
				pgx.Identifier{fmt.Sprintf("%s_day%d", table, d+100)}.Sanitize(), pgx.Identifier{table}.Sanitize(),
				today.AddDate(0, 0, d).Format(time.RFC3339), today.AddDate(0, 0, d+1).Format(time.RFC3339))); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return today
}

// LockedPartitions is how many partitions of the parent tables tx holds a lock on. The planner
// opens and locks each partition it plans, so after a read this is how many its bounds did
// not leave out.
func LockedPartitions(tb testing.TB, tx pgx.Tx, parents ...string) int {
	tb.Helper()
	var n int
	if err := tx.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l JOIN pg_inherits i ON i.inhrelid = l.relation
		WHERE l.pid = pg_backend_pid() AND i.inhparent = ANY ($1::regclass[])`, parents).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	return n
}
