package dispatcher

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
)

// StopReason is why a pass ended.
type StopReason int

const (
	// StopNone: the pass did not end by one of the reasons below (an error ended it).
	StopNone StopReason = iota
	StopNothingDue
	StopMaxBatches
	StopSpan        // the pass claimed for Config.Span (more may be due: the next pass goes on)
	StopInterrupted // ctx ended (shutdown)
	StopPaused      // the provider status may not dispatch
	StopMaintenance // a maintenance answer
	StopRateLimited // a rate limit that outlasted the retries, or a cool-down
	StopKeyRefused  // the key was refused
	StopEndpoint    // provider.base_url does not answer as the API, or with a gateway code not in its table
)

// String is the reason as summaries and logs print it.
func (r StopReason) String() string {
	switch r {
	case StopNothingDue:
		return "nothing due"
	case StopMaxBatches:
		return "max batches"
	case StopSpan:
		return "span"
	case StopInterrupted:
		return "interrupted"
	case StopPaused:
		return "paused"
	case StopMaintenance:
		return provider.ClassMaintenance.String()
	case StopRateLimited:
		return provider.ClassRateLimited.String()
	case StopKeyRefused:
		return provider.ClassConfig.String()
	case StopEndpoint:
		return provider.ClassEndpoint.String()
	}
	return ""
}

// Summary is what a pass did.
type Summary struct {
	Paused       bool
	Status       provider.Status
	StatusReason string
	StatusSince  time.Time

	Batches int
	// EmptyClaims counts the claims of the most urgent tier alone (Config.TopAhead) that found
	// none: with Batches, the claim statements the pass ran.
	EmptyClaims int
	Claimed     int
	// PlannedRequests is what the plan counted the claimed collections as costing
	// (requests_per_collection): beside the calls made, how far off the plan's costs are.
	PlannedRequests float64
	Collected       int
	Failed          int
	// ItemErrors counts the failed whose provider answered the item itself was wrong
	// (item_error: unknown, removed), or whose maintenance answer, refused key or answer not
	// the API's was judged their own (item_maintenance, item_config, item_endpoint): failures
	// of theirs, not of the provider's or ours.
	ItemErrors int
	Fenced     int
	Released   int
	Stop       StopReason
	// CooldownUntil is when the key may be used again, when a rate limit with a known end
	// stopped the pass.
	CooldownUntil time.Time
	// StopAnswer is the provider answer that ended the pass, if one did.
	StopAnswer string
	Duration   time.Duration

	Claim, Fetch, Persist Timing
}

// Timing is a stage's latency distribution over the pass.
type Timing struct {
	N        int
	P50, P95 time.Duration
}

func (s Summary) String() string {
	paused := ""
	if s.Paused {
		paused = fmt.Sprintf("collection paused: provider %s since %s (%s)", s.Status, s.StatusSince.UTC().Format(time.RFC3339), s.StatusReason)
		if s.Claimed == 0 {
			return paused
		}
		paused = " | " + paused
	}
	cooling := ""
	if !s.CooldownUntil.IsZero() {
		cooling = fmt.Sprintf(" | rate limited: the key cools down until %s", s.CooldownUntil.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("claimed=%d collected=%d failed=%d fenced_out=%d released=%d batches=%d duration=%s stop=%q | claim p50=%s p95=%s | fetch p50=%s p95=%s | persist p50=%s p95=%s",
		s.Claimed, s.Collected, s.Failed, s.Fenced, s.Released, s.Batches, s.Duration.Round(time.Millisecond), s.Stop,
		s.Claim.P50, s.Claim.P95, s.Fetch.P50, s.Fetch.P95, s.Persist.P50, s.Persist.P95) + cooling + paused
}

type timings struct {
	mu                    sync.Mutex
	claim, fetch, persist samples
}

// timingSamples bounds what a pass keeps of each kind of timing: a daemon's pass through a
// backlog claims for a minute (Config.Span) and a one-shot's for as long as items are due, and
// kept whole its timings grew by the item. Past the bound a uniform sample is kept (reservoir
// sampling), so the quantiles are still the pass's.
const timingSamples = 4096

// samples is a bounded uniform sample of durations and how many there were.
type samples struct {
	kept []time.Duration
	seen int
}

func (t *timings) add(dst *samples, d time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	dst.seen++
	if len(dst.kept) < timingSamples {
		dst.kept = append(dst.kept, d)
		return
	}
	if i := rand.IntN(dst.seen); i < timingSamples {
		dst.kept[i] = d
	}
}

func summarize(ds samples) Timing {
	if len(ds.kept) == 0 {
		return Timing{}
	}
	s := append([]time.Duration(nil), ds.kept...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) time.Duration { return s[int(q*float64(len(s)-1))].Round(time.Microsecond) }
	return Timing{N: ds.seen, P50: at(0.50), P95: at(0.95)}
}
