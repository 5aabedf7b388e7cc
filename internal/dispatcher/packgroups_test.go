package dispatcher

import (
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/packing"
	"github.com/duecollector/duecollector/internal/provider"
)

// Small items share a call only as far as their listings last time fill 3/4 of the answer's
// limit (packing.GroupListings): a fuller answer would be cut, and every item of it asked
// again alone.
func TestPackedCallsLeaveTheAnswerRoomToGrow(t *testing.T) {
	d := &Dispatcher{packSize: 10, auctionLimit: 400, cfg: Config{PackMaxListings: 200, PackMaxSales: 5}}
	listings := int32(140) // two fill 280 of the 300 a call may hold; a third would not fit
	claims := make([]catalog.Claim, 5)
	for i := range claims {
		claims[i] = catalog.Claim{ItemID: string(rune('a' + i)), SeenListings: &listings}
	}
	jobs := d.jobsFor(claims, packingState{listings: true, sales: true})
	if len(jobs) != 3 {
		t.Fatalf("%d calls for five items of %d listings each, want 3 (2 + 2 + 1)", len(jobs), listings)
	}
	for _, j := range jobs {
		if rows := len(j) * int(listings); rows > packing.GroupListings(d.auctionLimit) {
			t.Errorf("a call of %d items expects %d listings, over %d", len(j), rows, packing.GroupListings(d.auctionLimit))
		}
	}
}

// A part cut within a second loses that second's rows whole: positions within a second are
// the sales' keys, and the cut may have taken some of them.
func TestDropOldestSecondDropsTheWholeSecond(t *testing.T) {
	at := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	rows := []provider.Sale{{SoldAt: at.Add(2 * time.Second)}, {SoldAt: at.Add(time.Second + 500*time.Millisecond)},
		{SoldAt: at.Add(500 * time.Millisecond)}, {SoldAt: at}}
	if got := dropOldestSecond(rows); len(got) != 2 || !got[1].SoldAt.Equal(at.Add(time.Second+500*time.Millisecond)) {
		t.Fatalf("kept %v, want the two newest seconds' rows", got)
	}
	if got := dropOldestSecond(rows[3:]); len(got) != 0 {
		t.Fatalf("a part of one second kept %v, want nothing", got)
	}
}
