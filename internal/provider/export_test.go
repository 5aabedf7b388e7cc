package provider

import (
	"testing"
	"time"
)

// StopProcessFor makes every call made during the test look as if this process had been stopped
// for d while it was in flight.
func StopProcessFor(t *testing.T, d time.Duration) {
	since = func(at time.Time) time.Duration { return time.Since(at) + d }
	t.Cleanup(func() { since = time.Since })
}
