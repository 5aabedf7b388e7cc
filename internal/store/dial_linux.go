package store

import (
	"errors"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// boundUnacknowledged sets TCP_USER_TIMEOUT on TCP sockets (a Unix socket has no peer to lose).
func boundUnacknowledged(network, _ string, c syscall.RawConn) error {
	if !strings.HasPrefix(network, "tcp") {
		return nil
	}
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, int(tcpUserTimeout.Milliseconds()))
	})
	return errors.Join(err, serr)
}
