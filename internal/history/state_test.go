package history

import (
	"testing"
	"time"
)

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
