// Package httpserve builds the HTTP servers the collector listens with (the daemon's API,
// metrics and health; the console), with the limits every one of them needs.
package httpserve

import (
	"net"
	"net/http"
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

// ClientAddr is the client's IP address, an IPv6 one by its /64 (what one subscriber is
// given, so a client cannot step through addresses to dodge a limit). Behind a reverse proxy
// every client shares the proxy's.
func ClientAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	ip := net.ParseIP(host)
	if ip == nil || ip.To4() != nil {
		return host
	}
	return ip.Mask(net.CIDRMask(64, 128)).String() + "/64"
}
