package outbox

import (
	"encoding/json"
	"time"
)

// parking is the items whose events Kafka refused while it showed itself reachable: it
// answered for them with an error code (no leader, too few in-sync replicas: a partition out of
// service), or took other messages of the same call. Their rows stay pending, and the relay's
// reads and calls leave out every row of theirs until the retry, so that one partition holds
// back its own items only (its rows used to fill the head of every read and stop the relay)
// and none of their events overtakes an earlier unacknowledged one. A following relay retries
// them after a back-off; a pass (RunOnce) once nothing else is left, each retry an attempt.
//
// A call that fails without a word from Kafka (a connection refused or timed out) and takes
// nothing parks nothing: Kafka may be out whole, so the step stalls, the loop backs off and,
// after a lease of failures, hands the lanes back, as before.
type parking struct {
	items     map[string]struct{}
	until     time.Time // when a following relay retries them
	rounds    int       // retries so far: the back-off's step, and a pass's attempts
	err       error     // the last refusal
	retryNext bool      // a pass retries them at its next turn
}

// park adds the items of the call's rows that were not settled.
func (p *parking) park(call []*pendingRow, err error, delay func(attempt int) time.Duration) {
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

// skip is what readPending leaves out: a JSON object of the parked items, sent as text so that
// it encodes in every query mode (the simple protocol knows no parameter types).
func (p *parking) skip() string {
	if len(p.items) == 0 {
		return "{}"
	}
	b, err := json.Marshal(p.items)
	if err != nil {
		panic("outbox: item ids that JSON cannot encode: " + err.Error()) // strings always encode
	}
	return string(b)
}

// due says whether a following relay retries the parked items now.
func (p *parking) due(now time.Time) bool { return len(p.items) > 0 && !now.Before(p.until) }

// unpark lets the items' rows be read again, from the oldest.
func (p *parking) unpark() {
	p.items, p.retryNext = nil, false
	p.rounds++
}

// recovered says, once, that the last retry went through.
func (p *parking) recovered() bool {
	if len(p.items) > 0 || p.rounds == 0 {
		return false
	}
	*p = parking{}
	return true
}
