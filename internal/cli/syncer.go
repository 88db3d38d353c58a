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

	"github.com/snapflip/snapflip/pgsource"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// Syncer is the logic of cmd/syncer.
type Syncer struct {
	Stdout, Stderr io.Writer
	// Getenv reads the environment; default os.Getenv.
	Getenv func(string) string
	// Ticks, when set, replaces the schedule's clock (tests): each value is one
	// scheduled tick time.
	Ticks <-chan time.Time
	// OnTick, when set, is called after every scheduled tick with its outcome (tests).
	OnTick func(snapshot.TickResult, error)
}

const syncerUsage = `usage: syncer [flags] <command> [command flags]

commands:
  once                      run one sync now; exit 0 when it published or nothing changed
  run                       sync on the config's schedule until SIGTERM or SIGINT
  versions [--json]         list versions, newest first
  inspect VERSION           print a version's manifest in full
  diff A B [--collection C] count added, removed and changed ids between two versions
  rollback (--to VERSION | --previous) --reason TEXT [--force]
                            point back at an earlier version and pin the dataset
  unpin --reason TEXT       resume scheduled publishing
  history [--json]          the audit trail: flips, rollbacks, unpins

flags:
`

// startupTimeout bounds connecting to Bigtable and Postgres at start.
const startupTimeout = 30 * time.Second

// shutdownGrace bounds the cleanup after SIGTERM (marking the cancelled sync's version
// failed, releasing the lease, closing connections), however many steps it takes and
// whether or not Bigtable and Postgres answer: the process exits within about this
// long, well inside a Kubernetes pod's default grace of 30s.
const shutdownGrace = 5 * time.Second

// leaseName is the name of a dataset's publish lease.
func leaseName(dataset string) string { return "publish/" + dataset }

// syncer is a wired syncer.
type syncer struct {
	cfg     SyncerConfig
	store   *store.Store
	ticker  *snapshot.Ticker
	sched   schedule
	metrics *syncerMetrics
	log     *slog.Logger
}

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
	ctx = snapshot.WithShutdownGrace(ctx, shutdownGrace)
	fs := flag.NewFlagSet("syncer", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	fs.Usage = func() { fmt.Fprint(m.Stderr, syncerUsage); fs.PrintDefaults() }
	configPath := fs.String("config", m.Getenv(EnvConfig), "path of the YAML config (env "+EnvConfig+")")
	logFormat := fs.String("log-format", envOr(m.Getenv, EnvLogFormat, "text"), "log format: text or json (env "+EnvLogFormat+")")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	metricsAddr := fs.String("metrics-addr", m.Getenv(EnvMetricsAddr), "serve Prometheus /metrics here, e.g. :9090 (env "+EnvMetricsAddr+"); empty: off")
	force := fs.Bool("force", false, "once: publish even if the source has not changed")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	cmd := fs.Arg(0)
	switch {
	case cmd == "once" || cmd == "run":
		if fs.NArg() != 1 {
			return fmt.Errorf("%w: %s takes no arguments", ErrUsage, cmd)
		}
	case adminCommands[cmd] != nil:
	default:
		fs.Usage()
		return fmt.Errorf("%w: unknown command %q", ErrUsage, cmd)
	}
	log, err := newLogger(m.Stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	cfg, err := LoadSyncerConfig(*configPath, m.Getenv)
	if err != nil {
		return err
	}
	if run := adminCommands[cmd]; run != nil {
		return m.admin(ctx, cfg, log, run, fs.Args()[1:])
	}
	s, err := wireSyncer(ctx, cfg, log)
	if err == nil {
		s.ticker.Publisher.Crash = crashHook(m.Getenv)
	}
	if err != nil {
		return err
	}
	defer s.store.Close()
	stopMetrics, err := serveMetrics(ctx, *metricsAddr, s.metrics.reg, log)
	if err != nil {
		return err
	}
	defer stopMetrics()
	if fs.Arg(0) == "once" {
		start := time.Now()
		res, token, err := s.ticker.PublishLeased(ctx, snapshot.PublishOptions{Force: *force})
		s.metrics.observe(res, err, time.Since(start))
		s.metrics.observeCurrent(ctx, s.store, cfg.Dataset, cfg.TTL)
		if err != nil {
			return fmt.Errorf("sync: %w", err)
		}
		m.report(res, token)
		return nil
	}
	return m.runSchedule(ctx, s)
}

// wireSyncer connects the adapters and builds the ticker.
func wireSyncer(ctx context.Context, cfg SyncerConfig, log *slog.Logger) (*syncer, error) {
	sched, err := parseSchedule(cfg.Schedule)
	if err != nil {
		return nil, err
	}
	src, err := pgsource.New(cfg.Postgres.DSN, cfg.sources())
	if err != nil {
		return nil, err
	}
	src.Readers, src.PartitionMinRows = cfg.Postgres.Readers, cfg.Postgres.PartitionMinRows
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	st, err := store.Open(sctx, cfg.StoreConfig())
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*syncer, error) { st.Close(); return nil, err }
	if err := st.EnsureSchema(sctx); err != nil {
		return fail(err)
	}
	if err := src.Ping(sctx); err != nil {
		return fail(err)
	}
	client := uuid.New()
	holder := writerID(client.String())
	metrics := newSyncerMetrics(cfg.Dataset)
	lease, err := st.NewLease(leaseName(cfg.Dataset), store.LeaseConfig{
		Holder:   holder,
		Duration: cfg.Lease.Duration,
		// Raise the pointer's fence before taking the lease: from then on no older
		// holder can flip, however long it was paused.
		BeforeAcquire: func(ctx context.Context, token uint64) error { return st.AdvanceFence(ctx, cfg.Dataset, token) },
		OnEvent:       metrics.leaseEvent(log),
	})
	if err != nil {
		return fail(err)
	}
	defGate, gates := cfg.gates()
	pub := &snapshot.Publisher{
		Dataset:          cfg.Dataset,
		Store:            st,
		Source:           src,
		Versions:         snapshot.NewVersionGen(client, nil),
		Writer:           holder,
		MaxDocumentBytes: cfg.MaxDocumentBytes,
		TTL:              cfg.TTL,
		ProgressEvery:    cfg.ProgressInterval,
		Audit:            st,
		Gates:            gates,
		DefaultGate:      &defGate,
		Log:              log,
	}
	return &syncer{
		cfg:   cfg,
		store: st,
		ticker: &snapshot.Ticker{Publisher: pub, Lease: lease, Slots: st, Holder: holder,
			AcquireTimeout: cfg.Lease.AcquireTimeout, Log: log},
		sched:   sched,
		metrics: metrics,
		log:     log.With("holder", holder),
	}, nil
}

func (m *Syncer) report(res snapshot.PublishResult, token uint64) {
	if res.Pinned {
		fmt.Fprintf(m.Stdout, "pinned: the dataset is pinned to %s; nothing published", res.Previous)
		if res.Refreshed > 0 {
			fmt.Fprintf(m.Stdout, " (refreshed %d documents to keep them from expiring)", res.Refreshed)
		}
		fmt.Fprintln(m.Stdout)
		return
	}
	if res.NoOp {
		fmt.Fprintf(m.Stdout, "unchanged: source has not changed since %s\n", res.Previous)
		return
	}
	fmt.Fprintf(m.Stdout, "published %s (previous %s, token %d)\n", res.Manifest.Version, orNone(res.Previous), token)
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

// runSchedule runs one cycle per scheduled tick until ctx ends. Every replica runs the
// schedule; the replica that claims a tick's slot publishes it. A tick that comes
// while a cycle runs is skipped (the next one is computed when the cycle ends). If
// nothing is published yet, it syncs at once, outside the schedule. On shutdown it
// stops at the next tick boundary; a running cycle is cancelled, which leaves the
// pointer alone and releases the lease.
func (m *Syncer) runSchedule(ctx context.Context, s *syncer) error {
	log := s.log.With("dataset", s.cfg.Dataset)
	if _, err := s.store.ReadPointer(ctx, s.cfg.Dataset); errors.Is(err, snapshot.ErrNoVersion) {
		log.Info("nothing published yet: syncing now")
		start := time.Now()
		res, _, err := s.ticker.PublishLeased(ctx, snapshot.PublishOptions{})
		s.metrics.observe(res, err, time.Since(start))
		if err != nil && !errors.Is(err, snapshot.ErrFenced) && !errors.Is(err, snapshot.ErrConflict) {
			log.Error("first sync failed", "err", err)
		}
	}
	log.Info("syncer running", "schedule", s.cfg.Schedule)
	for {
		tick, ok := m.nextTick(ctx, s.sched)
		if !ok {
			log.Info("stopped")
			return nil
		}
		slot := s.sched.Slot(tick)
		tlog := log.With("slot", slot, "tick", tick.UTC().Format(time.RFC3339))
		tlog.Debug("tick started")
		start := time.Now()
		res, err := s.ticker.Tick(ctx, slot, snapshot.PublishOptions{})
		switch {
		case err != nil && ctx.Err() != nil:
			tlog.Info("sync abandoned for shutdown", "err", err)
		case errors.Is(err, snapshot.ErrRefused):
			tlog.Warn("publish refused by a validation gate; the pointer is unchanged (syncer once --force overrides)", "err", err)
		case err != nil:
			tlog.Error("sync failed", "err", err)
		case !res.Claimed:
			tlog.Debug("slot claimed by another replica", "owner", res.Owner)
		}
		if res.Claimed {
			s.metrics.slots.WithLabelValues("claimed").Inc()
			s.metrics.observe(res.Publish, err, time.Since(start))
		} else if err == nil {
			s.metrics.slots.WithLabelValues("other").Inc()
		}
		s.metrics.observeCurrent(ctx, s.store, s.cfg.Dataset, s.cfg.TTL)
		if m.OnTick != nil {
			m.OnTick(res, err)
		}
	}
}

// nextTick waits for the next scheduled tick, or takes it from m.Ticks.
func (m *Syncer) nextTick(ctx context.Context, sched schedule) (time.Time, bool) {
	if m.Ticks != nil {
		select {
		case t, ok := <-m.Ticks:
			return t, ok && ctx.Err() == nil
		case <-ctx.Done():
			return time.Time{}, false
		}
	}
	next := sched.Next(time.Now())
	timer := time.NewTimer(time.Until(next))
	defer timer.Stop()
	select {
	case <-timer.C:
		return next, true
	case <-ctx.Done():
		return time.Time{}, false
	}
}
