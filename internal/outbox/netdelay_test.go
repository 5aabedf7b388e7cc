package outbox

import (
	"context"
	"net"
	"time"
)

// delayedDial dials like net.Dialer and makes every byte the broker sends arrive rtt after it
// was sent: a broker at network distance rtt (a produce call waits one rtt more for its
// acknowledgement), without limiting throughput. The benchmarks use it to compare the relay
// and the raw writer against a broker that is not in the same process. Reads ignore
// deadlines: it is for benchmarks against a broker that answers, not for fault tests.
func delayedDial(rtt time.Duration) func(ctx context.Context, network, address string) (net.Conn, error) {
	return func(ctx context.Context, network, address string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, address)
		if err != nil {
			return nil, err
		}
		d := &delayedConn{Conn: c, rtt: rtt, in: make(chan delayedChunk, 4096)}
		go d.pump()
		return d, nil
	}
}

type delayedChunk struct {
	data []byte
	at   time.Time
	err  error
}

type delayedConn struct {
	net.Conn
	rtt  time.Duration
	in   chan delayedChunk
	cur  delayedChunk
	done bool
}

// pump reads what arrives and stamps it with when the reader may see it.
func (d *delayedConn) pump() {
	for {
		buf := make([]byte, 64<<10)
		n, err := d.Conn.Read(buf)
		if n > 0 {
			d.in <- delayedChunk{data: buf[:n], at: time.Now().Add(d.rtt)}
		}
		if err != nil {
			d.in <- delayedChunk{err: err}
			close(d.in)
			return
		}
	}
}

func (d *delayedConn) Read(b []byte) (int, error) {
	if len(d.cur.data) == 0 {
		if d.done {
			return 0, net.ErrClosed
		}
		c, ok := <-d.in
		if !ok {
			d.done = true
			return 0, net.ErrClosed
		}
		if c.err != nil {
			d.done = true
			return 0, c.err
		}
		if wait := time.Until(c.at); wait > 0 {
			time.Sleep(wait)
		}
		d.cur = c
	}
	n := copy(b, d.cur.data)
	d.cur.data = d.cur.data[n:]
	return n, nil
}
