package storetest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/testkit"
)

// Standby is a private PostgreSQL primary and its streaming standby, each on a port of its
// own, with a migrated database on the primary that the standby replays. The system cluster
// is left alone: its pg_hba.conf allows no replication, and a test must not change it.
type Standby struct {
	// PrimaryURL and StandbyURL reach the migrated database on each server.
	PrimaryURL, StandbyURL string

	bin         string
	cred        *syscall.Credential // non-nil as root: PostgreSQL refuses to run as root
	dir         string
	standbyPort int
}

// standbyDB is the migrated database's name on the private pair.
const standbyDB = "duecollector"

// NewStandby starts the pair (initdb, start, migrate, pg_basebackup -R, start the standby)
// and stops both at cleanup. Without PostgreSQL's server binaries the test is skipped, saying
// why, unless CI is set: there it fails, so a CI image that lost them is noticed.
func NewStandby(tb testing.TB) *Standby {
	tb.Helper()
	bin, err := serverBinaries()
	if err != nil {
		if os.Getenv("CI") != "" {
			tb.Fatalf("storetest: a standby needs PostgreSQL's server binaries under CI: %v", err)
		}
		tb.Skipf("storetest: no standby without PostgreSQL's server binaries (apt-get install postgresql): %v", err)
	}
	// Not t.TempDir: its parents are private to root, and the servers run as postgres.
	dir, err := os.MkdirTemp("", "dc-standby-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	s := &Standby{bin: bin, dir: dir}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			tb.Fatalf("storetest: running as root, and PostgreSQL needs another user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		s.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}

	primaryPort, standbyPort := freePort(tb), freePort(tb)
	s.standbyPort = standbyPort
	primary, standby := filepath.Join(dir, "primary"), filepath.Join(dir, "standby")
	s.run(tb, "initdb", "-D", primary, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	// Loopback only, no unix socket; a throwaway pair need not survive a power cut. initdb's
	// pg_hba.conf already lets local TCP connections replicate by trust.
	conf := "\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = ''\nfsync = off\nfull_page_writes = off\n" +
		"max_connections = 50\nshared_buffers = 16MB\n"
	f, err := os.OpenFile(filepath.Join(primary, "postgresql.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err == nil {
		_, err = f.WriteString(conf)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		tb.Fatalf("storetest: configure the private primary: %v", err)
	}
	s.start(tb, primary, primaryPort)
	tb.Cleanup(func() { s.stop(tb, primary) })

	admin := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", primaryPort)
	s.PrimaryURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", primaryPort, standbyDB)
	s.StandbyURL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", standbyPort, standbyDB)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		tb.Fatalf("storetest: private primary: %v", err)
	}
	_, err = conn.Exec(ctx, "CREATE DATABASE "+standbyDB)
	_ = conn.Close(ctx)
	if err != nil {
		tb.Fatalf("storetest: private primary: %v", err)
	}
	if err := store.Migrate(ctx, s.PrimaryURL, nil); err != nil {
		tb.Fatalf("storetest: migrate the private primary: %v", err)
	}
	if err := partitionHistory(ctx, s.PrimaryURL); err != nil {
		tb.Fatalf("storetest: private primary: %v", err)
	}

	// -R writes standby.signal and primary_conninfo; a fast checkpoint starts the copy at once.
	s.run(tb, "pg_basebackup", "-h", "127.0.0.1", "-p", strconv.Itoa(primaryPort), "-U", "postgres",
		"-D", standby, "-R", "-X", "stream", "--checkpoint=fast", "--no-sync")
	s.start(tb, standby, standbyPort)
	tb.Cleanup(func() { s.stop(tb, standby) })
	return s
}

// PauseReplay stops the standby applying WAL (pg_wal_replay_pause) and returns once it has:
// writes made on the primary after it are not on the standby until ResumeReplay.
func (s *Standby) PauseReplay(tb testing.TB) {
	tb.Helper()
	s.onStandby(tb, func(ctx context.Context, conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, `SELECT pg_wal_replay_pause()`); err != nil {
			return err
		}
		testkit.Eventually(tb, testkit.Timeout, "replay to pause", func() bool {
			var st string
			return conn.QueryRow(ctx, `SELECT pg_get_wal_replay_pause_state()`).Scan(&st) == nil && st == "paused"
		})
		return nil
	})
}

// ResumeReplay lets the standby apply WAL again.
func (s *Standby) ResumeReplay(tb testing.TB) {
	tb.Helper()
	s.onStandby(tb, func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, `SELECT pg_wal_replay_resume()`)
		return err
	})
}

func (s *Standby) onStandby(tb testing.TB, f func(context.Context, *pgx.Conn) error) {
	tb.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, s.StandbyURL)
	if err != nil {
		tb.Fatalf("storetest: connect to the standby: %v", err)
	}
	defer conn.Close(ctx)
	if err := f(ctx, conn); err != nil {
		tb.Fatalf("storetest: on the standby: %v", err)
	}
}

// Pools opens a pool on each server, closed at cleanup.
func (s *Standby) Pools(tb testing.TB) (primary, standby *pgxpool.Pool) {
	tb.Helper()
	open := func(url string) *pgxpool.Pool {
		p, err := store.OpenReplica(context.Background(), store.PoolConfig{URL: url, MaxConns: 4})
		if err != nil {
			tb.Fatalf("storetest: %v", err)
		}
		tb.Cleanup(p.Close)
		return p
	}
	return open(s.PrimaryURL), open(s.StandbyURL)
}

// StopStandby stops the standby at once (immediate mode), as a crash would.
func (s *Standby) StopStandby(tb testing.TB) {
	tb.Helper()
	s.stop(tb, filepath.Join(s.dir, "standby"))
}

// StartStandby starts the standby again on its port; it resumes streaming from the primary.
func (s *Standby) StartStandby(tb testing.TB) {
	tb.Helper()
	s.start(tb, filepath.Join(s.dir, "standby"), s.standbyPort)
}

func (s *Standby) start(tb testing.TB, data string, port int) {
	tb.Helper()
	s.run(tb, "pg_ctl", "start", "-D", data, "-l", data+".log", "-w", "-t", "120", "-o", "-p "+strconv.Itoa(port))
}

// stop is immediate: no shutdown checkpoint to wait for, and a pair stopped twice is fine.
func (s *Standby) stop(tb testing.TB, data string) {
	tb.Helper()
	cmd := s.command("pg_ctl", "stop", "-D", data, "-m", "immediate", "-w", "-t", "60")
	if out, err := cmd.CombinedOutput(); err != nil && !strings.Contains(string(out), "Is server running?") {
		tb.Errorf("storetest: pg_ctl stop %s: %v\n%s", data, err, out)
	}
}

func (s *Standby) run(tb testing.TB, name string, args ...string) {
	tb.Helper()
	if out, err := s.command(name, args...).CombinedOutput(); err != nil {
		logs, _ := filepath.Glob(filepath.Join(s.dir, "*.log"))
		var tails []string
		for _, l := range logs {
			b, _ := os.ReadFile(l)
			tails = append(tails, l+":\n"+string(b))
		}
		tb.Fatalf("storetest: %s %s: %v\n%s\n%s", name, strings.Join(args, " "), err, out, strings.Join(tails, "\n"))
	}
}

func (s *Standby) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: s.cred}
	cmd.Env = append(os.Environ(), "LC_ALL=C")
	cmd.Dir = s.dir
	return cmd
}

// serverBinaries finds a directory with initdb, pg_ctl and pg_basebackup, the newest version
// first.
func serverBinaries() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool {
		vi, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[i])))
		vj, _ := strconv.Atoi(filepath.Base(filepath.Dir(dirs[j])))
		return vi > vj
	})
	if p, err := exec.LookPath("pg_ctl"); err == nil {
		dirs = append([]string{filepath.Dir(p)}, dirs...)
	}
	for _, d := range dirs {
		ok := true
		for _, b := range []string{"initdb", "pg_ctl", "pg_basebackup"} {
			if _, err := os.Stat(filepath.Join(d, b)); err != nil {
				ok = false
			}
		}
		if ok {
			return d, nil
		}
	}
	return "", fmt.Errorf("initdb, pg_ctl and pg_basebackup are in neither PATH nor /usr/lib/postgresql/*/bin")
}

func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
