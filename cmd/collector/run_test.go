package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

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
		"live instances: 1", "budget market:"} {
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
