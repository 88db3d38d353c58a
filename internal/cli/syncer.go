package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/snapflip/snapflip/layer"
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
	// Runs, when set, is the fingerprint run cache of every sync, kept across Run
	// calls (tests: a sequence of `once` commands syncs as `run` does); otherwise
	// syncer run makes its own and once keeps none.
	Runs *layer.RunCache
}

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
	cfg   SyncerConfig
	src   *pgsource.Source
	store *store.Store
	// cycle keeps this process's scheduled and change-driven cycles apart.
	cycle   sync.Mutex
	ticker  *snapshot.Ticker
	layers  *layer.Writer // the ticker publisher's document writer
	sched   schedule
	metrics *syncerMetrics
	health  *health
	log     *slog.Logger
}

// ping says whether Bigtable and Postgres answer (for /readyz).
func (s *syncer) ping(ctx context.Context) error {
	if _, err := s.store.ReadPointer(ctx, s.cfg.Dataset); err != nil && !errors.Is(err, snapshot.ErrNoVersion) {
		return fmt.Errorf("bigtable: %w", err)
	}
	if err := s.src.Ping(ctx); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	return nil
}

// Run runs the command args name (args without the program name), with help and output
// on m.Stdout. A usage mistake is an error wrapping ErrUsage.
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
	return execute(ctx, m.command(), args)
}

// syncerFlags are the flags of every syncer command (persistent on the root, so they
// go before or after the command).
type syncerFlags struct {
	config, logFormat, logLevel string
}

// command returns the syncer's command tree: the root, and one constructor per command
// (cmd_*.go). A new command is a new file and a line here.
func (m *Syncer) command() *cobra.Command {
	g := &syncerFlags{}
	root := newRoot(&cobra.Command{
		Use:   "syncer",
		Short: "Copy Postgres tables into Bigtable under versions and flip a pointer",
		Long: `syncer copies the configured Postgres tables and queries into Bigtable under a fresh
version, in one consistent snapshot, and flips the dataset's pointer to it: once, or
on the config's schedule. Its other commands list, inspect, compare and roll back the
versions.

The config is a YAML file (--config or SNAPFLIP_CONFIG); give the Postgres DSN in
SNAPFLIP_POSTGRES_DSN, and set BIGTABLE_EMULATOR_HOST to use the Bigtable emulator. A
flag whose help names an environment variable falls back to it when not given.

Flags go before or after the command. Exit status: 0 done, 1 failed, 2 usage mistake.`,
		Example: `  syncer once --config snapflip.yaml
  syncer run --config /etc/snapflip/snapflip.yaml --metrics-addr :9090 --log-format json
  syncer rollback --previous --reason "bad import" --config snapflip.yaml
  syncer completion bash > /etc/bash_completion.d/syncer`,
	}, m.Stdout, m.Stderr, m.Getenv)
	root.Args = commandArgs
	root.RunE = func(cmd *cobra.Command, _ []string) error {
		var names []string
		for _, c := range cmd.Commands() {
			if c.IsAvailableCommand() {
				names = append(names, c.Name())
			}
		}
		return usageErrorf(cmd, "no command given: want one of %s", strings.Join(names, ", "))
	}

	pf := root.PersistentFlags()
	envFlags{pf}.String(&g.config, "config", EnvConfig, "", "path of the YAML config")
	_ = root.MarkPersistentFlagFilename("config", "yaml", "yml")
	logFlags(root, pf, &g.logFormat, &g.logLevel)
	// "syncer --force once" worked before the flags of a command could follow it: a
	// hidden --force on the root keeps it working (once's and rollback's own --force
	// take it), and any other command refuses it.
	pf.Bool("force", false, "")
	_ = pf.MarkHidden("force")
	pre := root.PersistentPreRunE
	root.PersistentPreRunE = func(cmd *cobra.Command, args []string) error {
		if f := cmd.Flags().Lookup("force"); cmd.HasParent() && f == pf.Lookup("force") && f.Changed {
			return usageErrorf(cmd, "unknown flag: --force (once and rollback take it)")
		}
		return pre(cmd, args)
	}

	root.AddGroup(&cobra.Group{ID: "sync", Title: "Syncing:"}, &cobra.Group{ID: "versions", Title: "Versions and rollback:"})
	for _, c := range []*cobra.Command{m.onceCommand(g), m.runCommand(g), m.checkCommand(g), m.unwatchCommand(g)} {
		c.GroupID = "sync"
		root.AddCommand(c)
	}
	for _, c := range []*cobra.Command{m.versionsCommand(g), m.inspectCommand(g), m.diffCommand(g),
		m.rollbackCommand(g), m.unpinCommand(g), m.historyCommand(g), m.retentionCommand(g)} {
		c.GroupID = "versions"
		root.AddCommand(c)
	}
	root.AddCommand(versionCommand("syncer"))
	return root
}

// setup makes the logger the flags ask for and loads the config, which need not name
// a Postgres (the commands that read only Bigtable).
func (m *Syncer) setup(g *syncerFlags) (SyncerConfig, *slog.Logger, error) {
	log, err := newLogger(m.Stderr, g.logFormat, g.logLevel)
	if err != nil {
		return SyncerConfig{}, nil, err
	}
	cfg, err := LoadSyncerConfig(g.config, m.Getenv)
	if err != nil {
		return SyncerConfig{}, nil, err
	}
	return cfg, log, nil
}

// setupSource is setup for the commands that read Postgres: the config must name it.
func (m *Syncer) setupSource(g *syncerFlags) (SyncerConfig, *slog.Logger, error) {
	cfg, log, err := m.setup(g)
	if err == nil {
		err = cfg.requirePostgres()
	}
	if err != nil {
		return SyncerConfig{}, nil, err
	}
	return cfg, log, nil
}

// metricsOptions are the flags of what the commands that sync serve.
type metricsOptions struct {
	addr    string        // --metrics-addr: /metrics, /healthz, /readyz, /debug/pprof/
	maxSync time.Duration // --max-sync-duration: a longer sync fails /healthz
}

// start loads the config, wires the syncer and serves its metrics and health on
// o.addr (the commands that sync); stop closes them.
func (m *Syncer) start(ctx context.Context, g *syncerFlags, o metricsOptions) (s *syncer, stop func(), err error) {
	cfg, log, err := m.setupSource(g)
	if err != nil {
		return nil, nil, err
	}
	if s, err = wireSyncer(ctx, cfg, log); err != nil {
		return nil, nil, err
	}
	s.ticker.Publisher.Crash = crashHook(m.Getenv)
	s.layers.Runs = m.Runs
	if o.maxSync <= 0 {
		o.maxSync = defaultMaxSyncDuration
	}
	s.health = newHealth(o.maxSync, s.ping)
	stopMetrics, err := serveMetrics(ctx, o.addr, s.metrics.reg, s.health, log)
	if err != nil {
		s.store.Close()
		return nil, nil, err
	}
	return s, func() {
		stopMetrics()
		_ = s.src.Close(context.Background())
		s.store.Close()
	}, nil
}

// metricsFlag defines --metrics-addr, of the commands that sync.
func metricsFlag(fs *pflag.FlagSet, o *metricsOptions) {
	envFlags{fs}.String(&o.addr, "metrics-addr", EnvMetricsAddr, "", "serve Prometheus /metrics, /healthz and /readyz on this address, e.g. :9090; empty: off")
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
	ret, err := st.EnsureSchema(sctx)
	if err != nil {
		return fail(err)
	}
	if err := checkRetention(ret, cfg, log); err != nil {
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
		Observer:      metrics.leaseEvents(logObserver{log}),
	})
	if err != nil {
		return fail(err)
	}
	defGate, gates := cfg.gates()
	layers := &layer.Writer{
		Store:            st,
		MaxDocumentBytes: cfg.MaxDocumentBytes,
		ProgressEvery:    cfg.ProgressInterval,
		MaxLayers:        cfg.MaxLayers,
		RebaseRatio:      cfg.RebaseRatio,
		Observer:         logObserver{log},
	}
	pub := &snapshot.Publisher{
		Dataset:     cfg.Dataset,
		Store:       st,
		Source:      src,
		Versions:    snapshot.NewVersionGen(client, nil),
		Writer:      holder,
		TTL:         cfg.TTL,
		Audit:       st,
		Gates:       gates,
		DefaultGate: &defGate,
		Incremental: cfg.Versions == VersionsIncremental,
		Observer:    logObserver{log},
		Data:        layers,
	}
	return &syncer{
		cfg:    cfg,
		src:    src,
		store:  st,
		layers: layers,
		ticker: &snapshot.Ticker{Publisher: pub, Lease: lease, Slots: st, Holder: holder,
			AcquireTimeout: cfg.Lease.AcquireTimeout, Observer: logObserver{log}},
		sched:   sched,
		metrics: metrics,
		log:     log.With("holder", holder),
	}, nil
}

// checkRetention refuses a table whose GC rules keep documents or manifests shorter
// than the config's ttl needs: a version would be collected before it expires, or
// while it is served. The syncer never changes a rule itself (the table may be shared
// with a dataset that needs it longer); `syncer retention --apply` does, explicitly.
// A rule that keeps cells longer is fine, and logged.
func checkRetention(ret store.Retention, cfg SyncerConfig, log *slog.Logger) error {
	sc := cfg.StoreConfig()
	if err := ret.Check(sc); err != nil {
		return fmt.Errorf("%w: not starting, so that no version is collected before it expires: "+
			"run `%s` to set the rules this ttl needs (it refuses if a dataset sharing the table needs them longer), "+
			"or lower ttl", err, retentionApply(cfg))
	}
	for _, f := range ret.Longer(sc) {
		log.Info("the table keeps cells longer than this dataset's ttl needs; a dataset sharing it may need them",
			"dataset", cfg.Dataset, "table", ret.Table, "family", f.Family, "rule", f.String(), "keeps", store.FormatLife(f.Keep),
			"ttl", store.FormatLife(cfg.TTL))
	}
	return nil
}

// retentionApply is the command that sets the GC rules cfg asks for.
func retentionApply(cfg SyncerConfig) string {
	cmd := "syncer retention --apply"
	if cfg.path != "" {
		cmd += " --config " + cfg.path
	}
	return cmd
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
	if s.cfg.Watch.logical() {
		// What logical mode needs and cannot make itself is a configuration error:
		// refuse to start, naming it, rather than fall back to the schedule silently.
		if _, err := s.src.PrepareLogical(ctx, s.cfg.logicalConfig()); errors.Is(err, pgsource.ErrLogicalSetup) {
			return err
		} else if err != nil {
			log.Warn("could not prepare the logical watch yet; it will retry", "err", err)
		}
	}
	if _, err := s.store.ReadPointer(ctx, s.cfg.Dataset); errors.Is(err, snapshot.ErrNoVersion) {
		log.Info("nothing published yet: syncing now")
		start := time.Now()
		s.cycle.Lock()
		s.health.begin()
		res, _, err := s.ticker.PublishLeased(ctx, snapshot.PublishOptions{})
		s.health.end(err)
		s.cycle.Unlock()
		s.metrics.observe(res, err, time.Since(start))
		if err != nil && !errors.Is(err, snapshot.ErrFenced) && !errors.Is(err, snapshot.ErrConflict) {
			log.Error("first sync failed", "err", err)
		}
	}
	log.Info("syncer running", "schedule", s.cfg.Schedule, "watch", s.cfg.Watch.Enabled, "watch_mode", s.cfg.Watch.Mode)
	if s.cfg.Watch.Enabled {
		wctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); m.runWatch(wctx, s) }()
		defer func() { stop(); <-done }()
	}
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
		s.cycle.Lock()
		s.health.begin()
		res, err := s.ticker.Tick(ctx, slot, snapshot.PublishOptions{})
		s.health.end(err)
		s.cycle.Unlock()
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
