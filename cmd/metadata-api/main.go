// Command metadata-api serves the current version of a snapflip dataset over HTTP,
// resolving every read through the dataset's pointer.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/snapflip/snapflip/internal/cli"
)

// gcPercent is the API's GC target unless GOGC sets one. Its live heap is mostly the
// document cache, which changes slowly, and its garbage is per request; letting the heap
// grow to five times the live heap between collections (instead of twice) means a
// quarter of the GC cycles, whose mark phases are the API's latency tail (p99 at 32
// connections: 5.3 ms at GOGC=100, 3.9 ms at 400, on the benchmark machine).
// GOMEMLIMIT, set in deploy/, still bounds the heap below the container's limit.
const gcPercent = 400

func main() {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(gcPercent)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := (&cli.MetadataAPI{}).Run(ctx, os.Args[1:])
	stop() // os.Exit runs no deferred calls
	os.Exit(cli.Report(os.Stderr, "metadata-api", err))
}
