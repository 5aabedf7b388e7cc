package daemon

import (
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/duecollector/duecollector/internal/provider"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// A rate limit the provider answered counts as rate_limited; one the client's own limiter
// refused, unsent, as cancelled: the refusal alert counts the provider's refusals alone.
func TestOnlyTheProvidersRefusalsCountAsRateLimited(t *testing.T) {
	m := telemetry.NewMetrics()
	f := fetchMetrics{m, new(atomic.Int64)}
	f.Called(provider.EndpointAuction, &provider.Error{Class: provider.ClassRateLimited, Status: http.StatusTooManyRequests})
	f.Called(provider.EndpointAuction, &provider.Error{Class: provider.ClassRateLimited}) // no answer: our limiter
	count := func(outcome string) float64 {
		return testutil.ToFloat64(m.ProviderRequests.WithLabelValues(provider.EndpointAuction, outcome))
	}
	if got, cancelled := count("rate_limited"), count("cancelled"); got != 1 || cancelled != 1 {
		t.Fatalf("rate_limited %v, cancelled %v; want 1 each", got, cancelled)
	}
}
