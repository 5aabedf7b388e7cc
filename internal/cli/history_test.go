package cli

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store/storetest"
	"github.com/duecollector/duecollector/internal/tiers"
)

// collector history prints an item's raw snapshots and candles in every format, says how
// long the last one held, and refuses a bad --since, --interval or -o naming it.
func TestHistoryCommand(t *testing.T) {
	pool, db := storetest.NewPool(t)
	t.Setenv("COLLECTOR_CONFIG", "")
	ctx := context.Background()
	storetest.Items(t, pool, storetest.Item{ID: "x", Tier: tiers.Hot})
	start := time.Now().UTC().Truncate(time.Hour).Add(-3 * time.Hour)
	p := history.Policy{Heartbeat: time.Hour}
	var last *history.Written
	for i, price := range []int64{100, 100, 90, 120, 120} {
		lowest := price
		at := start.Add(time.Duration(i) * 30 * time.Minute)
		var tok pgtype.UUID
		_, _ = rand.Read(tok.Bytes[:])
		tok.Valid = true
		c := history.Collection{ItemID: "x", Tier: "HOT_1M", Token: tok, At: at, Last: last,
			State: history.State{Count: 1, Quantity: 1, Lowest: &lowest}}
		if i > 0 {
			prev := at.Add(-30 * time.Minute)
			c.SeenAt = &prev
		}
		if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			st, err := p.Write(ctx, tx, []history.Collection{c})
			if err == nil && st[0].Reason != history.Skip {
				last = &history.Written{State: c.State, At: at}
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE tracked_items SET last_collected_at = $1 WHERE item_id = 'x'`, at); err != nil {
			t.Fatal(err)
		}
	}

	out, _, err := runCollector(t, "history", "x", "--database-url", db, "--interval", "raw", "--since", "1d", "-o", "json")
	if err != nil {
		t.Fatal(err)
	}
	var raw struct {
		SeenUntil *time.Time      `json:"seen_until"`
		Snapshots []history.Point `json:"snapshots"`
	}
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	// 100 first, 90 a change, 120 a change: the repeats wrote nothing.
	if len(raw.Snapshots) != 3 || raw.Snapshots[1].Reason != "change" || raw.SeenUntil == nil {
		t.Fatalf("raw: %s", out)
	}

	// A window that ends before the last change: its last point (90, from +1h) was last seen
	// by the collection at +1h, the one before the change to 120 at +1h30; not by the item's
	// last collection (+2h), which saw 120.
	s, err := catalog.ReadSeries(ctx, pool, "x", "raw", start, start.Add(75*time.Minute))
	if err != nil || len(s.Points) != 2 || s.SeenUntil == nil || !s.SeenUntil.Equal(start.Add(time.Hour)) {
		t.Fatalf("raw until +75m: %d points, seen until %v (%v); want 2 points, seen until %s", len(s.Points), s.SeenUntil, err, start.Add(time.Hour))
	}
	// Hourly until +75m holds the candle of +1h whole, closing at 120 (the change at +1h30):
	// that market held until the last collection, not the 90 before it.
	for _, until := range []time.Duration{75 * time.Minute, 3 * time.Hour} {
		if s, err := catalog.ReadSeries(ctx, pool, "x", "1h", start, start.Add(until)); err != nil || s.SeenUntil == nil || !s.SeenUntil.Equal(start.Add(2*time.Hour)) {
			t.Fatalf("1h until +%s: seen until %v (%v), want the last collection %s", until, s.SeenUntil, err, start.Add(2*time.Hour))
		}
	}

	out, _, err = runCollector(t, "history", "x", "--database-url", db, "--interval", "1h", "--since", "36h", "-o", "csv")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if !strings.HasPrefix(lines[0], "bucket,snapshots,open,high,low,close") || len(lines) < 3 {
		t.Fatalf("hourly csv: %s", out)
	}

	out, _, err = runCollector(t, "history", "x", "--database-url", db, "--interval", "1d")
	if err != nil || !strings.Contains(out, "seen until") {
		t.Fatalf("daily table: %q %v", out, err)
	}

	for _, bad := range [][]string{{"--since", "soon"}, {"--interval", "5m"}, {"-o", "yaml"}} {
		_, _, err := runCollector(t, append([]string{"history", "x", "--database-url", db}, bad...)...)
		if err == nil || exitCode(err) != exitUsage || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("history %v: %v (exit %d), want a usage error naming %s", bad, err, exitCode(err), bad[0])
		}
	}
	if _, _, err := runCollector(t, "history", "nope", "--database-url", db); err == nil || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("an unknown item: %v", err)
	}
}
