// Package partition keeps the time-partitioned history tables (auction_snapshots by
// collected_at, auction_sales by sold_at) covered from MINVALUE to a configured time ahead, and
// drops the partitions past retention whole, judging them by the bounds in the catalog.
package partition

import (
	"slices"
	"time"
)

// Partition is one partition of a history table, with its bounds as the catalog states them
// (pg_get_expr(relpartbound)); nil is MINVALUE (Lower) or MAXVALUE (Upper).
type Partition struct {
	Schema, Name  string
	Lower, Upper  *time.Time
	DetachPending bool // a DETACH … CONCURRENTLY was interrupted
}

// Range is a partition to create: [Lower, Upper), Lower nil for the archive partition that
// holds everything older than the regular ones.
type Range struct {
	Lower *time.Time
	Upper time.Time
}

// align is t floored to a multiple of iv since the Unix epoch (UTC midnight for whole days).
func align(t time.Time, iv time.Duration) time.Time {
	return time.Unix(0, 0).UTC().Add(t.Sub(time.Unix(0, 0)) / iv * iv)
}

// planCreate returns the ranges to create so that parts cover everything from MINVALUE to at
// least `until`, with no gap: an archive partition below the oldest one, then partitions of
// one interval each, aligned, wherever none exists. Parts it cannot read (MAXVALUE) only
// block the range they cover.
func planCreate(parts []Partition, now, until time.Time, iv time.Duration) []Range {
	sorted := slices.Clone(parts)
	slices.SortFunc(sorted, func(a, b Partition) int {
		switch {
		case a.Lower == nil:
			return -1
		case b.Lower == nil:
			return 1
		}
		return a.Lower.Compare(*b.Lower)
	})
	var out []Range
	// cursor: everything below it is covered; nil = nothing is, not even MINVALUE.
	var cursor *time.Time
	fill := func(upTo time.Time) {
		if cursor == nil {
			// The archive ends where the regular partitions start: at the oldest one, or now.
			archiveEnd := align(now, iv)
			if upTo.Before(archiveEnd) {
				archiveEnd = upTo
			}
			out = append(out, Range{Upper: archiveEnd})
			cursor = &archiveEnd
		}
		for c := *cursor; c.Before(upTo); {
			next := align(c, iv).Add(iv)
			if next.After(upTo) {
				next = upTo
			}
			lower := c
			out = append(out, Range{Lower: &lower, Upper: next})
			c = next
		}
		if upTo.After(*cursor) {
			cursor = &upTo
		}
	}
	for _, p := range sorted {
		// A partition an interrupted DETACH … CONCURRENTLY left pending still holds its range
		// (until FINALIZE, which may wait out a long snapshot): planning over it, as the archive
		// recreated below the oldest partition did, failed every creation for the table.
		if p.Lower != nil && (cursor == nil || p.Lower.After(*cursor)) {
			fill(*p.Lower)
		}
		if p.Upper == nil {
			return out // covered up to MAXVALUE
		}
		if cursor == nil || p.Upper.After(*cursor) {
			u := *p.Upper
			cursor = &u
		}
	}
	end := align(until, iv)
	if end.Before(until) {
		end = end.Add(iv)
	}
	fill(end)
	return out
}

// planDrop returns the partitions whose whole range is older than cutoff: every row in them
// is past retention. The archive goes too once its upper bound is, so old rows never pile up.
func planDrop(parts []Partition, cutoff time.Time) []Partition {
	var out []Partition
	for _, p := range parts {
		if p.Upper != nil && !p.Upper.After(cutoff) {
			out = append(out, p)
		}
	}
	return out
}

// coveredUntil is the upper end of the contiguous coverage that includes now (now itself if
// no partition holds now): how far ahead writes are safe.
func coveredUntil(parts []Partition, now time.Time) time.Time {
	end := now
	for changed := true; changed; {
		changed = false
		for _, p := range parts {
			if p.DetachPending || (p.Lower != nil && p.Lower.After(end)) {
				continue
			}
			if p.Upper == nil {
				return time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)
			}
			if p.Upper.After(end) {
				end, changed = *p.Upper, true
			}
		}
	}
	return end
}
