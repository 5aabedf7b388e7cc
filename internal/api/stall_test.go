package api

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/duecollector/duecollector/internal/testkit"
)

// smallBuffers accepts connections with small socket buffers, so that an answer of a few
// megabytes cannot sit in the kernel for a client that never reads.
type smallBuffers struct{ net.Listener }

func (l smallBuffers) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetWriteBuffer(16 << 10)
	}
	return c, err
}

// A client that asks for a large answer and never reads is let go once a write has waited
// stallLimit, not after the whole answer's writeTime (minutes for /latest): until then it
// held its connection, its goroutine and the copy it was sent.
func TestAnAnswerNobodyReadsIsLetGo(t *testing.T) {
	defer func(d time.Duration) { stallLimit = d }(stallLimit)
	stallLimit = 200 * time.Millisecond
	b := &body{raw: bytes.Repeat([]byte("x"), 16<<20), etag: `W/"big"`}
	served := make(chan struct{})
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(served)
		serve(w, r, b)
	}))
	srv.Listener = smallBuffers{srv.Listener}
	srv.Start()
	t.Cleanup(srv.Close)

	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.(*net.TCPConn).SetReadBuffer(4 << 10)
	if _, err := conn.Write([]byte("GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	// Never read. writeTime of 16 MB is over four minutes.
	testkit.Recv(t, served, 30*time.Second, "the server to give up on a client that reads nothing")
}
