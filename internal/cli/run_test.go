package cli

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/testkit"
)

// collector run collects what import-items tracked, collector status shows it, and a
// cancelled context (SIGTERM) ends run with exit 0.
func TestRunAndStatus(t *testing.T) {
	db := catalogEnv(t, true)
	if _, _, err := runCollector(t, "import-items", "--database-url", db, "--targets", "../../configs/import-targets.yaml"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut bytes.Buffer
	cmd := newRootCmd(&out, &errOut)
	cmd.SetArgs([]string{"run", "--database-url", db, "--http-addr", "127.0.0.1:0", "--max-sleep", "1s", "--log-format", "console"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx) }()

	conn, err := pgx.Connect(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	stopped := false
	t.Cleanup(func() { // on failure: stop run before the database goes away, then show its log
		if !stopped {
			cancel()
			testkit.Recv(t, done, testkit.Timeout, "run to stop")
			t.Logf("collector run log:\n%s", errOut.String())
		}
	})
	testkit.Eventually(t, 30*time.Second, "collector run to collect every imported item", func() bool {
		var left int
		if err := conn.QueryRow(context.Background(), `SELECT count(*) FROM tracked_items WHERE last_collected_at IS NULL`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		return left == 0
	})

	status, _, err := runCollector(t, "status", "--database-url", db)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("collector status:\n%s", status)
	for _, want := range []string{"provider neople: HEALTHY", "total", "due → claim lag, last 10m0s: p50", "outbox: 12 unpublished",
		"live instances: 1", "budget market:", "history: ", "auction_snapshots ", "raw snapshots kept from "} {
		if !strings.Contains(status, want) {
			t.Errorf("status lacks %q", want)
		}
	}

	cancel()
	stopped = true
	if err := testkit.Recv(t, done, testkit.Timeout, "run to stop"); err != nil {
		t.Fatalf("run after cancellation: %v, want nil (exit 0)", err)
	}
	if strings.Contains(errOut.String(), "sim-market-key") {
		t.Fatal("the market key appears in the log")
	}
}

// `collector run` started before its database is reachable waits for it, with /healthz up and
// /readyz saying why it is not ready, and starts once PostgreSQL answers.
func TestRunWaitsForItsDatabase(t *testing.T) {
	db := catalogEnv(t, true)
	u, err := url.Parse(db)
	if err != nil {
		t.Fatal(err)
	}
	dbAddr := u.Host
	// A port where nothing listens yet; the test opens it later as a proxy to the server.
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Host = free.Addr().String()
	_ = free.Close()
	r := startRun(t, u.String())
	stderr, done, stop, get := &r.stderr, r.done, r.stop, r.get
	testkit.Eventually(t, 30*time.Second, "two logged attempts with /healthz up and /readyz not ready", func() bool {
		hc, _ := get("/healthz")
		rc, body := get("/readyz")
		return strings.Count(stderr.String(), "database not reachable yet") >= 2 && hc == 200 && rc == 503 &&
			strings.Contains(body, "database not ready")
	})

	proxy, err := net.Listen("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = proxy.Close() })
	go func() {
		for {
			c, err := proxy.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				s, err := net.Dial("tcp", dbAddr)
				if err != nil {
					return
				}
				defer s.Close()
				go func() { _, _ = io.Copy(s, c) }()
				_, _ = io.Copy(c, s)
			}()
		}
	}()
	testkit.Eventually(t, 60*time.Second, "the daemon to start and be ready", func() bool {
		rc, _ := get("/readyz")
		return rc == 200
	})
	// The console is served at / beside /metrics, and the read API at /api/v1/.
	for path, want := range map[string]string{"/": "<h1>Overview</h1>", "/items": `<table id="items">`, "/metrics": "collector_",
		"/api/v1/latest": `{"items":[`, "/api/v1/openapi.json": `"openapi": "3.1.0"`} {
		if rc, body := get(path); rc != 200 || !strings.Contains(body, want) {
			t.Errorf("GET %s: %d, want 200 with %q:\n%.300s", path, rc, want, body)
		}
	}
	// The API's answers are counted on the daemon's /metrics.
	if rc, body := get("/metrics"); rc != 200 || !strings.Contains(body, `collector_api_requests_total{code="200",endpoint="latest"}`) {
		t.Errorf("/metrics: %d, no count of /api/v1/latest's answers:\n%.300s", rc, body)
	}
	stop()
	if err := testkit.Recv(t, done, time.Minute, "run to stop"); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// A daemon stopped while it waits for its database exits 0: the stop was asked for, and a
// failure would have systemd (Restart=on-failure) start it again.
func TestRunStoppedWhileWaitingForItsDatabase(t *testing.T) {
	u, err := url.Parse(catalogEnv(t, true))
	if err != nil {
		t.Fatal(err)
	}
	free, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u.Host = free.Addr().String() // nothing listens there
	_ = free.Close()
	r := startRun(t, u.String())
	testkit.Eventually(t, 30*time.Second, "a logged attempt to reach the database", func() bool {
		return strings.Contains(r.stderr.String(), "database not reachable yet")
	})
	r.stop()
	if err := testkit.Recv(t, r.done, time.Minute, "run to stop"); err != nil {
		t.Fatalf("run stopped while waiting for its database: %v, want a clean stop", err)
	}
	if !strings.Contains(r.stderr.String(), "stopped before starting") {
		t.Errorf("no word of the stop:\n%s", r.stderr.String())
	}
}

// A daemon started on a reachable database whose schema is behind says so, rather than that
// the database is not reachable, and starts once the schema is migrated.
func TestRunWaitsForItsMigration(t *testing.T) {
	catalogEnv(t, true)
	db := emptyDB(t)
	r := startRun(t, db)
	defer r.stop()
	stderr, done, stop := &r.stderr, r.done, r.stop
	ctx := context.Background()
	readyz := func() (int, string) { return r.get("/readyz") }
	testkit.Eventually(t, 30*time.Second, "a logged wait for the migration, /readyz naming it", func() bool {
		rc, body := readyz()
		return strings.Contains(stderr.String(), "database schema not current; waiting for `collector migrate up`") &&
			rc == 503 && strings.Contains(body, "migrations are pending")
	})
	if strings.Contains(stderr.String(), "not reachable") {
		t.Errorf("a reachable database was logged as not reachable:\n%s", stderr.String())
	}
	if err := store.Migrate(ctx, db, nil); err != nil {
		t.Fatal(err)
	}
	testkit.Eventually(t, 60*time.Second, "the daemon to start once migrated", func() bool {
		rc, _ := readyz()
		return rc == 200
	})
	stop()
	if err := testkit.Recv(t, done, time.Minute, "run to stop"); err != nil {
		t.Fatalf("run: %v", err)
	}
}

// running is a `collector run` started by startRun.
type running struct {
	stderr lockedBuffer
	done   chan error // run's result
	stop   func()     // cancels run's context (SIGTERM)
	addr   string     // its daemon.http_addr
}

// startRun starts `collector run` on db with a free daemon.http_addr and console logs.
func startRun(t *testing.T, db string) *running {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &running{done: make(chan error, 1), addr: ln.Addr().String()}
	_ = ln.Close()
	ctx, stop := context.WithCancel(context.Background())
	r.stop = stop
	go func() {
		var out bytes.Buffer
		cmd := newRootCmd(&out, &r.stderr)
		cmd.SetArgs([]string{"run", "--database-url", db, "--http-addr", r.addr, "--log-format", "console"})
		r.done <- cmd.ExecuteContext(ctx)
	}()
	return r
}

// get asks the running daemon for path: its status and body (0 and the error when unanswered).
func (r *running) get(path string) (int, string) {
	resp, err := http.Get("http://" + r.addr + path)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// lockedBuffer lets the test read what a running command has printed so far.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// A command's background loop that panics (the console's refresh, the API's /latest copy, the
// replica's lag) is started again; the command, a daemon or a console, lives on.
func TestABackgroundLoopOutlivesItsPanic(t *testing.T) {
	t.Setenv("COLLECTOR_DATABASE_URL", catalogEnv(t, true))
	var out, errOut bytes.Buffer
	_, a := newRoot(&out, &errOut)
	a.bgRestart = time.Millisecond
	starts := make(chan int, 2)
	cmd := &cobra.Command{Use: "loop", RunE: a.run(func(ctx context.Context) error {
		n := 0
		a.background(ctx, "refresh", func(ctx context.Context) {
			n++
			starts <- n
			if n == 1 {
				var rows []int
				_ = rows[1] // a bug some data meets
			}
		})
		testkit.Recv(t, starts, testkit.Timeout, "the loop's first start")
		testkit.Recv(t, starts, testkit.Timeout, "the loop's start after its panic")
		return nil
	})}
	cmd.SetArgs([]string{})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(errOut.String(), "a background job panicked") {
		t.Errorf("the panic was not logged:\n%s", errOut.String())
	}
}

// A command's background loops end before its pools close: what a loop does as it stops still
// finds its pool open, and the command does not return before the loop has ended.
func TestBackgroundLoopsEndBeforeThePoolsClose(t *testing.T) {
	t.Setenv("COLLECTOR_DATABASE_URL", catalogEnv(t, true))
	var out, errOut bytes.Buffer
	_, a := newRoot(&out, &errOut)
	lastPing := make(chan error, 1)
	cmd := &cobra.Command{Use: "loop", RunE: a.run(func(ctx context.Context) error {
		pool, err := a.db(ctx)
		if err != nil {
			return err
		}
		a.background(ctx, "loop", func(ctx context.Context) {
			<-ctx.Done()
			lastPing <- pool.Ping(context.Background())
		})
		return nil
	})}
	cmd.SetArgs([]string{})
	if err := cmd.ExecuteContext(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-lastPing:
		if err != nil {
			t.Fatalf("the loop's last query as it stopped: %v, want the pool still open", err)
		}
	default:
		t.Fatal("the command returned before its background loop ended")
	}
}

// console.enabled and api.enabled false take the console and the read API off the daemon's
// port (what operators turn off where :9090 is reachable by others); /metrics, /healthz and
// /readyz stay.
func TestTheConsoleAndTheAPICanBeTurnedOff(t *testing.T) {
	for _, c := range []struct {
		console, api      string
		wantRoot, wantAPI int
	}{
		{"false", "true", http.StatusNotFound, http.StatusOK},
		{"true", "false", http.StatusOK, http.StatusNotFound},
		{"false", "false", http.StatusNotFound, http.StatusNotFound},
	} {
		t.Run("console="+c.console+",api="+c.api, func(t *testing.T) {
			db := catalogEnv(t, true)
			t.Setenv("COLLECTOR_CONSOLE_ENABLED", c.console)
			t.Setenv("COLLECTOR_API_ENABLED", c.api)
			r := startRun(t, db)
			defer func() {
				r.stop()
				if err := testkit.Recv(t, r.done, time.Minute, "run to stop"); err != nil {
					t.Errorf("run: %v", err)
				}
			}()
			testkit.Eventually(t, 30*time.Second, "the daemon to be ready", func() bool {
				rc, _ := r.get("/readyz")
				return rc == http.StatusOK
			})
			for path, want := range map[string]int{"/": c.wantRoot, "/api/v1/latest": c.wantAPI,
				"/metrics": http.StatusOK, "/healthz": http.StatusOK} {
				if rc, body := r.get(path); rc != want {
					t.Errorf("GET %s: %d, want %d (%.200s)", path, rc, want, body)
				}
			}
		})
	}
}
