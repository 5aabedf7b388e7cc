package httpserve

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
)

func listen(t *testing.T, addr string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	return ln
}

// Every limit is set: a zero one is none at all (a slow or never-reading client holds its
// goroutine, its answer and its connection for good).
func TestEveryLimitIsSet(t *testing.T) {
	s := New(listen(t, "127.0.0.1:0"), http.NotFoundHandler())
	if s.ReadHeaderTimeout <= 0 || s.ReadTimeout <= 0 || s.WriteTimeout <= 0 || s.IdleTimeout <= 0 || s.MaxHeaderBytes <= 0 {
		t.Fatalf("server limits %+v: every one must be set", s)
	}
}

// A server on loopback answers a page whose site name was pointed at 127.0.0.1 (DNS
// rebinding) with 421 and nothing else, and every local way of addressing it as usual.
func TestALoopbackServerRefusesOtherHostNames(t *testing.T) {
	ln := listen(t, "127.0.0.1:0")
	srv := New(ln, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "secret") }))
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	for host, want := range map[string]int{
		"127.0.0.1:" + port:      http.StatusOK,
		"localhost:" + port:      http.StatusOK,
		"LOCALHOST.:" + port:     http.StatusOK,
		"app.localhost:" + port:  http.StatusOK,
		"[::1]:" + port:          http.StatusOK,
		"127.0.0.1":              http.StatusOK,
		"evil.example:" + port:   http.StatusMisdirectedRequest,
		"10.0.0.5:" + port:       http.StatusMisdirectedRequest,
		"localhost.evil.example": http.StatusMisdirectedRequest,
	} {
		req, _ := http.NewRequest("GET", "http://"+ln.Addr().String()+"/", nil)
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("Host %s: %v", host, err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Host %s: status %d (%q), want %d", host, resp.StatusCode, body, want)
		}
		if want != http.StatusOK && string(body) == "secret" {
			t.Errorf("Host %s: got the answer", host)
		}
	}
}

// A server on every address is reached by whatever name its network gives it.
func TestAServerOnEveryAddressAnswersAnyHost(t *testing.T) {
	s := New(listen(t, ":0"), http.NotFoundHandler())
	rec := httptest.NewRecorder()
	s.Handler.ServeHTTP(rec, httptest.NewRequest("GET", "http://evil.example/", nil))
	if rec.Code == http.StatusMisdirectedRequest {
		t.Fatal("a server on every address got the loopback guard")
	}
}
