package storetest

import (
	"net"
	"net/url"
	"sync"
	"testing"
)

// Proxy forwards TCP connections to a server until Freeze; from then on it holds every byte
// either way, and accepts new connections without forwarding anything, as a server that hangs
// (or a network that drops its packets) looks to a client: no error, no answer. Thaw forwards
// again, what was held first.
type Proxy struct {
	// URL is the server's URL with its host and port replaced by the proxy's.
	URL string
	// Held receives the number (counted from 1 in the order accepted) of each connection whose
	// client sent bytes while frozen: a test waits on it to know that reads are stuck.
	Held chan int

	ln      net.Listener
	target  string
	done    chan struct{}
	mu      sync.Mutex
	thawed  chan struct{} // non-nil while frozen; closed by Thaw
	conns   []net.Conn
	closed  bool
	wg      sync.WaitGroup
	accepts int
}

// NewProxy starts a proxy on a loopback port in front of the server of dbURL (a postgres://
// URL) and stops it at cleanup.
func NewProxy(tb testing.TB, dbURL string) *Proxy {
	tb.Helper()
	u, err := url.Parse(dbURL)
	if err != nil {
		tb.Fatalf("storetest: proxy: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{Held: make(chan int, 1024), ln: ln, target: u.Host, done: make(chan struct{})}
	u.Host = ln.Addr().String()
	p.URL = u.String()
	p.wg.Add(1)
	go p.accept()
	tb.Cleanup(p.Close)
	return p
}

// Freeze stops forwarding: bytes sent either way from now on are held.
func (p *Proxy) Freeze() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thawed == nil {
		p.thawed = make(chan struct{})
	}
}

// Thaw forwards again, what was held first.
func (p *Proxy) Thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.thawed != nil {
		close(p.thawed)
		p.thawed = nil
	}
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		p.accepts++
		n := p.accepts
		p.mu.Unlock()
		if !p.track(c) {
			return
		}
		p.wg.Add(1)
		go p.serve(c, n)
	}
}

func (p *Proxy) serve(c net.Conn, n int) {
	defer p.wg.Done()
	s, err := net.Dial("tcp", p.target)
	if err != nil || !p.track(s) {
		_ = c.Close()
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.pipe(s, c, 0)
	}()
	p.pipe(c, s, n)
}

// track keeps c for close to close; false (c closed) when the proxy has closed already.
func (p *Proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		_ = c.Close()
		return false
	}
	p.conns = append(p.conns, c)
	return true
}

// pipe copies src to dst, holding each read while frozen; n numbers a client's connection
// for Held (0: the server's side).
func (p *Proxy) pipe(src, dst net.Conn, n int) {
	defer func() { _ = src.Close(); _ = dst.Close() }()
	buf := make([]byte, 32<<10)
	for {
		k, err := src.Read(buf)
		if k > 0 {
			if !p.wait(n) {
				return
			}
			if _, werr := dst.Write(buf[:k]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// wait returns once the proxy is not frozen; false when it closed first.
func (p *Proxy) wait(n int) bool {
	p.mu.Lock()
	thawed := p.thawed
	p.mu.Unlock()
	if thawed == nil {
		return true
	}
	if n > 0 {
		select {
		case p.Held <- n:
		default:
		}
	}
	select {
	case <-thawed:
		return true
	case <-p.done:
		return false
	}
}

// Close stops the proxy and closes its connections; NewProxy's cleanup does too. Register it
// as a cleanup after a pool's Close: a read stuck on the frozen proxy then fails, instead of
// the pool waiting for it for good.
func (p *Proxy) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	_ = p.ln.Close()
	p.mu.Lock()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
