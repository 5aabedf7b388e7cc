package httpserve

import (
	"net/http"
	"net/http/httptest"
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

// On a loopback listener only loopback names are answered: a rebinding page's own name is not.
func TestLoopbackNamesRefusesOtherHosts(t *testing.T) {
	h := LoopbackNames(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	for host, want := range map[string]int{
		"127.0.0.1:8080": 200, "localhost:8080": 200, "LOCALHOST": 200, "[::1]:8080": 200, "127.0.0.2": 200,
		"evil.example:8080": 421, "evil.example": 421, "10.0.0.1:8080": 421, "": 421,
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Host = host
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != want {
			t.Errorf("Host %q: %d, want %d", host, w.Code, want)
		}
	}
}
