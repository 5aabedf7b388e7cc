package cli

import (
	"context"
	"encoding/binary"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/duecollector/duecollector/internal/testkit"
)

// cancelRequestCode opens a CancelRequest message (PostgreSQL's frontend/backend protocol).
const cancelRequestCode = 80877102

// countingProxy forwards TCP connections to PostgreSQL and keeps the largest number it held
// open at once: a process's footprint on the server, counted from the outside.
type countingProxy struct {
	addr      string
	open, max atomic.Int32
}

func newCountingProxy(t *testing.T, upstream string) *countingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &countingProxy{addr: ln.Addr().String()}
	var conns sync.WaitGroup
	t.Cleanup(func() { _ = ln.Close(); conns.Wait() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer conns.Done()
				defer c.Close()
				// A session starts with its startup (or SSL) request; pgx cuts a statement by
				// sending a CancelRequest on a connection of its own, which the server answers
				// and closes without starting a session: not counted.
				var first [8]byte
				if _, err := io.ReadFull(c, first[:]); err != nil {
					return
				}
				if binary.BigEndian.Uint32(first[4:]) != cancelRequestCode {
					n := p.open.Add(1)
					defer p.open.Add(-1)
					for m := p.max.Load(); n > m && !p.max.CompareAndSwap(m, n); m = p.max.Load() {
					}
				}
				s, err := net.Dial("tcp", upstream)
				if err != nil {
					return
				}
				defer s.Close()
				if _, err := s.Write(first[:]); err != nil {
					return
				}
				ended := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(s, c); ended <- struct{}{} }()
				go func() { _, _ = io.Copy(c, s); ended <- struct{}{} }()
				<-ended // either side gone: the session is over
			}()
		}
	}()
	return p
}

// through is db's URL reaching the server through p.
func (p *countingProxy) through(t *testing.T, db string) string {
	t.Helper()
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = p.addr
	return u.String()
}

// A daemon with everything on (collection, LISTEN wake-ups, the relay following the outbox, the
// console and the read API polled hard) holds at most what docs/operations.md promises:
// database.max_conns in its pool, one writability probe of its own, and its two LISTEN
// sessions, on database.url; with database.direct_url set, the LISTEN sessions and a partition
// DDL pool of at most two move there.
func TestRunStaysWithinItsConnectionFootprint(t *testing.T) {
	const maxConns = 2
	db := catalogEnv(t, true)
	if _, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", "../../configs/import-targets.yaml"); err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	broker := newBroker(t, "market.auction-snapshots.v1", 12, nil)
	check, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = check.Close(context.Background()) })
	t.Setenv("COLLECTOR_DATABASE_MAX_CONNS", "2")
	t.Setenv("COLLECTOR_KAFKA_BROKERS", broker)
	t.Setenv("COLLECTOR_CONSOLE_ENABLED", "true")
	t.Setenv("COLLECTOR_API_ENABLED", "true")

	for _, tc := range []struct {
		name           string
		direct         bool
		main, directTo int32 // the most each server may see at once
	}{
		{"one url", false, maxConns + 3, 0},
		{"direct_url set", true, maxConns + 1, 2 + 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			main, direct := newCountingProxy(t, u.Host), newCountingProxy(t, u.Host)
			t.Setenv("COLLECTOR_DATABASE_DIRECT_URL", "")
			if tc.direct {
				t.Setenv("COLLECTOR_DATABASE_DIRECT_URL", direct.through(t, db))
			}
			// Every item due again: this run has work from its start.
			var start time.Time
			if err := check.QueryRow(context.Background(), `UPDATE tracked_items SET next_collect_at = now() RETURNING now()`).Scan(&start); err != nil {
				t.Fatal(err)
			}
			r := startRun(t, main.through(t, db))
			stopped := false
			t.Cleanup(func() { // on failure: stop run before the database goes away, then show its log
				if !stopped {
					r.stop()
					testkit.Recv(t, r.done, testkit.Timeout, "run to stop")
					t.Logf("collector run log:\n%s", r.stderr.String())
				}
			})
			polled := pollHard(t, r, "/api/v1/latest", "/", "/metrics", "/readyz")
			testkit.Eventually(t, 60*time.Second, "every item collected again and its events published", func() bool {
				var left int
				if err := check.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM tracked_items
					WHERE last_collected_at IS NULL OR last_collected_at < $1) + (SELECT count(*) FROM outbox_pending)`, start).Scan(&left); err != nil {
					t.Fatal(err)
				}
				select {
				case err := <-r.done:
					stopped = true
					t.Fatalf("run ended: %v\n%s", err, r.stderr.String())
				default:
				}
				return left == 0
			})
			polled()
			r.stop()
			stopped = true
			if err := testkit.Recv(t, r.done, testkit.Timeout, "run to stop"); err != nil {
				t.Fatalf("run: %v\n%s", err, r.stderr.String())
			}
			if m := main.max.Load(); m > tc.main || m < 1 {
				t.Errorf("database.url held %d connections at once, want 1 to %d (database.max_conns %d)", m, tc.main, maxConns)
			}
			if m := direct.max.Load(); m > tc.directTo {
				t.Errorf("database.direct_url held %d connections at once, want at most %d", m, tc.directTo)
			}
			if tc.direct && direct.max.Load() == 0 {
				t.Error("nothing reached database.direct_url: the LISTEN sessions should")
			}
			t.Logf("most connections at once: %d on database.url, %d on database.direct_url", main.max.Load(), direct.max.Load())
		})
	}
}

// pollHard asks the running daemon for paths from four clients at once until the returned
// function is called (which waits for them).
func pollHard(t *testing.T, r *running, paths ...string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Go(func() {
			for n := i; ctx.Err() == nil; n++ {
				req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.addr+paths[n%len(paths)], nil)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					select { // not listening yet, or stopping
					case <-ctx.Done():
					case <-time.After(10 * time.Millisecond):
					}
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
			}
		})
	}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			cancel()
			wg.Wait()
		}
	})
	return func() { stopped = true; cancel(); wg.Wait() }
}
