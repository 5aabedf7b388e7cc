// Package httpserve builds the HTTP servers the collector listens with (the daemon's API,
// metrics and health; the console), with the limits every one of them needs.
package httpserve

import (
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
