package store

import (
	"context"
	"time"
)

// TakeOvertime is how long a statement that takes something (a claim, a lease) may go on after
// its caller is stopped.
const TakeOvertime = 5 * time.Second

// LetFinish is ctx, except that it ends TakeOvertime after ctx does. A statement that takes
// something, cut on its way, may still commit on the server: what it took would be held by
// nobody until its lease ran out. Let finish, the caller learns of it and hands it back.
func LetFinish(ctx context.Context) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stop := context.AfterFunc(ctx, func() {
		t := time.NewTimer(TakeOvertime)
		defer t.Stop()
		select {
		case <-t.C:
			cancel()
		case <-cctx.Done():
		}
	})
	return cctx, func() { stop(); cancel() }
}
