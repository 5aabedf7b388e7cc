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

// New is a server for h, to serve on ln, with the limits above. On a loopback address it
// also answers only requests addressed to a loopback name (see loopbackOnly).
func New(ln net.Listener, h http.Handler) *http.Server {
	if isLoopback(ln.Addr()) {
		h = loopbackOnly(h)
	}
	return &http.Server{Handler: h, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout,
		WriteTimeout: WriteTimeout, IdleTimeout: IdleTimeout, MaxHeaderBytes: MaxHeaderBytes}
}

func isLoopback(a net.Addr) bool {
	tcp, ok := a.(*net.TCPAddr)
	return ok && tcp.IP.IsLoopback()
}

// loopbackOnly refuses a request whose Host header is not a loopback name. Listening on
// loopback keeps other machines out, but not a web page: a site whose name its owner points
// at 127.0.0.1 after the page loaded (DNS rebinding) makes the browser send its requests
// here as same-origin ones, Host naming that site, and read the answers. Browsers always
// send the name they resolved, so naming localhost or a loopback address is what tells a
// local client from such a page.
func loopbackOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !loopbackHost(r.Host) {
			http.Error(w, "this server listens on loopback, so it answers only requests addressed to localhost or a loopback address, not "+r.Host+
				" (a reverse proxy must pass its upstream's address as Host, or the server listen on a non-loopback address: see docs/console.md)", http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func loopbackHost(hostPort string) bool {
	host := hostPort
	if h, _, err := net.SplitHostPort(hostPort); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if host == "" { // HTTP/1.0 without Host: not a browser
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		return ip.IsLoopback()
	}
	return host == "localhost" || strings.HasSuffix(host, ".localhost")
}
