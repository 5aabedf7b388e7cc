package history

import (
	"math"
	"reflect"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
)

func p64(v int64) *int64                { return &v }
func pf(v float64) *float64             { return &v }
func at(min int) time.Time              { return time.Date(2026, 12, 2, 10, min, 0, 0, time.UTC) }
func written(s State, min int) *Written { return &Written{State: s, At: at(min)} }

var base = State{Count: 3, Quantity: 7, Lowest: p64(100), Median: p64(120), Weighted: pf(115.5), APIAverage: p64(110)}

func TestFirstCollectionAlwaysWrites(t *testing.T) {
	for _, every := range []bool{false, true} {
		if got := (Policy{Every: every, Heartbeat: time.Hour}).Decide(nil, base, 0, at(0)); got != First {
			t.Errorf("every=%v: %q, want first", every, got)
		}
	}
}

func TestEveryFieldASnapshotStoresIsAChange(t *testing.T) {
	p := Policy{Heartbeat: time.Hour}
	last := written(base, 0)
	changed := map[string]func(*State){
		"count":       func(s *State) { s.Count++ },
		"quantity":    func(s *State) { s.Quantity++ },
		"lowest":      func(s *State) { s.Lowest = p64(99) },
		"lowest gone": func(s *State) { s.Lowest = nil },
		"median":      func(s *State) { s.Median = p64(121) },
		"weighted":    func(s *State) { s.Weighted = pf(115.25) },
		"api average": func(s *State) { s.APIAverage = nil },
		"truncated":   func(s *State) { s.Truncated = true },
	}
	for name, change := range changed {
		cur := base
		change(&cur)
		if got := p.Decide(last, cur, 0, at(1)); got != Change {
			t.Errorf("%s changed: %q, want change", name, got)
		}
	}
	same := base
	same.Lowest, same.Weighted = p64(100), pf(115.5) // equal values behind other pointers
	if got := p.Decide(last, same, 0, at(1)); got != Skip {
		t.Errorf("same market: %q, want skip", got)
	}
	if got := p.Decide(last, same, 2, at(1)); got != Change {
		t.Errorf("new sales: %q, want change", got)
	}
}

// Equal compares every field of State, found by reflection: a figure added to State and not to
// Equal would let a change in it alone write no snapshot, while the item's seen_* copy (the
// read API's /latest) moved on.
func TestEqualComparesEveryFieldOfState(t *testing.T) {
	typ := reflect.TypeFor[State]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		var changes []reflect.Value // values of the field that differ from base's
		switch v := reflect.ValueOf(base).Field(i); f.Type.Kind() {
		case reflect.Int, reflect.Int64:
			changes = append(changes, reflect.ValueOf(v.Int()+1).Convert(f.Type))
		case reflect.Bool:
			changes = append(changes, reflect.ValueOf(!v.Bool()))
		case reflect.Pointer:
			if v.IsNil() {
				t.Fatalf("base.%s is nil: give it a value", f.Name)
			}
			other := reflect.New(f.Type.Elem())
			switch f.Type.Elem().Kind() {
			case reflect.Int64:
				other.Elem().SetInt(v.Elem().Int() + 1)
			case reflect.Float64:
				other.Elem().SetFloat(v.Elem().Float() + 0.5)
			default:
				t.Fatalf("State.%s: a %s; teach this test to change it", f.Name, f.Type)
			}
			same := reflect.New(f.Type.Elem())
			same.Elem().Set(v.Elem())
			cur := base
			reflect.ValueOf(&cur).Elem().Field(i).Set(same)
			if !base.Equal(cur) {
				t.Errorf("State.%s: an equal value behind another pointer reads as a change", f.Name)
			}
			changes = append(changes, other, reflect.Zero(f.Type))
		default:
			t.Fatalf("State.%s: a %s; teach this test to change it", f.Name, f.Type)
		}
		for _, c := range changes {
			cur := base
			reflect.ValueOf(&cur).Elem().Field(i).Set(c)
			if base.Equal(cur) || cur.Equal(base) {
				t.Errorf("State.%s changed to %v: Equal still reports the same market", f.Name, c)
			}
		}
	}
}

func TestHeartbeatWritesAnUnchangedMarketOnceItIsDue(t *testing.T) {
	p := Policy{Heartbeat: time.Hour}
	last := written(base, 0)
	if got := p.Decide(last, base, 0, at(59)); got != Skip {
		t.Errorf("59 min after: %q, want skip", got)
	}
	if got := p.Decide(last, base, 0, at(60)); got != Heartbeat {
		t.Errorf("60 min after: %q, want heartbeat", got)
	}
}

func TestEveryModeWritesRepeats(t *testing.T) {
	p := Policy{Every: true, Heartbeat: time.Hour}
	if got := p.Decide(written(base, 0), base, 0, at(1)); got != Repeat {
		t.Errorf("%q, want repeat", got)
	}
}

func TestSummarizeListings(t *testing.T) {
	rows := []provider.Listing{
		{UnitPrice: 49, Count: 15000, AveragePrice: 40},
		{UnitPrice: 50, Count: 5000, AveragePrice: 40},
		{UnitPrice: 70, Count: 10},
		{UnitPrice: -1, Count: 3}, // price -1 rows say nothing
	}
	s := Summarize(rows, false)
	if s.Count != 3 || s.Quantity != 20010 || s.Truncated {
		t.Fatalf("count/quantity = %d/%d, want 3/20010", s.Count, s.Quantity)
	}
	if *s.Lowest != 49 || *s.Median != 50 || *s.APIAverage != 40 {
		t.Fatalf("lowest/median/avg = %d/%d/%d", *s.Lowest, *s.Median, *s.APIAverage)
	}
	want := (49.0*15000 + 50.0*5000 + 70.0*10) / 20010
	if d := *s.Weighted - want; d > 1e-9 || d < -1e-9 {
		t.Fatalf("weighted = %v, want %v", *s.Weighted, want)
	}
	if s := Summarize(rows, true); !s.Truncated {
		t.Fatal("an answer that reached the limit must be flagged truncated")
	}
	// An even number of listings: the median is the lower of the two middle prices (prices are
	// integers, and the lower one is a price someone asks).
	even := append(rows[:3:3], provider.Listing{UnitPrice: 90, Count: 1})
	if s := Summarize(even, false); *s.Median != 50 {
		t.Fatalf("median of 49, 50, 70, 90 = %d, want 50", *s.Median)
	}
	if e := Summarize(nil, false); e.Lowest != nil || e.Median != nil || e.Weighted != nil || e.Count != 0 {
		t.Fatalf("empty listings must give null prices: %+v", e)
	}
	// Rows that each fit but whose units sum past 64 bits: the quantity saturates instead of
	// wrapping negative, and the weighted price stays a positive, finite figure.
	huge := []provider.Listing{{UnitPrice: 1, Count: math.MaxInt64}, {UnitPrice: 1, Count: math.MaxInt64}}
	if s := Summarize(huge, false); s.Quantity != math.MaxInt64 || *s.Weighted != 1 {
		t.Fatalf("huge listings: quantity %d, weighted %v; want a saturated quantity and the true weighted price 1", s.Quantity, *s.Weighted)
	}
}

func TestSequenceSalesKeysDuplicatesByPosition(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 1, 0, 0, 0, provider.KST)
	sale := func(sec int, qty, unit int64) provider.Sale {
		return provider.Sale{SoldAt: t0.Add(time.Duration(sec) * time.Second), Count: qty, UnitPrice: unit, Price: qty * unit}
	}
	// Newest first, as the API returns them; three identical sales in second 5.
	rows := []provider.Sale{sale(9, 1, 100), sale(5, 2, 50), sale(5, 2, 50), sale(5, 2, 50), sale(1, 1, 10)}
	got := SequenceSales(rows, false, nil)
	if len(got) != 5 {
		t.Fatalf("got %d sales, want 5", len(got))
	}
	wantSeq := []int32{0, 0, 1, 2, 0} // chronological: s1, s5#0, s5#1, s5#2, s9
	for i, s := range got {
		if s.Seq != wantSeq[i] {
			t.Fatalf("sale %d seq = %d, want %d (%+v)", i, s.Seq, wantSeq[i], got)
		}
	}
	// A later fetch with one more sale in second 5 keeps the old keys and adds seq 3.
	rows2 := append([]provider.Sale{sale(9, 1, 100), sale(5, 2, 50)}, rows[1:]...)
	got2 := SequenceSales(rows2, false, nil)
	keys := map[[2]int64]bool{}
	for _, s := range got {
		keys[[2]int64{s.SoldAt.Unix(), int64(s.Seq)}] = true
	}
	var added int
	for _, s := range got2 {
		if !keys[[2]int64{s.SoldAt.Unix(), int64(s.Seq)}] {
			added++
		}
	}
	// Only (5,3), the fourth sale in second 5, is new.
	if added != 1 {
		t.Fatalf("re-fetch added %d new keys, want 1", added)
	}
}

func TestSequenceSalesDropsCutOffOldestSecondWhenFull(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 1, 0, 0, 0, provider.KST)
	rows := []provider.Sale{
		{SoldAt: t0.Add(2 * time.Second), Count: 1, UnitPrice: 1, Price: 1},
		{SoldAt: t0, Count: 1, UnitPrice: 1, Price: 1},
		{SoldAt: t0, Count: 1, UnitPrice: 1, Price: 1},
	}
	stored := t0.UTC()
	if got := SequenceSales(rows, true, &stored); len(got) != 1 {
		t.Fatalf("full response reaching back to the newest stored second: got %d sales, want only the uncut newest second", len(got))
	}
	if got := SequenceSales(rows, false, &stored); len(got) != 3 {
		t.Fatalf("response under the limit: got %d sales, want 3", len(got))
	}
	// A full page whose oldest second is newer than any stored: no later page can show that
	// second again, so what this one shows of it is kept rather than lost.
	older := t0.Add(-time.Minute).UTC()
	for name, st := range map[string]*time.Time{"newer than the stored": &older, "nothing stored": nil} {
		if got := SequenceSales(rows, true, st); len(got) != 3 || got[0].Seq != 0 || got[1].Seq != 1 {
			t.Fatalf("full response, oldest second %s: got %+v, want all 3 sales, the oldest second's at positions 0 and 1", name, got)
		}
	}
}

func TestNewSalesKeepsTheWatermarkSecond(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 1, 0, 0, 0, time.UTC)
	rows := []Sale{{SoldAt: t0}, {SoldAt: t0.Add(time.Second)}, {SoldAt: t0.Add(time.Second), Seq: 1}, {SoldAt: t0.Add(2 * time.Second)}}
	wm := t0.Add(time.Second)
	open := t0.Add(time.Hour)
	if got := NewSales(append([]Sale(nil), rows...), &wm, 0, open); len(got) != 3 || !got[0].SoldAt.Equal(wm) {
		t.Fatalf("got %+v: want the watermark second and newer", got)
	}
	if got := NewSales(append([]Sale(nil), rows...), &wm, 1, open); len(got) != 2 || got[0].Seq != 1 {
		t.Fatalf("got %+v: want the watermark second's second sale (one of it stored) and newer", got)
	}
	if got := NewSales(append([]Sale(nil), rows...), &wm, 2, open); len(got) != 1 || !got[0].SoldAt.After(wm) {
		t.Fatalf("got %+v: want only the newer second (the watermark second fully stored)", got)
	}
	if got := NewSales(append([]Sale(nil), rows...), nil, 0, open); len(got) != 4 {
		t.Fatal("no watermark: every sale is offered")
	}
}

// A second too close to the collection may still gain sales, ordered among its others by
// price: its sales, and any dated later (the future included), wait for the next collection.
func TestNewSalesHoldsBackASecondStillUnderWay(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 1, 0, 0, 0, time.UTC)
	rows := []Sale{{SoldAt: t0}, {SoldAt: t0.Add(10 * time.Second)}, {SoldAt: t0.Add(10 * time.Second), Seq: 1}, {SoldAt: t0.Add(time.Hour)}}
	at := t0.Add(10*time.Second + 300*time.Millisecond) // read during the second of two of them
	got := NewSales(append([]Sale(nil), rows...), nil, 0, Settled(at))
	if len(got) != 1 || !got[0].SoldAt.Equal(t0) {
		t.Fatalf("got %+v: want only the second that was over", got)
	}
	later := t0.Add(10*time.Second + SalesSettle + time.Second)
	got = NewSales(append([]Sale(nil), rows...), &t0, 1, Settled(later))
	if len(got) != 2 || !got[0].SoldAt.Equal(t0.Add(10*time.Second)) || got[1].Seq != 1 {
		t.Fatalf("got %+v: want the second held back, now over, whole", got)
	}
}

func TestLastSecondCountsItsPositions(t *testing.T) {
	t0 := time.Date(2026, 5, 1, 1, 0, 0, 0, time.UTC)
	if at, n := lastSecondOf(nil); at != nil || n != 0 {
		t.Fatalf("no sales: got %v, %d", at, n)
	}
	at, n := lastSecondOf([]Sale{{SoldAt: t0.Add(time.Second), Seq: 2}, {SoldAt: t0, Seq: 5}, {SoldAt: t0.Add(time.Second), Seq: 3}})
	if !at.Equal(t0.Add(time.Second)) || n != 4 {
		t.Fatalf("got %v, %d: want the newest second with 4 positions filled", at, n)
	}
}

func TestSalesGapIsAFullPageOfOnlyNewerSales(t *testing.T) {
	stored := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	page := func(n int, oldest time.Time) []provider.Sale {
		rows := make([]provider.Sale, n)
		for i := range rows {
			rows[i].SoldAt = oldest.Add(time.Duration(n-1-i) * time.Second) // newest first
		}
		return rows
	}
	collected := stored.Add(time.Minute)
	for _, tc := range []struct {
		name              string
		rows              []provider.Sale
		stored, collected *time.Time
		dropped           int // rows the provider sent that the row check dropped
		want              bool
	}{
		{"full page, all newer", page(100, stored.Add(time.Second)), &stored, &collected, 0, true},
		{"full page reaching the stored second", page(100, stored), &stored, &collected, 0, false},
		{"full page reaching older sales", page(100, stored.Add(-time.Minute)), &stored, &collected, 0, false},
		{"short page", page(99, stored.Add(time.Hour)), &stored, &collected, 0, false},
		// The provider sent 100 rows and the row check dropped one: the page was still full.
		{"full page as sent, a row dropped", page(99, stored.Add(time.Second)), &stored, &collected, 1, true},
		{"never collected", page(100, stored.Add(time.Hour)), nil, nil, 0, false},
		// The last page was empty: every sale since that collection is new, so a full page
		// that does not reach back to it lost some.
		{"no sale stored, full page all after the last collection", page(100, collected.Add(time.Second)), nil, &collected, 0, true},
		{"no sale stored, full page reaching the last collection's settled seconds", page(100, Settled(collected)), nil, &collected, 0, false},
		// That collection held its last seconds back: pushed off the page, they are lost.
		{"no sale stored, full page reaching only into the seconds held back", page(100, collected.Add(-time.Second)), nil, &collected, 0, true},
	} {
		sent := len(tc.rows) + tc.dropped
		if got := SalesGap(tc.rows, sent >= 100, tc.stored, tc.collected, 0); got != tc.want {
			t.Errorf("%s: gap %v, want %v", tc.name, got, tc.want)
		}
	}
	// A provider whose clock trails the database's by 30 s dated the last collection's page 30 s
	// earlier: a full page of only sales after that, by its clock, lost some.
	behind := -30 * time.Second
	if !SalesGap(page(100, collected.Add(behind+time.Second)), true, nil, &collected, behind) {
		t.Error("provider 30 s behind, no sale stored, a full page all after the last collection by its clock: no gap found")
	}
	if SalesGap(page(100, Settled(collected.Add(behind))), true, nil, &collected, behind) {
		t.Error("provider 30 s behind, a full page reaching the last collection's settled seconds by its clock: a gap found")
	}
}
