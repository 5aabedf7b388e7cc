package api

import "time"

// TakeReadSlot takes one of the API's database read slots until the returned func is called.
func (a *API) TakeReadSlot() (release func()) {
	a.slots <- struct{}{}
	return func() { <-a.slots }
}

// SetChangeOverlap sets how far before the last read's horizon a /latest refresh looks, before
// the first request: a test can then tell the horizon from the overlap.
func (a *API) SetChangeOverlap(d time.Duration) { a.latest.overlap = d }

// SetSlotWait sets how long a read waits for a slot, returning a func that puts it back.
func SetSlotWait(d time.Duration) (restore func()) {
	old := slotWait.Swap(int64(d))
	return func() { slotWait.Store(old) }
}
