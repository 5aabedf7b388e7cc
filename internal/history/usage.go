package history

import (
	"context"
	"fmt"
	"time"

	"github.com/duecollector/duecollector/internal/history/partition"
)

// Usage is what the stored history takes, from the catalog's sizes and row estimates (no
// table is counted or scanned). A partition's estimate is ANALYZE's or, when larger, the
// statistics system's live-row count (pg_stat_get_live_tuples, read for the partition alone
// rather than through pg_stat_all_tables, which gathers every table of the database): today's
// partition is not analyzed until autovacuum gets to it, and a small history may never be, yet
// it holds rows.
type Usage struct {
	Tables []TableUsage
	// Since is the lower bound of the oldest snapshot partition past the archive: raw
	// snapshots are kept from there on (zero when there is none).
	Since time.Time
}

// TableUsage is one history table: its partitions together, with their indexes.
type TableUsage struct {
	Table      string `json:"table"`
	Bytes      int64  `json:"bytes"`
	Rows       int64  `json:"rows_estimate"`
	Partitions int    `json:"partitions"`
}

// Bytes is the history's total size.
func (u Usage) Bytes() int64 {
	var n int64
	for _, t := range u.Tables {
		n += t.Bytes
	}
	return n
}

// ReadUsage reads the history tables' sizes and the oldest snapshot partition's lower bound.
func ReadUsage(ctx context.Context, db Reader) (Usage, error) {
	var u Usage
	rows, err := db.Query(ctx, `
		SELECT t.name, coalesce(sum(pg_total_relation_size(p.relid)), 0)::bigint,
		       coalesce(sum(greatest(c.reltuples::float8, pg_stat_get_live_tuples(p.relid))), 0)::bigint,
		       count(*) FILTER (WHERE p.isleaf AND p.level > 0)::int
		FROM unnest(ARRAY['auction_snapshots', 'auction_sales', 'price_candles']) AS t(name)
		CROSS JOIN LATERAL (
			SELECT relid, isleaf, level FROM pg_partition_tree(t.name::regclass)
			UNION ALL -- a table that is not partitioned has no tree
			SELECT t.name::regclass, true, 0 WHERE NOT EXISTS (SELECT FROM pg_partition_tree(t.name::regclass))) p
		JOIN pg_class c ON c.oid = p.relid
		WHERE p.isleaf
		GROUP BY t.name ORDER BY t.name`)
	if err != nil {
		return u, fmt.Errorf("read history sizes: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var t TableUsage
		if err := rows.Scan(&t.Table, &t.Bytes, &t.Rows, &t.Partitions); err != nil {
			return u, fmt.Errorf("read history sizes: %w", err)
		}
		u.Tables = append(u.Tables, t)
	}
	if err := rows.Err(); err != nil {
		return u, fmt.Errorf("read history sizes: %w", err)
	}
	if u.Since, err = partition.Oldest(ctx, db, "auction_snapshots"); err != nil {
		return u, fmt.Errorf("read history partitions: %w", err)
	}
	return u, nil
}

// SizeText is a size for people (status and the console show history's sizes so): 1.5 GB,
// 320 MB, 12 kB.
func SizeText(n int64) string {
	const unit = 1000
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", float64(n)/float64(div), "kMGTPE"[exp])
}
