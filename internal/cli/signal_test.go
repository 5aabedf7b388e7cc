package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// hangEnv makes the test binary, run again, a tree whose "hang" command never finishes its
// clean stop: what a stop stuck on an unreachable database or broker looks like.
const hangEnv = "DUECOLLECTOR_TEST_HANG"

func TestMain(m *testing.M) {
	if os.Getenv(hangEnv) != "" {
		Tree{Name: "hanging", Extra: []Extension{func(h Host) *cobra.Command {
			return &cobra.Command{Use: "hang", RunE: h.Run(func(ctx context.Context) error {
				fmt.Println("ready")
				<-ctx.Done()
				fmt.Println("stopping")
				select {}
			})}
		}}}.Main()
	}
	os.Exit(m.Run())
}

// The first SIGTERM asks for a clean stop; a second one (an operator's second Ctrl-C, a
// supervisor's repeated stop) ends a stop that hangs at once, instead of being swallowed.
// Said with log.format json, the line about it is JSON like every other.
func TestASecondSignalEndsAStopThatHangs(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "hang", "--log-format", "json")
	cmd.Env = append(os.Environ(), hangEnv+"=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	lines := bufio.NewScanner(out)
	expect := func(want string) {
		t.Helper()
		if !lines.Scan() || lines.Text() != want {
			t.Fatalf("child said %q (%v), want %q", lines.Text(), lines.Err(), want)
		}
	}
	expect("ready")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	expect("stopping")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	select {
	case err := <-exited:
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 128+int(syscall.SIGTERM) {
			t.Fatalf("child ended with %v, want exit code 143 at the second SIGTERM", err)
		}
		said := false
		for line := range strings.Lines(stderr.String()) {
			var l struct{ Msg string }
			if err := json.Unmarshal([]byte(line), &l); err != nil {
				t.Fatalf("a line of the json log is not JSON: %q", line)
			}
			said = said || l.Msg == "terminated again: stopping at once"
		}
		if !said {
			t.Fatalf("nothing said of the second signal:\n%s", stderr.String())
		}
	case <-time.After(time.Minute): // the failure is a hang; a minute is no race on a loaded machine
		t.Fatal("the second SIGTERM did not end the process")
	}
}
