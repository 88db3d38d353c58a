// Command syncer copies the configured Postgres collections into Bigtable under a fresh
// version and flips the dataset's pointer to it: once, or on a cron schedule.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/snapflip/snapflip/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := (&cli.Syncer{}).Run(ctx, os.Args[1:])
	stop() // os.Exit runs no deferred calls
	os.Exit(cli.Report(os.Stderr, "syncer", err))
}
