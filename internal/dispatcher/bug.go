package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"

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
}

// ProviderClass is ClassBug: a bug of ours says nothing of the provider's health.
func (e *bugError) ProviderClass() provider.Class { return provider.ClassBug }

func (e *bugError) Error() string {
	return fmt.Sprintf("collector bug: panic %v (its stack is in the log)", e.value)
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
			err = &bugError{value: p, stack: debug.Stack()}
		}
	}()
	return f(), nil
}

// logBug logs a recovered panic with its stack, once, where it was met.
func (d *Dispatcher) logBug(msg string, ids []string, err error) {
	var b *bugError
	if !errors.As(err, &b) {
		return
	}
	d.log.Error(msg, zap.Strings("item_ids", ids), zap.String("panic", fmt.Sprint(b.value)), zap.ByteString("stack", b.stack))
}

// fetchGroup fetches a group (one item alone, or several sharing packed calls) so that a panic
// fails only the item whose answer meets it: a packed group that panics is fetched again one
// item at a time to find which.
func (d *Dispatcher) fetchGroup(ctx context.Context, group []catalog.Claim, st packingState) []result {
	if len(group) > 1 {
		rs, err := guard(func() []result { return d.fetchPacked(ctx, group, st) })
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
