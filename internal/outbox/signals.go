package outbox

// TestSignals lets tests wait for what a relay did instead of sleeping. Production code leaves
// RelayConfig.Test nil; sends never block, and a full buffer drops the signal.
type TestSignals struct {
	Published    Signal[[]int64]  // ids marked published by one batch, after the broker acknowledged them
	PublishError Signal[error]    // an attempt failed; the relay backs off next
	Idle         Signal[struct{}] // follow mode found nothing to publish in its lanes
}

// Init makes every signal ready to receive.
func (s *TestSignals) Init() {
	s.Published.init()
	s.PublishError.init()
	s.Idle.init()
}

// Signal is one kind of event; receive from C.
type Signal[T any] struct{ ch chan T }

func (s *Signal[T]) init() { s.ch = make(chan T, 4096) }

// C is the channel signals arrive on (nil before Init).
func (s *Signal[T]) C() <-chan T { return s.ch }

func (s *Signal[T]) send(v T) {
	if s.ch == nil {
		return
	}
	select {
	case s.ch <- v:
	default:
	}
}

func (s *TestSignals) published(ids []int64) {
	if s != nil && len(ids) > 0 {
		s.Published.send(ids)
	}
}

func (s *TestSignals) publishError(err error) {
	if s != nil {
		s.PublishError.send(err)
	}
}

func (s *TestSignals) idle() {
	if s != nil {
		s.Idle.send(struct{}{})
	}
}
