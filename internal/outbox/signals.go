package outbox

import "github.com/duecollector/duecollector/internal/testkit"

// TestSignals lets tests wait for what a relay did instead of sleeping; production code leaves
// RelayConfig.Test nil.
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
