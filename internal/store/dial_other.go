//go:build !linux

package store

import "syscall"

// boundUnacknowledged: TCP_USER_TIMEOUT is Linux's; elsewhere keepalive alone bounds an idle
// socket.
func boundUnacknowledged(string, string, syscall.RawConn) error { return nil }
