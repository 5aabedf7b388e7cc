package store_test

import (
	"context"
	"net"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/store/storetest"
)

// A connection whose server is lost without a reset must not wait on its socket for the
// kernel's ~15 minutes of retransmissions, or for good when idle: every connection the
// package opens, pooled or single, carries keepalive and TCP_USER_TIMEOUT bounds. (A userspace
// proxy cannot lose a peer the way a dead host does, its kernel answers the probes, so the
// test reads the bounds off the sockets.)
func TestEveryConnectionIsBoundedAtTheSocket(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, url := storetest.NewPool(t)
	pool, err := store.Open(ctx, store.PoolConfig{URL: url, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	c, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	checkSocket(t, "pooled", c.Conn().PgConn().Conn())
	c.Release()

	conn, err := store.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	checkSocket(t, "single (migrations)", conn.PgConn().Conn())
}

func checkSocket(t *testing.T, what string, c net.Conn) {
	t.Helper()
	sc, ok := c.(syscall.Conn)
	if !ok {
		t.Fatalf("%s: %T is not a socket", what, c)
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 10},
		{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 5},
		{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, 3},
		{"TCP_USER_TIMEOUT", unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, 30000},
	} {
		var got int
		var gerr error
		if err := raw.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), o.level, o.opt) }); err != nil || gerr != nil {
			t.Fatalf("%s: read %s: %v %v", what, o.name, err, gerr)
		}
		if got != o.want {
			t.Errorf("%s connection: %s = %d, want %d", what, o.name, got, o.want)
		}
	}
}
