package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/config"
)

// harness owns everything a run creates: the log directory, the databases, the processes.
type harness struct {
	o      options
	dir    string
	bin    string // the shipped collector, the binary under test
	simBin string // collector-dev, for `sim` alone: the shipped binary does not link the simulator
	prefix string // database name prefix, dc_faults_<random>
	tpl    string // migrated template database
	admin  *pgx.Conn

	// sentinel is in both API keys, for the whole run; scenario 7 looks for it everywhere.
	sentinel           string
	marketKey, itemKey string
	sim                *simClient
	simURL             string
	catalog            []catalogItem
	outboxDB           *database // scenario 2's database, reused by scenario 3
	failed             bool
	mu                 sync.Mutex
	procs              []*proc
	dbs                []*database
	simProc            *proc
	extraCleanup       []func()
	afterDrop          []func() // cleanups that need the databases dropped first (tablespaces)
}

func newHarness(ctx context.Context, o options) (*harness, error) {
	dir, err := os.MkdirTemp("", "dc-faults-")
	if err != nil {
		return nil, err
	}
	rnd := randHex(6)
	h := &harness{o: o, dir: dir, prefix: "dc_faults_" + rnd, sentinel: "SENTINEL-" + strings.ToUpper(randHex(8))}
	h.marketKey, h.itemKey = h.sentinel+"-market", h.sentinel+"-item"

	if h.bin, err = h.build(ctx, o.bin, "collector"); err != nil {
		return h, err
	}
	if h.simBin, err = h.build(ctx, o.simBin, "collector-dev"); err != nil {
		return h, err
	}

	if h.admin, err = pgx.Connect(ctx, o.adminURL); err != nil {
		return h, fmt.Errorf("connect to the admin database %s: %w", config.RedactURL(o.adminURL), err)
	}
	// One migrated template, cloned per scenario: each scenario starts from an empty schema
	// and `collector migrate up` (the real binary) runs once.
	h.tpl = h.prefix + "_tpl"
	if _, err := h.admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{h.tpl}.Sanitize()); err != nil {
		return h, fmt.Errorf("create database %s: %w", h.tpl, err)
	}
	h.dbs = append(h.dbs, &database{name: h.tpl})
	mig, err := h.start(ctx, "migrate", h.env(h.dbURL(h.tpl)), "migrate", "up")
	if err != nil {
		return h, err
	}
	if code, err := mig.wait(ctx, time.Minute); err != nil || code != 0 {
		return h, fmt.Errorf("collector migrate up: exit %d %v: %s", code, err, mig.tail())
	}

	if err := h.startSim(ctx); err != nil {
		return h, err
	}
	return h, nil
}

// build returns bin when given, else builds ./cmd/<name> into the run's directory.
func (h *harness) build(ctx context.Context, bin, name string) (string, error) {
	if bin != "" {
		return bin, nil
	}
	bin = filepath.Join(h.dir, name)
	h.logf("building ./cmd/%s", name)
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/"+name).CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build -o %s ./cmd/%s (run from the repository root): %w\n%s", bin, name, err, out)
	}
	return bin, nil
}

func (h *harness) logf(format string, args ...any) {
	if h.o.verbose {
		fmt.Printf("    [%s] %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
	}
}

// startSim runs `collector-dev sim` with the sentinel keys (from the environment, so they are not
// in its argv) on a port it picks, and reads the address from its log.
func (h *harness) startSim(ctx context.Context) error {
	p, err := h.startBin(ctx, h.simBin, "sim", h.env(""), "sim", "--addr", "127.0.0.1:0", "--items", "2000")
	if err != nil {
		return err
	}
	h.simProc = p
	h.mu.Lock()
	h.procs = h.procs[:len(h.procs)-1] // the simulator outlives scenarios; killAll leaves it
	h.mu.Unlock()
	base, err := p.waitLog(ctx, 30*time.Second, regexp.MustCompile(`"base_url":"(http://[^"]+)"`))
	if err != nil {
		return fmt.Errorf("simulator did not come up: %w: %s", err, p.tail())
	}
	h.simURL = base
	h.sim = &simClient{base: base}
	if h.catalog, err = h.sim.catalog(ctx); err != nil {
		return fmt.Errorf("read simulator catalog: %w", err)
	}
	if len(h.catalog) < 2000 {
		return fmt.Errorf("simulator catalog has %d items, want 2000", len(h.catalog))
	}
	return nil
}

// env is the environment of a collector process: the parent's, minus anything that could
// point it elsewhere, plus the run's database, simulator, keys and JSON logs.
func (h *harness) env(dbURL string, extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "COLLECTOR_") || strings.HasPrefix(kv, "NEOPLE_") || strings.HasPrefix(kv, "DATABASE_URL=") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env,
		"COLLECTOR_LOG_FORMAT=json",
		// The scenarios count collections by their snapshots: one per collection.
		"COLLECTOR_HISTORY_MODE=every",
		"NEOPLE_MARKET_API_KEY="+h.marketKey,
		"NEOPLE_ITEM_API_KEY="+h.itemKey,
	)
	if dbURL != "" {
		env = append(env, "COLLECTOR_DATABASE_URL="+dbURL)
	}
	if h.simURL != "" {
		env = append(env, "NEOPLE_API_BASE_URL="+h.simURL)
	}
	return append(env, extra...) // later entries win in os/exec
}

func (h *harness) dbURL(name string) string {
	u, err := url.Parse(h.o.adminURL)
	if err != nil {
		panic(err) // checked by pgx.Connect already
	}
	u.Path = "/" + name
	return u.String()
}

// database is one scenario's database.
type database struct {
	name, url string
	pool      *pgxpool.Pool
}

// newDB clones the migrated template; options (a TABLESPACE clause) are appended.
func (h *harness) newDB(ctx context.Context, suffix string, options ...string) (*database, error) {
	name := h.prefix + "_" + suffix
	if _, err := h.admin.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s %s",
		pgx.Identifier{name}.Sanitize(), pgx.Identifier{h.tpl}.Sanitize(), strings.Join(options, " "))); err != nil {
		return nil, fmt.Errorf("create database %s: %w", name, err)
	}
	d := &database{name: name, url: h.dbURL(name)}
	h.mu.Lock()
	h.dbs = append(h.dbs, d)
	h.mu.Unlock()
	cfg, err := pgxpool.ParseConfig(d.url)
	if err != nil {
		return nil, err
	}
	cfg.ConnConfig.RuntimeParams["application_name"] = "faults-harness"
	cfg.MaxConns = 4
	if d.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, fmt.Errorf("connect to %s: %w", name, err)
	}
	return d, nil
}

// cleanup stops every process and drops every database, whatever state the run is in.
func (h *harness) cleanup() {
	h.killAll()
	if h.simProc != nil {
		h.simProc.kill()
	}
	for _, f := range h.extraCleanup {
		f()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, d := range h.dbs {
		if d.pool != nil {
			d.pool.Close()
		}
	}
	if h.admin != nil {
		if !h.o.keep {
			for _, d := range h.dbs {
				if _, err := h.admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{d.name}.Sanitize()+" WITH (FORCE)"); err != nil {
					fmt.Fprintf(os.Stderr, "faults: drop database %s: %v\n", d.name, err)
				}
			}
		} else {
			fmt.Printf("databases kept: %s_*\n", h.prefix)
		}
		for _, f := range h.afterDrop {
			f()
		}
		_ = h.admin.Close(ctx)
	}
	if !h.o.keep && !h.failed {
		_ = os.RemoveAll(h.dir)
	}
}

// proc is one collector process; its stdout and stderr go to one file, kept for the leak scan.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  string
	done chan struct{}
	code int
	err  error
}

var procSeq struct {
	sync.Mutex
	n int
}

// start runs the collector under test.
func (h *harness) start(ctx context.Context, name string, env []string, args ...string) (*proc, error) {
	return h.startBin(ctx, h.bin, name, env, args...)
}

func (h *harness) startBin(_ context.Context, bin, name string, env []string, args ...string) (*proc, error) {
	procSeq.Lock()
	procSeq.n++
	n := procSeq.n
	procSeq.Unlock()
	out := filepath.Join(h.dir, fmt.Sprintf("%03d-%s.log", n, name))
	f, err := os.Create(out)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("start %s %s: %w", filepath.Base(bin), strings.Join(args, " "), err)
	}
	p := &proc{name: name, cmd: cmd, out: out, done: make(chan struct{})}
	h.mu.Lock()
	h.procs = append(h.procs, p)
	h.mu.Unlock()
	h.logf("started %s (pid %d): %s %s", name, cmd.Process.Pid, filepath.Base(bin), strings.Join(args, " "))
	go func() {
		err := cmd.Wait()
		_ = f.Close()
		p.code = cmd.ProcessState.ExitCode()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			p.err = err
		}
		close(p.done)
	}()
	return p, nil
}

// wait returns the exit code; a process still running after timeout is killed and reported.
func (p *proc) wait(ctx context.Context, timeout time.Duration) (int, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return p.code, p.err
	case <-t.C:
		p.kill()
		return -1, fmt.Errorf("%s still running after %s; killed", p.name, timeout)
	case <-ctx.Done():
		p.kill()
		return -1, ctx.Err()
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) signal(sig syscall.Signal) {
	if !p.exited() {
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *proc) kill() {
	if !p.exited() {
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) output() []byte {
	b, _ := os.ReadFile(p.out)
	return b
}

// tail is the end of the output, for failure messages.
func (p *proc) tail() string {
	b := p.output()
	if len(b) > 1500 {
		b = b[len(b)-1500:]
	}
	return string(bytes.TrimSpace(b))
}

// waitLog polls the output until re matches and returns its first group.
func (p *proc) waitLog(ctx context.Context, timeout time.Duration, re *regexp.Regexp) (string, error) {
	var got string
	err := poll(ctx, timeout, 50*time.Millisecond, func() (bool, error) {
		if m := re.FindSubmatch(p.output()); m != nil {
			got = string(m[1])
			return true, nil
		}
		if p.exited() {
			return false, fmt.Errorf("%s exited with %d", p.name, p.code)
		}
		return false, nil
	})
	return got, err
}

// killAll stops the scenario's processes (not the simulator).
func (h *harness) killAll() {
	h.mu.Lock()
	procs := h.procs
	h.procs = nil
	h.mu.Unlock()
	for _, p := range procs {
		p.kill()
	}
}

// poll calls f every interval until it reports done, fails, or timeout passes.
func poll(ctx context.Context, timeout, interval time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		done, err := f()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(interval):
		}
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// scenarioDB is every scenario's start: a fresh database with the first n catalog items due
// now (COLD_10M, so none comes due again within a scenario), and the simulator's latency set.
func (h *harness) scenarioDB(ctx context.Context, suffix string, n int, latency time.Duration, options ...string) (*database, error) {
	d, err := h.newDB(ctx, suffix, options...)
	if err != nil {
		return nil, err
	}
	if err := d.insertDue(ctx, h.catalog[:n], "COLD_10M"); err != nil {
		return nil, err
	}
	if err := h.sim.setLatency(ctx, latency); err != nil {
		return nil, err
	}
	return d, nil
}

// reconnectAdmin replaces the admin connection after the server was restarted under it.
func (h *harness) reconnectAdmin(ctx context.Context) error {
	_ = h.admin.Close(ctx)
	var err error
	if h.admin, err = pgx.Connect(ctx, h.o.adminURL); err != nil {
		return fmt.Errorf("reconnect to the admin database %s: %w", config.RedactURL(h.o.adminURL), err)
	}
	return nil
}
