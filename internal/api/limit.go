package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// limiter gives each client a token bucket: rate per second, a burst of twice that. Buckets
// that have refilled hold nothing worth keeping, so a sweep drops them and the map stays the
// size of the clients active in the last few seconds.
type limiter struct {
	rate  rate.Limit
	burst int
	now   func() time.Time

	mu        sync.Mutex
	clients   map[string]*rate.Limiter
	lastSweep time.Time
}

// maxClients bounds the buckets of addresses kept at once.
const maxClients = 100_000

// tokenClient prefixes the key of a client known by its bearer token.
const tokenClient = "token:"

func newLimiter(perSecond float64, now func() time.Time) *limiter {
	if perSecond <= 0 {
		return nil
	}
	return &limiter{rate: rate.Limit(perSecond), burst: max(1, int(math.Ceil(2*perSecond))), now: now,
		clients: map[string]*rate.Limiter{}}
}

// decision is one request's outcome with what the RateLimit headers say.
type decision struct {
	ok        bool
	remaining int
	reset     time.Duration // until the bucket is full again
	retry     time.Duration // until one request is allowed (only when !ok)
}

func (l *limiter) take(client string) decision {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.lastSweep) > l.window() {
		for k, b := range l.clients {
			if b.TokensAt(now) >= float64(l.burst) {
				delete(l.clients, k)
			}
		}
		l.lastSweep = now
	}
	b := l.clients[client]
	if b == nil {
		// Token holders are as many as the configured tokens: they always get buckets of
		// their own, so a flood from many addresses cannot make them share one with it.
		if len(l.clients) >= maxClients && !strings.HasPrefix(client, tokenClient) {
			// More clients at once than any real deployment has: the newcomers share a bucket
			// rather than grow the map without bound.
			client = "overflow"
			if b = l.clients[client]; b == nil {
				b = rate.NewLimiter(l.rate, l.burst)
			}
		} else {
			b = rate.NewLimiter(l.rate, l.burst)
		}
		l.clients[client] = b
	}
	ok := b.AllowN(now, 1)
	tokens := b.TokensAt(now)
	d := decision{ok: ok, remaining: max(0, int(tokens)),
		reset: time.Duration((float64(l.burst) - tokens) / float64(l.rate) * float64(time.Second))}
	if !ok {
		d.retry = time.Duration((1 - tokens) / float64(l.rate) * float64(time.Second))
	}
	return d
}

// window is the time an empty bucket takes to refill: the policy's window.
func (l *limiter) window() time.Duration {
	return time.Duration(float64(l.burst) / float64(l.rate) * float64(time.Second))
}

// headers writes the RateLimit fields of draft-ietf-httpapi-ratelimit-headers: the policy
// (quota q per window w seconds) and the client's remaining quota r and seconds to reset t.
func (l *limiter) headers(h http.Header, d decision) {
	h.Set("RateLimit-Policy", fmt.Sprintf(`"client";q=%d;w=%d`, l.burst, ceilSeconds(l.window())))
	h.Set("RateLimit", fmt.Sprintf(`"client";r=%d;t=%d`, d.remaining, ceilSeconds(d.reset)))
	if !d.ok {
		h.Set("Retry-After", strconv.Itoa(max(1, ceilSeconds(d.retry))))
	}
}

func ceilSeconds(d time.Duration) int {
	return int(math.Ceil(d.Seconds()))
}
