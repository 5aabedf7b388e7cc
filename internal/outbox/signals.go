package outbox

import "github.com/duecollector/duecollector/internal/testkit"

// TestSignals tell tests what a relay did, so that they wait instead of sleeping; nil in production.
type TestSignals struct {
	Published    testkit.Signal[[]int64]  // ids marked published by one batch
	PublishError testkit.Signal[error]    // an attempt failed; the relay backs off next
	Idle         testkit.Signal[struct{}] // follow mode found nothing to publish in its lanes
}

// Init turns every signal on for tb.
func (s *TestSignals) Init(tb testkit.TB) {
	s.Published.Init(tb)
	s.PublishError.Init(tb)
	s.Idle.Init(tb)
}
