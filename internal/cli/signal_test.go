package cli

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
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
		Tree{Name: "hanging", Extra: []Extension{func(Host) *cobra.Command {
			return &cobra.Command{Use: "hang", RunE: func(cmd *cobra.Command, _ []string) error {
				fmt.Println("ready")
				<-cmd.Context().Done()
				fmt.Println("stopping")
				select {}
			}}
		}}}.Main()
	}
	os.Exit(m.Run())
}

// The first SIGTERM asks for a clean stop; a second one (an operator's second Ctrl-C, a
// supervisor's repeated stop) ends a stop that hangs at once, instead of being swallowed.
func TestASecondSignalEndsAStopThatHangs(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "hang")
	cmd.Env = append(os.Environ(), hangEnv+"=1")
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
	case <-time.After(time.Minute): // the failure is a hang; a minute is no race on a loaded machine
		t.Fatal("the second SIGTERM did not end the process")
	}
}
