package provider

import (
	"errors"
	"fmt"
	"time"
)

// Class says what a caller should do about a provider error.
type Class int

const (
	// ClassTransient: 5xx, timeouts, connection errors, malformed bodies. Retry later; counts
	// toward DEGRADED.
	ClassTransient Class = iota
	// ClassMaintenance: 503 / DNF980. The provider goes to MAINTENANCE; everyone pauses.
	ClassMaintenance
	// ClassRateLimited: API002 / API008 / 429. Back off this workload (RetryAfter if given).
	ClassRateLimited
	// ClassConfig: API000/003/004/005. The key is missing or refused: stop the workload.
	ClassConfig
	// ClassItem: DNF003 / DNF901 / DNF004. Permanent for this item; other items are fine.
	ClassItem
	// ClassBug: parameters we built that the provider refuses (DNF008) or that cannot be
	// sent at all: fail loudly.
	ClassBug
	// ClassRejected: every row of a 200 failed the checks, not all for impossible amounts
	// (another item's rows, impossible dates). This item failed; other items are fine.
	ClassRejected
	// ClassEndpoint: the answer is not the Neople API at the configured address: a redirect,
	// a 400/404 without a Neople error body, or API900/DNF900 (no such URL); or a gateway code
	// (API…) the documented table lacks. Every call would fail alike, so the pass stops and
	// names provider.base_url (or the unknown code).
	ClassEndpoint
)

func (c Class) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassMaintenance:
		return "maintenance"
	case ClassRateLimited:
		return "rate_limited"
	case ClassConfig:
		return "config"
	case ClassItem:
		return "item_error"
	case ClassBug:
		return "bug"
	case ClassRejected:
		return "rows_rejected"
	case ClassEndpoint:
		return "endpoint"
	}
	return "unknown"
}

// Error is a classified provider failure. Its text never contains an API key.
type Error struct {
	Class      Class
	Workload   Workload
	Endpoint   string // path only, e.g. /df/auction; never a URL with a query
	Status     int    // HTTP status, 0 when no response arrived
	Code       string // Neople code such as DNF980, when the envelope had one
	Message    string
	RetryAfter time.Duration
	Err        error // cause, already redacted
}

func (e *Error) Error() string {
	s := fmt.Sprintf("neople %s %s: %s", e.Workload, e.Endpoint, e.Class)
	if e.Status != 0 {
		s += fmt.Sprintf(" (HTTP %d", e.Status)
		if e.Code != "" {
			s += " " + e.Code
		}
		if e.Message != "" {
			s += " " + e.Message
		}
		s += ")"
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

func (e *Error) Unwrap() error { return e.Err }

// ClassOf returns the class of a provider error; errors that are not *Error, nor say their
// class (Classed), are transient.
func ClassOf(err error) Class {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Class
	}
	var c Classed
	if errors.As(err, &c) {
		return c.ProviderClass()
	}
	return ClassTransient
}

// Classed is an error of the collector's own met on the way to or from the provider that says
// its class (a recovered panic is ClassBug): taken for transient, it would count against the
// provider's health.
type Classed interface {
	error
	ProviderClass() Class
}

// RateLimitAnswer returns err's *Error when the provider itself answered that the key is over
// its limit (a response arrived: Status is set). The client's own limiter, or a budget share
// running out of time, refuses with the same class but no response: that says nothing about
// the key and must neither cool the key down nor be sent again as if the provider had asked.
func RateLimitAnswer(err error) (*Error, bool) {
	var pe *Error
	if errors.As(err, &pe) && pe.Class == ClassRateLimited && pe.Status != 0 {
		return pe, true
	}
	return nil, false
}

// Answered reports an error that came with an answer (a response arrived, from the provider or
// whatever answers at its address), as opposed to a call that was never sent or never answered.
func Answered(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Status != 0
}

// notFoundText is the message of the API001 answer to a name search that found nothing.
const notFoundText = "NOT_FOUND_SEARCH_VALUE"

// rateLimitText is in the message of the key-usage answer (API002), whatever code carries it.
const rateLimitText = "APIKEY_LIMIT"

// IsNotFound reports a per-request "nothing found" answer (API001 NOT_FOUND_SEARCH_VALUE),
// which is not a key error although API001 is officially one.
func IsNotFound(err error) bool {
	var pe *Error
	return errors.As(err, &pe) && pe.Code == "API001" && pe.Class == ClassItem
}
