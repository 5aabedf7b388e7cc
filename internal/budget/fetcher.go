package budget

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/duecollector/duecollector/internal/provider"
)

// Observer hears each call a Fetcher makes (metrics).
type Observer interface {
	// Waited: d spent waiting for the share; err is why no request may go out (nil: granted).
	Waited(endpoint string, d time.Duration, err error)
	// Called: the request's outcome (nil: ok).
	Called(endpoint string, err error)
}

// Fetcher puts this process's share of the key in front of every call — the one rule the
// daemon and the one-shots (collect-due, collect) share: wait for the share, and when the
// provider itself answers that the key is over its budget, cool every instance down. Its
// methods are those dispatcher.Fetcher asks for.
type Fetcher struct {
	Next  *provider.Client
	Share *Share // nil: no cluster budget (daemon.budget.enabled false); calls go straight through
	// Within bounds how long a cool-down may hold a call: a longer one ends it as a rate limit,
	// so a one-shot hands its claims back before their leases end. 0 waits it out (the daemon).
	Within   time.Duration
	Observer Observer // nil: nobody listens
}

// AuctionLimit, SoldLimit and PackLimit are the wrapped client's.
func (f *Fetcher) AuctionLimit() int { return f.Next.AuctionLimit() }

// SoldLimit: see AuctionLimit.
func (f *Fetcher) SoldLimit() int { return f.Next.SoldLimit() }

// PackLimit: see AuctionLimit.
func (f *Fetcher) PackLimit() int { return f.Next.PackLimit() }

func (f *Fetcher) Auction(ctx context.Context, itemID string) (provider.Answer[provider.Listing], error) {
	return call(ctx, f, provider.EndpointAuction, func(ctx context.Context) (provider.Answer[provider.Listing], error) {
		return f.Next.Auction(ctx, itemID)
	})
}

func (f *Fetcher) AuctionSold(ctx context.Context, itemID string) (provider.Answer[provider.Sale], error) {
	return call(ctx, f, provider.EndpointAuctionSold, func(ctx context.Context) (provider.Answer[provider.Sale], error) {
		return f.Next.AuctionSold(ctx, itemID)
	})
}

func (f *Fetcher) AuctionMany(ctx context.Context, ids []string) (provider.Answer[provider.Listing], error) {
	return call(ctx, f, provider.EndpointAuction, func(ctx context.Context) (provider.Answer[provider.Listing], error) {
		return f.Next.AuctionMany(ctx, ids)
	})
}

func (f *Fetcher) AuctionSoldMany(ctx context.Context, ids []string) (provider.Answer[provider.Sale], error) {
	return call(ctx, f, provider.EndpointAuctionSold, func(ctx context.Context) (provider.Answer[provider.Sale], error) {
		return f.Next.AuctionSoldMany(ctx, ids)
	})
}

// call makes one provider call within this process's share.
func call[T any](ctx context.Context, f *Fetcher, endpoint string, fn func(context.Context) (provider.Answer[T], error)) (provider.Answer[T], error) {
	if f.Share != nil {
		t0 := time.Now()
		done, err := f.Share.WaitWithin(ctx, f.Within)
		err = waitError(endpoint, f.Within, err)
		if f.Observer != nil {
			f.Observer.Waited(endpoint, time.Since(t0), err)
		}
		if err != nil {
			return provider.Answer[T]{}, err
		}
		defer done()
	}
	a, err := fn(ctx)
	if pe, ok := provider.RateLimitAnswer(err); ok && f.Share != nil {
		f.Share.RateLimited(ctx, pe.RetryAfter, pe.Error())
	}
	if f.Observer != nil {
		f.Observer.Called(endpoint, err)
	}
	return a, err
}

// waitError is the provider error a failed wait for the share becomes.
func waitError(endpoint string, within time.Duration, err error) error {
	if err == nil {
		return nil
	}
	var ce *CooldownError
	if errors.As(err, &ce) {
		// Ends the pass like a rate-limit answer: unfetched claims are handed back at once.
		return &provider.Error{Class: provider.ClassRateLimited, Workload: provider.WorkloadMarket, Endpoint: endpoint,
			RetryAfter: ce.In, Err: fmt.Errorf("%w, past this run's leases (collect.lease %s)", ce, within)}
	}
	return &provider.Error{Class: provider.ClassTransient, Workload: provider.WorkloadMarket, Endpoint: endpoint,
		Err: fmt.Errorf("waiting for the cluster budget: %w", err)}
}
