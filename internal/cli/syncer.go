package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/robfig/cron/v3"

	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// Syncer is the logic of cmd/syncer.
type Syncer struct {
	Stdout, Stderr io.Writer
	// Getenv reads the environment; default os.Getenv.
	Getenv func(string) string
	// OnTick, when set, is called after every scheduled cycle with its outcome (tests).
	OnTick func(snapshot.PublishResult, error)
}

const syncerUsage = `usage: syncer [flags] <command>

commands:
  once    run one sync now; exit 0 when it published or the source had not changed
  run     sync on the config's schedule until SIGTERM or SIGINT

flags:
`

// startupTimeout bounds connecting to Bigtable and Postgres at start.
const startupTimeout = 30 * time.Second

// Run parses args (without the program name) and runs the command.
func (m *Syncer) Run(ctx context.Context, args []string) error {
	if m.Getenv == nil {
		m.Getenv = os.Getenv
	}
	if m.Stdout == nil {
		m.Stdout = os.Stdout
	}
	if m.Stderr == nil {
		m.Stderr = os.Stderr
	}
	fs := flag.NewFlagSet("syncer", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.Usage = func() { fmt.Fprint(m.Stderr, syncerUsage); fs.PrintDefaults() }
	configPath := fs.String("config", m.Getenv(EnvConfig), "path of the YAML config (env "+EnvConfig+")")
	logFormat := fs.String("log-format", envOr(m.Getenv, EnvLogFormat, "text"), "log format: text or json (env "+EnvLogFormat+")")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	force := fs.Bool("force", false, "once: publish even if the source has not changed")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() != 1 || (fs.Arg(0) != "once" && fs.Arg(0) != "run") {
		fs.Usage()
		return fmt.Errorf("%w: want one command, once or run", ErrUsage)
	}
	log, err := newLogger(m.Stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	cfg, err := LoadSyncerConfig(*configPath, m.Getenv)
	if err != nil {
		return err
	}
	pub, closeFn, err := m.wire(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer closeFn()
	if fs.Arg(0) == "once" {
		res, err := pub.Publish(ctx, snapshot.PublishOptions{Force: *force})
		if err != nil {
			return fmt.Errorf("sync: %w", err)
		}
		m.report(res)
		return nil
	}
	return m.runSchedule(ctx, cfg, pub, log)
}

// wire connects the adapters and builds the publisher.
func (m *Syncer) wire(ctx context.Context, cfg SyncerConfig, log *slog.Logger) (*snapshot.Publisher, func(), error) {
	src, err := pgsource.New(cfg.Postgres.DSN, cfg.Collections)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	st, err := store.Open(sctx, cfg.StoreConfig())
	if err != nil {
		return nil, nil, err
	}
	if err := st.EnsureSchema(sctx); err != nil {
		st.Close()
		return nil, nil, err
	}
	if err := src.Ping(sctx); err != nil {
		st.Close()
		return nil, nil, err
	}
	client := uuid.New()
	pub := &snapshot.Publisher{
		Dataset:          cfg.Dataset,
		Store:            st,
		Source:           src,
		Versions:         snapshot.NewVersionGen(client, nil),
		Writer:           writerID(client.String()),
		MaxDocumentBytes: cfg.MaxDocumentBytes,
		Log:              log,
	}
	return pub, func() { st.Close() }, nil
}

func (m *Syncer) report(res snapshot.PublishResult) {
	if res.NoOp {
		fmt.Fprintf(m.Stdout, "unchanged: source has not changed since %s\n", res.Previous)
		return
	}
	fmt.Fprintf(m.Stdout, "published %s (previous %s)\n", res.Manifest.Version, orNone(res.Previous))
	for _, name := range res.Manifest.CollectionNames() {
		fmt.Fprintf(m.Stdout, "  %-24s %d documents\n", name, res.Manifest.Collections[name].Rows)
	}
}

func orNone(v snapshot.Version) string {
	if v == "" {
		return "none"
	}
	return string(v)
}

// runSchedule syncs on the schedule until ctx ends. A cycle still running when the next
// tick comes makes that tick skip. At start, if nothing is published yet, it syncs at
// once. On shutdown it stops scheduling, lets the in-flight cycle end (its context is
// cancelled, so it abandons cleanly and leaves the pointer alone), and returns nil.
func (m *Syncer) runSchedule(ctx context.Context, cfg SyncerConfig, pub *snapshot.Publisher, log *slog.Logger) error {
	cycle := func() {
		res, err := pub.Publish(ctx, snapshot.PublishOptions{})
		switch {
		case err != nil && ctx.Err() != nil:
			log.Info("sync abandoned for shutdown", "dataset", cfg.Dataset, "err", err)
		case err != nil:
			log.Error("sync failed", "dataset", cfg.Dataset, "err", err)
		}
		if m.OnTick != nil {
			m.OnTick(res, err)
		}
	}
	c := cron.New(cron.WithParser(cronParser), cron.WithChain(cron.SkipIfStillRunning(cron.DiscardLogger)))
	if _, err := c.AddFunc(cfg.Schedule, cycle); err != nil {
		return fmt.Errorf("schedule %q: %w", cfg.Schedule, err)
	}
	if _, err := pub.Store.ReadPointer(ctx, cfg.Dataset); errors.Is(err, snapshot.ErrNoVersion) {
		log.Info("nothing published yet: syncing now", "dataset", cfg.Dataset)
		cycle()
	}
	c.Start()
	log.Info("syncer running", "dataset", cfg.Dataset, "schedule", cfg.Schedule)
	<-ctx.Done()
	log.Info("shutting down: waiting for the running cycle")
	<-c.Stop().Done()
	log.Info("stopped")
	return nil
}
