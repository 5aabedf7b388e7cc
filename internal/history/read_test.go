package history_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/history"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// RecentSales lists an item's newest sales first, stops at the limit, and leaves other items'
// sales alone; sales of one second come last-seq first.
func TestRecentSalesNewestFirst(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	storetest.Items(t, pool, storetest.Item{ID: "a"}, storetest.Item{ID: "b"})
	storetest.Sales(t, pool,
		storetest.Sale{ItemID: "a", SoldAt: storetest.Ago(3 * time.Hour), UnitPrice: 300},
		storetest.Sale{ItemID: "a", SoldAt: storetest.Ago(time.Hour), UnitPrice: 100},
		storetest.Sale{ItemID: "a", SoldAt: storetest.Ago(time.Hour), Seq: 1, UnitPrice: 101},
		storetest.Sale{ItemID: "a", SoldAt: storetest.Ago(2 * time.Hour), UnitPrice: 200},
		storetest.Sale{ItemID: "b", SoldAt: storetest.Ago(time.Minute), UnitPrice: 999},
	)
	got, err := history.RecentSales(context.Background(), pool, "a", 3)
	if err != nil {
		t.Fatal(err)
	}
	var prices []int64
	for _, s := range got {
		prices = append(prices, s.UnitPrice)
	}
	if len(prices) != 3 || prices[0] != 101 || prices[1] != 100 || prices[2] != 200 {
		t.Fatalf("recent sales of a: %v, want [101 100 200]", prices)
	}
}

// A read from `since` starts with the snapshot in force then (written before it, held until
// the next), and candles with the bucket holding `since`: a change-only series that last
// changed before the window still says what the market was in it.
func TestReadCoversTheWholeStretchFromSince(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	storetest.Items(t, pool, storetest.Item{ID: "x"})
	hour := time.Now().UTC().Truncate(time.Hour).Add(-5 * time.Hour)
	p := history.Policy{Heartbeat: 24 * time.Hour}
	m := newMarket(1)
	var last *history.Written
	var seen *time.Time
	for _, at := range []time.Time{hour.Add(10 * time.Minute), hour.Add(2*time.Hour + 5*time.Minute)} {
		m.state.Lowest = p64(at.Unix() % 1000)
		collect(t, pool, p, "x", at, m, &last, &seen)
	}
	since := hour.Add(30 * time.Minute) // after the first snapshot, before the second
	raw, err := history.ReadBetween(ctx, pool, "x", "raw", since, time.Time{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw.Points) != 2 || !raw.Points[0].At.Equal(hour.Add(10*time.Minute)) {
		t.Fatalf("raw points from %v: %+v; want the one in force at since, then the next", since, raw.Points)
	}
	hourly, err := history.ReadBetween(ctx, pool, "x", history.Hourly, since, time.Time{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(hourly.Candle) == 0 || !hourly.Candle[0].Bucket.Equal(hour) {
		t.Fatalf("hourly candles from %v start at %+v; want the hour holding since, %v", since, hourly.Candle, hour)
	}
}

// The snapshot in force at since is found however long before since it was written: within
// the first, bounded look-back, past it (an item quiet for days), or not at all (an item
// whose history starts after since).
func TestReadFindsTheSnapshotInForceHoweverOld(t *testing.T) {
	pool, _ := storetest.NewPool(t)
	ctx := context.Background()
	storetest.Items(t, pool, storetest.Item{ID: "quiet"}, storetest.Item{ID: "new"})
	since := time.Now().UTC().Truncate(time.Hour).Add(-2 * time.Hour)
	p := history.Policy{Heartbeat: 168 * time.Hour}
	for id, times := range map[string][]time.Time{
		"quiet": {since.Add(-6 * 24 * time.Hour), since.Add(-3 * 24 * time.Hour), since.Add(time.Hour)},
		"new":   {since.Add(30 * time.Minute)},
	} {
		m := newMarket(2)
		var last *history.Written
		var seen *time.Time
		for _, at := range times {
			m.state.Lowest = p64(at.Unix() % 1000)
			collect(t, pool, p, id, at, m, &last, &seen)
		}
	}
	for id, want := range map[string][]time.Time{
		"quiet": {since.Add(-3 * 24 * time.Hour), since.Add(time.Hour)},
		"new":   {since.Add(30 * time.Minute)},
	} {
		s, err := history.ReadBetween(ctx, pool, id, "raw", since, time.Time{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		var got []time.Time
		for _, pt := range s.Points {
			got = append(got, pt.At)
		}
		if !slices.EqualFunc(got, want, time.Time.Equal) {
			t.Errorf("%s: raw points from %v at %v, want %v", id, since, got, want)
		}
	}
}
