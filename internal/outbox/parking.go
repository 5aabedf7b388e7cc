package outbox

import (
	"slices"
	"time"
)

// parking is the items whose events Kafka refused (per message, not the whole call): a
// partition out of service (no leader, too few in-sync replicas, its broker timing out) while
// others take theirs. Their rows stay pending, and the relay's reads and calls leave out every
// row of theirs until the retry, so that one partition holds back its own items only (its rows
// used to fill the head of every read and stop the relay) and none of their events overtakes
// an earlier unacknowledged one. A following relay retries them after a back-off; a pass
// (RunOnce) once nothing else is left, as an attempt.
//
// Until Kafka has taken another message while they were parked (confirmed), nothing says the
// refusal was one partition's: Kafka may be out whole. So a call of which nothing went through
// stalls the step, and a following relay left idle by its parked items counts that as a failed
// attempt: it backs off and, after a lease, hands its lanes back, as in any outage. A call of
// other items that goes nowhere takes the confirmation back: Kafka may have gone out whole since.
type parking struct {
	items     map[string]struct{}
	until     time.Time           // when a following relay retries them
	rounds    int                 // retries so far that were refused again: the back-off's step
	err       error               // the last refusal
	retrying  map[string]struct{} // the items of the last retry
	confirmed bool                // Kafka took other messages while items were parked, and since
}

// park adds the items of the call's rows that were not settled.
func (p *parking) park(call []*pendingRow, err error, delay func(attempt int) time.Duration) {
	switch {
	case slices.ContainsFunc(call, func(row *pendingRow) bool { return row.sent }):
		p.confirmed = true
	case !p.refusedAgain(call):
		p.confirmed = false
	}
	if len(p.items) == 0 {
		p.items = map[string]struct{}{}
		p.until = time.Now().Add(delay(p.rounds + 1))
	}
	for _, row := range call {
		if !row.sent {
			p.items[row.ItemID] = struct{}{}
		}
	}
	p.err = err
}

func (p *parking) has(item string) bool {
	_, ok := p.items[item]
	return ok
}

// skip is what readPending leaves out.
func (p *parking) skip() map[string]struct{} { return p.items }

// due says whether a following relay retries the parked items now.
func (p *parking) due(now time.Time) bool { return len(p.items) > 0 && !now.Before(p.until) }

// unpark lets the items' rows be read again, from the oldest.
func (p *parking) unpark() {
	p.retrying, p.items = p.items, nil
	p.rounds++
}

// took notes a call that went through.
func (p *parking) took() {
	if len(p.items) > 0 {
		p.confirmed = true
	}
}

// refusedAgain says whether a call's unsettled rows are all of items being retried while
// Kafka takes others: the partition is still out, which is no reason for the relay to back off.
func (p *parking) refusedAgain(call []*pendingRow) bool {
	if !p.confirmed {
		return false
	}
	for _, row := range call {
		if _, ok := p.retrying[row.ItemID]; !ok && !row.sent {
			return false
		}
	}
	return true
}

// recovered says, once, that the last retry went through.
func (p *parking) recovered() bool {
	if len(p.items) > 0 || p.rounds == 0 {
		return false
	}
	*p = parking{}
	return true
}
