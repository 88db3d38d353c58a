// Command metadata-api serves the current version of a snapflip dataset over HTTP,
// resolving every read through the dataset's pointer.
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/snapflip/snapflip/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := (&cli.MetadataAPI{}).Run(ctx, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "metadata-api:", err)
		if errors.Is(err, cli.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
