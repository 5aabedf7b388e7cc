package budget

import (
	"sync"
	"time"
)

// fakeClock is a Clock that moves only when the test says so. Waiters registered with After
// fire when Set or Advance passes their time; waiting, when initialised, hears each new waiter
// so a test can tell that a goroutine is blocked on the clock instead of guessing.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	timers  []fakeTimer
	waiting chan struct{}
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

// newFakeClock starts at the wall clock's current second, so that rows written with its time
// read sensibly next to the database's now().
func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Now().Truncate(time.Second), waiting: make(chan struct{}, 64)}
}

// sharesRowTime: the shared row's statements run on the test's time, so rate steps and cuts
// follow it (sharedClock).
func (*fakeClock) sharesRowTime() {}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.timers = append(c.timers, fakeTimer{at: c.now.Add(d), ch: ch})
	select {
	case c.waiting <- struct{}{}:
	default:
	}
	return ch
}

func (c *fakeClock) Advance(d time.Duration) { c.Set(c.Now().Add(d)) }

// Set moves the clock to t (never back) and fires the waiters due by then.
func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.After(c.now) {
		c.now = t
	}
	kept := c.timers[:0]
	for _, w := range c.timers {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.timers = kept
}
