// Command syncer copies the configured Postgres collections into Bigtable under a fresh
// version and flips the dataset's pointer to it: once, or on a cron schedule.
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
	err := (&cli.Syncer{}).Run(ctx, os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "syncer:", err)
		if errors.Is(err, cli.ErrUsage) {
			os.Exit(2)
		}
		os.Exit(1)
	}
}
