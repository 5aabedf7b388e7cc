package outbox

import "github.com/duecollector/duecollector/internal/testsignal"

// TestSignals tell tests what a relay did, so that they wait instead of sleeping; nil in production.
type TestSignals struct {
	Published    testsignal.Signal[[]int64]  // ids marked published by one batch
	PublishError testsignal.Signal[error]    // an attempt failed; the relay backs off next
	Idle         testsignal.Signal[struct{}] // follow mode found nothing to publish in its lanes
	HandedBack   testsignal.Signal[[]int16]  // follow mode failed for a lease and released these lanes
}

// Init turns every signal on for tb.
func (s *TestSignals) Init(tb testsignal.TB) {
	s.Published.Init(tb)
	s.PublishError.Init(tb)
	s.Idle.Init(tb)
	s.HandedBack.Init(tb)
}
