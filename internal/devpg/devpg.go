// Package devpg gives the demo a PostgreSQL on a fresh machine: the configured server when one
// answers, otherwise a private throwaway cluster started from locally installed server
// binaries. It is for local runs only; production points database.url at a real server.
package devpg

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"
)

// searchGlobs are where distributions install PostgreSQL server binaries outside PATH
// (Debian/Ubuntu keep them per major version). Tests replace it to simulate a bare machine.
var searchGlobs = []string{
	"/usr/lib/postgresql/*/bin",
	"/usr/pgsql-*/bin",
	"/usr/local/pgsql/bin",
	"/opt/homebrew/opt/postgresql*/bin",
}

// connectTimeout bounds each probe of a server; a closed port fails at once, a black-holed
// host must not stall the demo.
const connectTimeout = 3 * time.Second

// superuser is the role initdb creates; fixed so the URL does not depend on who ran initdb.
const superuser = "postgres"

// Ensure returns a URL where a PostgreSQL answers and the database named in url exists.
//
// If a server answers at url, the database is created there when missing and url is returned
// with a no-op stop. Otherwise, when url points at this machine and PostgreSQL server binaries
// are installed, a private cluster under dataDir (created on first use, re-used after, also
// when a killed earlier run left it running) is started on a free loopback port; stop shuts
// it down. Without binaries the error says how to get a server.
func Ensure(ctx context.Context, url string, dataDir string, log *zap.Logger) (effectiveURL string, stop func(), err error) {
	noop := func() {}
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return "", noop, fmt.Errorf("database.url: %w", err)
	}
	dbName := cfg.Database
	if dbName == "" {
		dbName = "duecollector"
	}
	where := fmt.Sprintf("%s:%d", cfg.Host, cfg.Port)

	answered, err := ensureDatabase(ctx, cfg)
	if answered {
		if err != nil {
			return "", noop, err
		}
		return url, noop, nil
	}
	probeErr := err
	if !isLocal(cfg.Host) {
		return "", noop, fmt.Errorf("no PostgreSQL answers at %s (database.url), and it is not this machine, so no private one is started: %w", where, probeErr)
	}

	c, err := newCluster(dataDir)
	if err != nil {
		return "", noop, fmt.Errorf("no PostgreSQL answers at %s (database.url: %v), and %w", where, probeErr, err)
	}
	port, err := c.start(log)
	if err != nil {
		return "", noop, err
	}
	// The cluster belongs to the caller's data directory, so stop also stops one that a killed
	// earlier run left behind and this run re-used.
	stop = func() {
		if err := c.stop(); err != nil {
			log.Warn("stopping the private PostgreSQL", zap.String("dir", dataDir), zap.Error(err))
		}
	}
	private := fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", superuser, port, pathEscape(dbName))
	pcfg, err := pgx.ParseConfig(private)
	if err != nil {
		stop()
		return "", noop, fmt.Errorf("private PostgreSQL URL: %w", err)
	}
	if _, err := ensureDatabase(ctx, pcfg); err != nil {
		stop()
		return "", noop, fmt.Errorf("private PostgreSQL under %s: %w", dataDir, err)
	}
	return private, stop, nil
}

// ensureDatabase connects to cfg's database, creating it through the server's postgres
// database when missing. answered is false when no server answered at all (nothing listens,
// host unreachable), which is the one case where starting a private cluster makes sense; a
// server that answers but refuses (bad password, no such role) is the operator's to fix.
func ensureDatabase(ctx context.Context, cfg *pgx.ConnConfig) (answered bool, err error) {
	err = ping(ctx, cfg)
	if err == nil {
		return true, nil
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false, err
	}
	if pgErr.Code != "3D000" { // invalid_catalog_name: the database does not exist yet
		return true, fmt.Errorf("connect to database %q at %s:%d: %w", cfg.Database, cfg.Host, cfg.Port, err)
	}
	admin := cfg.Copy()
	admin.Database = "postgres"
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, admin)
	if err != nil {
		return true, fmt.Errorf("database %q does not exist at %s:%d and its postgres database is not reachable to create it: %w", cfg.Database, cfg.Host, cfg.Port, err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{cfg.Database}.Sanitize())
	if err != nil && !(errors.As(err, &pgErr) && pgErr.Code == "42P04") { // duplicate_database: a concurrent run won
		return true, fmt.Errorf("create database %q at %s:%d: %w", cfg.Database, cfg.Host, cfg.Port, err)
	}
	return true, nil
}

func ping(ctx context.Context, cfg *pgx.ConnConfig) error {
	cctx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	conn, err := pgx.ConnectConfig(cctx, cfg.Copy())
	if err != nil {
		return err
	}
	return conn.Close(ctx)
}

func isLocal(host string) bool {
	if host == "localhost" || strings.HasPrefix(host, "/") { // a unix socket directory is local
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func pathEscape(s string) string { return (&url.URL{Path: s}).EscapedPath() }

// cluster is a private PostgreSQL data directory and the binaries that run it.
type cluster struct {
	dir    string // as the caller named it, for messages
	pgdata string
	logf   string
	bin    string
	cred   *syscall.Credential // non-nil when running as root: server processes run as postgres
}

func newCluster(dataDir string) (*cluster, error) {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		return nil, fmt.Errorf("private PostgreSQL directory %s: %w", dataDir, err)
	}
	c := &cluster{dir: dataDir, pgdata: filepath.Join(abs, "data"), logf: filepath.Join(abs, "postgres.log")}
	want := ""
	if b, err := os.ReadFile(filepath.Join(c.pgdata, "PG_VERSION")); err == nil {
		want = strings.TrimSpace(string(b))
	}
	c.bin, err = findBinaries(want)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("create private PostgreSQL directory %s: %w", dataDir, err)
	}
	if os.Geteuid() == 0 {
		if c.cred, err = postgresUser(abs); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// findBinaries returns a directory holding initdb and pg_ctl. With want set (an existing
// cluster's major version) only binaries of that version will do, because a cluster cannot
// be started by another major version.
func findBinaries(want string) (string, error) {
	var dirs []string
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real
		}
		dirs = append(dirs, filepath.Dir(p))
	}
	for _, g := range searchGlobs {
		m, _ := filepath.Glob(g)
		// Newest major version first: /usr/lib/postgresql/16/bin before .../15/bin.
		sort.Slice(m, func(i, j int) bool { return versionOf(m[i]) > versionOf(m[j]) })
		dirs = append(dirs, m...)
	}
	var found []string
	for _, d := range dirs {
		if !isExec(filepath.Join(d, "initdb")) || !isExec(filepath.Join(d, "pg_ctl")) {
			continue
		}
		found = append(found, d)
		if want == "" || binaryVersion(d) == want {
			return d, nil
		}
	}
	if len(found) > 0 {
		return "", fmt.Errorf("the existing private cluster needs PostgreSQL %s server binaries but only %s were found; delete its directory to start afresh", want, strings.Join(found, ", "))
	}
	return "", errors.New("no PostgreSQL server binaries (initdb, pg_ctl) were found in PATH or " + strings.Join(searchGlobs, ", ") + ". Get a server in one of these ways:\n" +
		"  - docker compose up -d postgres   (then the default database.url works)\n" +
		"  - apt-get install postgresql      (or your OS's package; the demo then starts a private one itself)\n" +
		"  - set COLLECTOR_DATABASE_URL (or DATABASE_URL) to a server you already have")
}

func isExec(p string) bool {
	st, err := os.Stat(p)
	return err == nil && !st.IsDir() && st.Mode()&0o111 != 0
}

// versionOf extracts the major version from paths like /usr/lib/postgresql/15/bin.
func versionOf(dir string) int {
	for _, part := range strings.FieldsFunc(dir, func(r rune) bool { return r == '/' || r == '-' || r == '@' }) {
		if n, err := strconv.Atoi(strings.TrimPrefix(part, "postgresql")); err == nil {
			return n
		}
	}
	return 0
}

// binaryVersion is the major version printed by `pg_ctl --version` ("pg_ctl (PostgreSQL) 15.8").
func binaryVersion(dir string) string {
	out, err := exec.Command(filepath.Join(dir, "pg_ctl"), "--version").Output()
	if err != nil {
		return ""
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return ""
	}
	v := f[len(f)-1]
	if i := strings.IndexByte(v, '.'); i > 0 {
		v = v[:i]
	}
	return v
}

// postgresUser: initdb and postgres refuse to run as root, so as root the cluster belongs to
// the postgres system user, who must be able to reach dir.
func postgresUser(dir string) (*syscall.Credential, error) {
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, and PostgreSQL refuses to run as root, but there is no 'postgres' system user to run it as (%v); create one (useradd --system postgres), run as a normal user, or set COLLECTOR_DATABASE_URL", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := filepath.WalkDir(dir, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	}); err != nil {
		return nil, fmt.Errorf("give the private PostgreSQL directory %s to the postgres user: %w", dir, err)
	}
	for d := filepath.Dir(dir); ; d = filepath.Dir(d) {
		if !searchable(d, uint32(uid), uint32(gid)) {
			return nil, fmt.Errorf("running as root, so the private PostgreSQL runs as the postgres user, who cannot enter %s to reach %s; chmod o+x %s, pick another data directory, or set COLLECTOR_DATABASE_URL", d, dir, d)
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// searchable reports whether uid (primary group gid) may traverse dir, by its mode bits.
// Supplementary groups and ACLs are ignored: at worst this refuses a directory that would
// have worked, with a message saying which one.
func searchable(dir string, uid, gid uint32) bool {
	st, err := os.Stat(dir)
	if err != nil {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return true
	}
	m := st.Mode().Perm()
	switch {
	case sys.Uid == uid:
		return m&0o100 != 0
	case sys.Gid == gid:
		return m&0o010 != 0
	default:
		return m&0o001 != 0
	}
}

func (c *cluster) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(c.bin, name), args...)
	// Own process group: a Ctrl-C at the terminal reaches the demo, which then stops the
	// server in order, instead of reaching the server directly.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	return cmd
}

// start initialises the cluster on first use and starts it unless it is already running (a
// previous run that was killed), returning its port.
func (c *cluster) start(log *zap.Logger) (port int, err error) {
	if _, err := os.Stat(filepath.Join(c.pgdata, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		log.Info("initialising a private PostgreSQL cluster", zap.String("dir", c.dir), zap.String("binaries", c.bin))
		out, err := c.command("initdb", "-D", c.pgdata, "-U", superuser, "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync").CombinedOutput()
		if err != nil {
			return 0, fmt.Errorf("initdb for the private PostgreSQL under %s: %w\n%s", c.dir, err, tail(out))
		}
		// Loopback TCP only and no unix socket: no path-length limit, no dependency on
		// /var/run/postgresql; and a throwaway cluster need not survive a power cut.
		conf := "\n# duecollector private cluster\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\nfsync = off\nsynchronous_commit = off\nfull_page_writes = off\nmax_connections = 200\n"
		f, err := os.OpenFile(filepath.Join(c.pgdata, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
		if err == nil {
			_, err = f.WriteString(conf)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return 0, fmt.Errorf("configure the private PostgreSQL under %s: %w", c.dir, err)
		}
	}
	if p, ok := c.runningPort(); ok {
		log.Info("re-using the private PostgreSQL already running", zap.String("dir", c.dir), zap.String("addr", "127.0.0.1:"+strconv.Itoa(p)))
		return p, nil
	}
	if port, err = freePort(); err != nil {
		return 0, err
	}
	cmd := c.command("pg_ctl", "start", "-D", c.pgdata, "-l", c.logf, "-w", "-t", "60", "-o", "-p "+strconv.Itoa(port))
	if out, err := cmd.CombinedOutput(); err != nil {
		logTail, _ := os.ReadFile(c.logf)
		return 0, fmt.Errorf("start the private PostgreSQL under %s on port %d: %w\n%s\n%s", c.dir, port, err, tail(out), tail(logTail))
	}
	log.Info("started a private PostgreSQL", zap.String("dir", c.dir), zap.String("addr", "127.0.0.1:"+strconv.Itoa(port)),
		zap.String("log", c.logf), zap.String("binaries", c.bin))
	return port, nil
}

// runningPort reads the port from postmaster.pid when `pg_ctl status` says the server runs.
func (c *cluster) runningPort() (int, bool) {
	if c.command("pg_ctl", "status", "-D", c.pgdata).Run() != nil {
		return 0, false
	}
	b, err := os.ReadFile(filepath.Join(c.pgdata, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 4 { // line 4 of postmaster.pid is the port
		return 0, false
	}
	p, err := strconv.Atoi(strings.TrimSpace(lines[3]))
	return p, err == nil
}

func (c *cluster) stop() error {
	out, err := c.command("pg_ctl", "stop", "-D", c.pgdata, "-m", "fast", "-w", "-t", "60").CombinedOutput()
	if err != nil {
		return fmt.Errorf("pg_ctl stop: %w: %s", err, tail(out))
	}
	return nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free loopback port for the private PostgreSQL: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tail keeps the end of a command's output, where the reason for a failure is.
func tail(b []byte) string {
	const max = 2000
	s := strings.TrimSpace(string(b))
	if len(s) > max {
		s = "…" + s[len(s)-max:]
	}
	return s
}
