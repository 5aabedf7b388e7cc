// Package httpserve builds the HTTP servers the collector listens with (the daemon's API,
// metrics and health; the console), with the limits every one of them needs.
package httpserve

import (
	"net"
	"net/http"
	"strings"
	"time"
)

// The limits: every answer is a bounded read of the database or of kept bytes, and no
// endpoint streams. Without them a client that sends slowly or never reads its answer held
// its goroutine, its answer (megabytes for a long /timeseries) and its connection for good,
// and idle keep-alive connections piled up.
const (
	ReadHeaderTimeout = 10 * time.Second
	ReadTimeout       = 30 * time.Second
	WriteTimeout      = time.Minute
	IdleTimeout       = 2 * time.Minute
	MaxHeaderBytes    = 64 << 10
)

// New is a server for h with the limits above.
func New(h http.Handler) *http.Server {
	return &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes}
}

// LoopbackNames refuses a request whose Host is not a loopback name (421), for a listener on
// a loopback address: a page on another site whose DNS name is re-pointed at 127.0.0.1 (DNS
// rebinding) is otherwise the same origin as the server to the browser, and reads it.
func LoopbackNames(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if name, _, err := net.SplitHostPort(host); err == nil {
			host = name
		}
		host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
		if ip := net.ParseIP(host); !strings.EqualFold(host, "localhost") && (ip == nil || !ip.IsLoopback()) {
			http.Error(w, "this server answers only to a loopback name (localhost, 127.0.0.1, [::1])", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// IsLoopback tells whether a listener's address is a loopback one.
func IsLoopback(addr net.Addr) bool {
	tcp, ok := addr.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}
