// Command collector keeps market data fresh: it collects each tracked item when the database
// says it is due, and relays the snapshots to Kafka.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		code := exitCode(err)
		if code == exitUsage {
			fmt.Fprintln(os.Stderr, usageHint(err))
		}
		os.Exit(code)
	}
}

// exitError carries a specific exit code (e.g. 2 for "some import targets failed").
type exitError struct {
	code int
	err  error
}

func (e exitError) Error() string { return e.err.Error() }
func (e exitError) Unwrap() error { return e.err }
