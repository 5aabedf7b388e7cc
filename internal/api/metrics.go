package api

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are what an operator watches of the API: who is answered what (a rising share of 429s
// or 503s, or of 304s that make polling cheap) and what /latest's refreshes cost the database.
type metrics struct {
	requests *prometheus.CounterVec   // endpoint, code
	seconds  *prometheus.HistogramVec // endpoint
	refresh  prometheus.Histogram     // one read of every item's market
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "collector_api_requests_total",
			Help: "Read API answers by endpoint (latest, timeseries, items, openapi, other) and status code."}, []string{"endpoint", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "collector_api_request_seconds",
			Help:    "Read API answer time by endpoint, from the request to the last byte written.",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}}, []string{"endpoint"}),
		refresh: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "collector_api_latest_refresh_seconds",
			Help:    "One read of every tracked item's market for /latest (at most every half second while polled).",
			Buckets: []float64{.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10}}),
	}
}

// Collectors are the API's metrics, for the daemon's /metrics.
func (a *API) Collectors() []prometheus.Collector {
	return []prometheus.Collector{a.metrics.requests, a.metrics.seconds, a.metrics.refresh}
}

// endpointOf names a path by its endpoint, a label of few values whatever the path holds.
func endpointOf(path string) string {
	switch {
	case path == Prefix+"latest":
		return "latest"
	case path == Prefix+"items":
		return "items"
	case path == Prefix+"openapi.json":
		return "openapi"
	case len(path) > len(Prefix+"items/") && path[:len(Prefix+"items/")] == Prefix+"items/":
		return "timeseries"
	}
	return "other"
}

// observed counts every answer, the refused ones too.
func (a *API) observed(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		next.ServeHTTP(sw, r)
		ep := endpointOf(r.URL.Path)
		a.metrics.requests.WithLabelValues(ep, strconv.Itoa(sw.code)).Inc()
		a.metrics.seconds.WithLabelValues(ep).Observe(time.Since(start).Seconds())
	})
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

// Unwrap lets http.ResponseController reach the connection: serve sets a large answer's
// write deadline through it.
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) WriteHeader(code int) {
	s.code = code
	s.ResponseWriter.WriteHeader(code)
}
