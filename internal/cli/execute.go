// Package cli is the collector's command tree: flags, config, wiring, one file per command.
// Two binaries run it: cmd/collector, what production ships, and cmd/collector-dev, which adds
// the development commands (demo, sim) and with them the simulator and devpg, so that the
// shipped binary links neither.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"

	"go.uber.org/zap"

	"github.com/duecollector/duecollector/internal/store"
	"github.com/duecollector/duecollector/internal/telemetry"
)

// Main runs the process's command line until SIGINT or SIGTERM and exits with its code.
func (t Tree) Main() {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2) // room for both: neither is lost, however quickly they come
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-sigs
		cancel() // the first asks for a clean stop
		sig := <-sigs
		// A second one ends a stop that hangs on something unreachable, at once, as a shell
		// reports a process its signal killed; said in the log's format, so that with json
		// every line stays JSON.
		msg := fmt.Sprintf("%v again: stopping at once", sig)
		if log, err := telemetry.NewLogger("info", logFormatInForce.Load().(string), os.Stderr); err == nil {
			log.Warn(msg)
			_ = log.Sync()
		} else {
			fmt.Fprintln(os.Stderr, msg)
		}
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()
	code := t.execute(ctx, os.Args[1:], os.Stdout, os.Stderr)
	signal.Stop(sigs)
	cancel()
	os.Exit(code)
}

// logFormatInForce is the log.format of the command running (auto until its config is read),
// for the line Main writes at a second signal while the command still runs.
var logFormatInForce atomic.Value

func init() { logFormatInForce.Store("auto") }

// execute runs one command line and returns its exit code; a failure is reported on stderr in
// the log format in force, so with json every line is JSON, start-up errors included.
func (t Tree) execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root, a := t.newRoot(stdout, stderr)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	err = store.ExplainPooler(err)
	if ctx.Err() != nil && errors.Is(err, context.Canceled) {
		// A bare "context canceled" told a Job's log nothing. The commands that stop cleanly on
		// a signal (run, collect-due, relay-outbox) return no error and exit 0.
		err = fmt.Errorf("stopped by a signal before it finished (every write is idempotent: a new run carries on): %w", err)
	}
	code := exitCode(err)
	hint := ""
	if code == exitUsage {
		hint = usageHint(err)
	}
	if telemetry.ResolveFormat(a.logFormat(), stderr) != "json" {
		fmt.Fprintln(stderr, "error:", err)
		if hint != "" {
			fmt.Fprintln(stderr, hint)
		}
		return code
	}
	log, lerr := telemetry.NewLogger("info", "json", stderr)
	if lerr != nil {
		fmt.Fprintln(stderr, "error:", err)
		return code
	}
	fields := []zap.Field{zap.Error(err), zap.Int("exit_code", code)}
	if hint != "" {
		fields = append(fields, zap.String("hint", hint))
	}
	log.Error("command failed", fields...)
	_ = log.Sync()
	return code
}

// logFormat is log.format as loaded, or, when loading failed, the flag, then the environment.
func (a *app) logFormat() string {
	if a.cfg != nil {
		return a.cfg.Log.Format
	}
	if f := a.flagKeys["log.format"]; f != nil && f.Changed {
		return validFormat(f.Value.String())
	}
	return validFormat(getenv("COLLECTOR_LOG_FORMAT"))
}

func validFormat(f string) string {
	if f == "json" || f == "console" {
		return f
	}
	return "auto"
}

// exitError carries a specific exit code (e.g. 2 for "some import targets failed").
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }
