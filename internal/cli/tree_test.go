package cli

import (
	"context"
	"io"

	"github.com/spf13/cobra"
)

// The tests drive the shipped tree.

func newRootCmd(stdout, stderr io.Writer) *cobra.Command { return Collector.NewRoot(stdout, stderr) }

func newRoot(stdout, stderr io.Writer) (*cobra.Command, *app) {
	return Collector.newRoot(stdout, stderr)
}

func execute(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return Collector.execute(ctx, args, stdout, stderr)
}
