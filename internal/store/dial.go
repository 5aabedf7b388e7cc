package store

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/config"
)

// Every connection to PostgreSQL is bounded at the socket: a server lost without a reset (its
// host gone, a cut network, a failed-over address whose old node is silent) otherwise leaves a
// statement waiting for its answer for as long as the kernel retransmits (~15 min) or, on an
// idle socket, for good, while new connections reach the new primary and every health check
// passes. Keepalive probes find a silent peer of an idle socket in Idle + Count×Interval (25 s);
// TCP_USER_TIMEOUT (Linux) ends a socket whose sent data stays unacknowledged for 30 s. A live
// server answers probes from its kernel, so a long statement or a long wait on a lock is
// never cut by them.
const (
	keepAliveIdle     = 10 * time.Second
	keepAliveInterval = 5 * time.Second
	keepAliveCount    = 3
	tcpUserTimeout    = 30 * time.Second
)

// dial is the DialFunc of every connection this package opens.
func dial(ctx context.Context, network, addr string) (net.Conn, error) {
	d := net.Dialer{
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount},
		Control:         boundUnacknowledged,
	}
	return d.DialContext(ctx, network, addr)
}

// parseConn is pgx.ParseConfig with this package's dialer.
func parseConn(url string) (*pgx.ConnConfig, error) {
	cc, err := pgx.ParseConfig(url)
	if err != nil {
		return nil, parseError(err)
	}
	cc.DialFunc = dial
	return cc, nil
}

// parseError is pgx's parse error without the connection string it quotes (config.ParseReason):
// the error reaches logs and /readyz.
func parseError(err error) error {
	return errors.New("cannot parse the connection string: " + config.ParseReason(err))
}

// connect is pgx.Connect with this package's dialer: every single connection outside a pool
// (migrations, LISTEN) goes through it.
func connect(ctx context.Context, url string) (*pgx.Conn, error) {
	cc, err := parseConn(url)
	if err != nil {
		return nil, err
	}
	return pgx.ConnectConfig(ctx, cc)
}
