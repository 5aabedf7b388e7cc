package cli

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/duecollector/duecollector/internal/testkit"
)

// relay-outbox --once stopped by SIGTERM or Ctrl-C (its context cancelled), here while it backs
// off from a broker nobody answers at, says what it published and exits 0, as collect-due
// does; what it did not publish stays pending for the next run.
func TestRelayOnceStoppedSaysSoAndExitsZero(t *testing.T) {
	db := catalogEnv(t, true)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	nobody := ln.Addr().String()
	_ = ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	logs, logw := io.Pipe()
	var out bytes.Buffer // read once the command has returned
	cmd := newRootCmd(&out, logw)
	cmd.SetArgs([]string{"relay-outbox", "--once", "--database-url", db, "--brokers", nobody, "--log-format=console"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); _ = logw.Close() }()
	sc := bufio.NewScanner(logs)
	for sc.Scan() && !strings.Contains(sc.Text(), "relay attempt failed, backing off") {
	}
	cancel() // the signal
	go func() { _, _ = io.Copy(io.Discard, logs) }()
	if err := testkit.Recv(t, done, testkit.Timeout, "relay-outbox --once to stop"); err != nil {
		t.Fatalf("relay-outbox --once stopped: %v, want exit 0", err)
	}
	if !strings.Contains(out.String(), "published 0, failed 0, in 0 batches; interrupted: the rest stays in the outbox") {
		t.Fatalf("relay-outbox --once stopped printed %q", out.String())
	}
}
