package telemetry

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Aging is a gauge vector of times relative to now, by one label: what was measured moves with
// the clock between measurements, so a scrape reads it moved on by the time since (this
// host's monotonic clock). A job that stops measuring then shows its figure aging, as the
// thing it measures does, instead of the last figure frozen: an alert on it still fires.
type Aging struct {
	desc *prometheus.Desc
	// sign is +1 for an age (grows with time) and -1 for a time left (shrinks).
	sign float64
	now  func() time.Time

	mu   sync.Mutex
	last map[string]aged
}

type aged struct {
	seconds float64
	at      time.Time
}

func newAging(name, help, label string, sign float64) *Aging {
	return &Aging{desc: prometheus.NewDesc(name, help, []string{label}, nil), sign: sign, now: time.Now, last: map[string]aged{}}
}

// Set records the figure measured now for label.
func (a *Aging) Set(label string, d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last[label] = aged{d.Seconds(), a.now()}
}

// Value is the figure a scrape reads now for label, and whether one was ever set.
func (a *Aging) Value(label string) (float64, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	v, ok := a.last[label]
	if !ok {
		return 0, false
	}
	return v.seconds + a.sign*a.now().Sub(v.at).Seconds(), true
}

func (a *Aging) Describe(ch chan<- *prometheus.Desc) { ch <- a.desc }

func (a *Aging) Collect(ch chan<- prometheus.Metric) {
	a.mu.Lock()
	labels := make([]string, 0, len(a.last))
	for l := range a.last {
		labels = append(labels, l)
	}
	a.mu.Unlock()
	for _, l := range labels {
		v, _ := a.Value(l)
		ch <- prometheus.MustNewConstMetric(a.desc, prometheus.GaugeValue, v, l)
	}
}

func (f factory) aging(name, help, label string, sign float64) *Aging {
	a := newAging(name, help, label, sign)
	f.r.MustRegister(a)
	return a
}
