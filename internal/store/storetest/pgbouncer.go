package storetest

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// PgBouncer starts a private PgBouncer in transaction pooling mode in front of the test server
// and returns dbURL (a URL from NewPool or NewDatabase) rewritten to go through it. poolSize is
// its default_pool_size: 1 makes every client share one server connection. The test is skipped,
// saying why, when the pgbouncer binary (Debian package pgbouncer) is not installed.
func PgBouncer(tb testing.TB, dbURL string, poolSize int) string {
	tb.Helper()
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			tb.Skip("pgbouncer is not installed (Debian package pgbouncer; .ci/run installs it): " + err.Error())
		}
		bin = "/usr/sbin/pgbouncer"
	}
	admin, err := pgx.ParseConfig(AdminURL())
	if err != nil {
		tb.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	_ = ln.Close()

	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	// pgbouncer refuses to run as root; it then runs as postgres and must read and write here.
	if err := os.Chmod(dir, 0o777); err != nil {
		tb.Fatal(err)
	}
	ini := fmt.Sprintf(`[databases]
* = host=%s port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = transaction
default_pool_size = %d
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
logfile = %s
`, admin.Host, admin.Port, port, filepath.Join(dir, "users.txt"), poolSize, filepath.Join(dir, "pgbouncer.log"))
	for name, body := range map[string]string{
		"pgbouncer.ini": ini,
		"users.txt":     fmt.Sprintf("%q \"\"\n", admin.User),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	args := []string{filepath.Join(dir, "pgbouncer.ini")}
	if os.Geteuid() == 0 {
		args = append([]string{"-u", "postgres"}, args...)
	}
	out, err := os.Create(filepath.Join(dir, "stderr.log"))
	if err != nil {
		tb.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start pgbouncer: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})

	u, err := url.Parse(dbURL)
	if err != nil {
		tb.Fatal(err)
	}
	u.Host = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	bouncer := u.String()
	logs := func() string {
		a, _ := os.ReadFile(out.Name())
		b, _ := os.ReadFile(filepath.Join(dir, "pgbouncer.log"))
		return string(a) + string(b)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		conn, err := pgx.Connect(ctx, bouncer)
		cancel()
		if err == nil {
			_ = conn.Close(context.Background())
			return bouncer
		}
		select {
		case <-exited:
			tb.Fatalf("pgbouncer exited:\n%s", logs())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pgbouncer did not answer on %s: %v\n%s", u.Host, err, logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
