package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/catalog"
	"github.com/duecollector/duecollector/internal/provider"
)

// A panic while one item is fetched, read or written is a bug that item's data meets. Left to
// kill the process it would stall collection for everyone: the item's lease lapses, the next
// collector claims it and dies in turn, and so on at every lease. So the dispatcher turns it
// into that item's failure (outcome "panic", the panic in last_error, its stack in the log),
// rescheduled by tier like any other, and collection goes on.

// outcomePanic is last_outcome of an item whose collection met a panic.
const outcomePanic = "panic"

// bugError is a recovered panic.
type bugError struct {
	value any
	stack []byte
	site  string // the stack's program counters: alike for every item that meets the bug on one code path
}

// ProviderClass is ClassBug: a bug of ours says nothing of the provider's health.
func (e *bugError) ProviderClass() provider.Class { return provider.ClassBug }

func (e *bugError) Error() string {
	return fmt.Sprintf("collector bug: panic %v (its stack is in the log)", e.value)
}

// newBugError is the panic p, recovered in a deferred function.
func newBugError(p any) *bugError {
	pcs := make([]uintptr, 32)
	n := runtime.Callers(2, pcs)
	return &bugError{value: p, stack: debug.Stack(), site: fmt.Sprint(pcs[:n])}
}

// isBug reports whether err is, or wraps, a recovered panic.
func isBug(err error) bool {
	var b *bugError
	return errors.As(err, &b)
}

// guard runs f, turning a panic in it into a bugError.
func guard[T any](f func() T) (v T, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = newBugError(p)
		}
	}()
	return f(), nil
}

// bugStackEvery is how often one panic site's stack is logged again: a bug every answer meets
// would otherwise log a stack per item (thousands a minute); the pass's failure line counts
// the items (outcome panic).
const bugStackEvery = time.Hour

// bugSites remembers when each panic site's stack was last logged.
type bugSites struct {
	mu     sync.Mutex
	logged map[string]time.Time
}

// due reports whether site's stack is to be logged at now, and if so marks it logged.
func (s *bugSites) due(site string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.logged[site]; ok && now.Sub(last) < bugStackEvery {
		return false
	}
	if s.logged == nil {
		s.logged = map[string]time.Time{}
	}
	s.logged[site] = now
	return true
}

// logBug logs a recovered panic where it was met: with its stack the first time its site is
// met (and once an hour after), at debug level between.
func (d *Dispatcher) logBug(msg string, ids []string, err error) {
	var b *bugError
	if !errors.As(err, &b) {
		return
	}
	if !d.bugs.due(b.site, time.Now()) {
		d.log.Debug(msg, zap.Strings("item_ids", ids), zap.String("panic", fmt.Sprint(b.value)))
		return
	}
	d.log.Error(msg, zap.Strings("item_ids", ids), zap.String("panic", fmt.Sprint(b.value)), zap.ByteString("stack", b.stack))
}

// fetchGroup fetches a group (one item alone, or several sharing packed calls) so that a panic
// fails only the item whose answer meets it: a packed group that panics is fetched again one
// item at a time to find which.
func (d *Dispatcher) fetchGroup(ctx context.Context, group []catalog.Claim, st packingState, f *flow) []result {
	if len(group) > 1 {
		rs, err := guard(func() []result { return d.fetchPacked(ctx, group, st, f) })
		if err == nil {
			return rs
		}
		d.logBug("a packed fetch panicked (a bug); fetching its items one at a time", claimIDs(group), err)
	}
	out := make([]result, len(group))
	for i, c := range group {
		r, err := guard(func() result { return d.fetchOne(ctx, c) })
		if err != nil {
			d.logBug("fetching an item panicked (a bug); it is rescheduled by tier as failed", []string{c.ItemID}, err)
			r = result{claim: c, at: d.clock.now(), err: err, outcome: outcomePanic, window: d.cfg.EstimateWindow}
		} else if class := provider.ClassOf(r.err); r.err != nil && endsPass(class) && d.ownAnswer(ctx, f, c, r.err) {
			// Judged while the call's slot is held: no call of the pass starts meanwhile.
			r.outcome = ownOutcome(class)
		}
		out[i] = r
	}
	return out
}

func claimIDs(cs []catalog.Claim) []string {
	ids := make([]string, len(cs))
	for i, c := range cs {
		ids[i] = c.ItemID
	}
	return ids
}
