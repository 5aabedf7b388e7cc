package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/duecollector/duecollector/internal/store/storetest"
)

// demo from a directory without configs/ uses the built-in targets, counts what it published,
// with --kafka-addr keeps the broker readable by any Kafka client until interrupted, and with
// --keep the console.
func TestDemoFromAnyDirectoryKeepsTheBroker(t *testing.T) {
	db := storetest.NewDatabase(t)
	t.Setenv("COLLECTOR_CONFIG", "")
	t.Setenv("COLLECTOR_LOG_FORMAT", "")
	t.Chdir(t.TempDir())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	cln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	consoleAddr := cln.Addr().String()
	_ = cln.Close()
	t.Setenv("COLLECTOR_CONSOLE_ADDR", consoleAddr)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// stdout is read line by line as the demo prints it: the console line is the signal that
	// the run is over and everything it publishes is in place.
	pr, pw := io.Pipe()
	var errOut bytes.Buffer // read only once the demo has returned
	kept := make(chan string, 1)
	go func() {
		var seen strings.Builder
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			seen.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "console    kept at") {
				kept <- seen.String()
			}
		}
		close(kept)
	}()
	cmd := tree.NewRoot(pw, &errOut)
	// The demo's own 15 s: its budget holds the first calls for a few heartbeats, and a loaded
	// machine must still collect and publish all 12 items within the run.
	cmd.SetArgs([]string{"demo", "--database-url", db, "--duration", "15s", "--kafka-addr", addr, "--keep"})
	done := make(chan error, 1)
	go func() { done <- cmd.ExecuteContext(ctx); _ = pw.Close() }()

	var got string
	select {
	case got = <-kept:
	case err := <-done:
		t.Fatalf("demo ended before keeping the broker: %v\nstdout:\n%s\nstderr:\n%s", err, <-kept, errOut.String())
	case <-time.After(2 * time.Minute):
		t.Fatal("demo did not finish its run in 2 minutes")
	}
	for _, want := range []string{
		"import     12 targets from configs/import-targets.yaml (built in): 12 new",
		"relay      12 events published to market.auction-snapshots.v1 during the run; 0 pending, 0 failed",
		"first events on market.auction-snapshots.v1", "ce_id=",
		"broker kept at " + addr, "kcat -C -b " + addr,
		"console    http://" + consoleAddr + "/", "console    kept at http://" + consoleAddr + "/ until Ctrl-C",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("demo output lacks %q:\n%s", want, got)
		}
	}

	// The kept console lists the imported items.
	res, err := http.Get("http://" + consoleAddr + "/items")
	if err != nil {
		t.Fatalf("the kept console does not answer: %v", err)
	}
	page, _ := io.ReadAll(res.Body)
	_ = res.Body.Close()
	if res.StatusCode != http.StatusOK || !strings.Contains(string(page), `href="/items/`) {
		t.Errorf("kept console /items: %d\n%s", res.StatusCode, page)
	}

	// The kept broker serves the topic to an ordinary consumer.
	conn, err := kafka.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("the kept broker does not answer: %v", err)
	}
	parts, err := conn.ReadPartitions("market.auction-snapshots.v1")
	_ = conn.Close()
	if err != nil || len(parts) == 0 {
		t.Fatalf("partitions of the kept broker: %v %v", parts, err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("demo after Ctrl-C: %v, want exit 0", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("demo did not stop after Ctrl-C")
	}
	if logs := errOut.String(); strings.Contains(logs, `{"level"`) || !strings.Contains(logs, "INFO") {
		t.Errorf("demo logs are not console lines:\n%s", logs)
	}
}
