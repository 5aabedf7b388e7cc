package httpserve

import (
	"net/http"
	"testing"
)

// Every limit is set: a zero one is none at all (a slow or never-reading client holds its
// goroutine, its answer and its connection for good).
func TestEveryLimitIsSet(t *testing.T) {
	s := New(http.NotFoundHandler())
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Fatalf("server limits %+v: every one must be set", s)
	}
}
