package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/snapflip/snapflip/internal/syncer"
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

// wired is a syncer wired from its config: the runner, and the publisher's document
// writer, whose run cache the commands choose.
type wired struct {
	*syncer.Runner
	layers *layer.Writer
	// bases builds bases beside the stream; `syncer run` attaches it.
	bases *layer.Compactor
	// parts reads parts of the bases other replicas build; `syncer run` runs it.
	parts *layer.PartReader
	// holdDefinitions says definition_changes is hold.
	holdDefinitions bool
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
func (m *Syncer) start(ctx context.Context, g *syncerFlags, o metricsOptions) (s *wired, stop func(), err error) {
	cfg, log, err := m.setupSource(g)
	if err != nil {
		return nil, nil, err
	}
	if s, err = wireSyncer(ctx, cfg, log); err != nil {
		return nil, nil, err
	}
	s.Ticker.Publisher.Crash = crashHook(m.Getenv)
	s.layers.Runs = m.Runs
	s.Ticks, s.OnTick = m.Ticks, m.OnTick
	if o.maxSync <= 0 {
		o.maxSync = syncer.DefaultMaxSyncDuration
	}
	s.Health = syncer.NewHealth(o.maxSync, s.Ping)
	stopMetrics, err := syncer.Serve(ctx, o.addr, s.Metrics, s.Health, log)
	if err != nil {
		s.Store.Close()
		return nil, nil, err
	}
	return s, func() {
		stopMetrics()
		_ = s.Source.Close(context.Background())
		s.Store.Close()
	}, nil
}

// metricsFlag defines --metrics-addr, of the commands that sync.
func metricsFlag(fs *pflag.FlagSet, o *metricsOptions) {
	envFlags{fs}.String(&o.addr, "metrics-addr", EnvMetricsAddr, "", "serve Prometheus /metrics, /healthz and /readyz on this address, e.g. :9090; empty: off")
}

// wireSyncer connects the adapters and builds the ticker.
func wireSyncer(ctx context.Context, cfg SyncerConfig, log *slog.Logger) (*wired, error) {
	sched, err := syncer.ParseSchedule(cfg.Schedule)
	if err != nil {
		return nil, err
	}
	src, st, err := connect(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*wired, error) { st.Close(); return nil, err }
	client := uuid.New()
	holder := writerID(client.String())
	metrics := syncer.NewMetrics(cfg.Dataset)
	events := logObserver{log.With("dataset", cfg.Dataset)}
	lease, err := st.NewLease(leaseName(cfg.Dataset), store.LeaseConfig{
		Holder:   holder,
		Duration: cfg.Lease.Duration,
		// Raise the pointer's fence before taking the lease: from then on no older
		// holder can flip, however long it was paused.
		BeforeAcquire: snapshot.RaiseFence(st, cfg.Dataset),
		Observer:      metrics.LeaseEvents(events),
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
	versions := snapshot.NewVersionGen(client, nil)
	// A base read from the source is shared with the other replicas: each claims
	// parts of it, with a lease per part.
	var parts *layer.Parts
	if cfg.BasePartRows > 0 {
		parts = &layer.Parts{Rows: cfg.BasePartRows, Marks: st.Cells(), Lease: func(name string, before func(context.Context, uint64) error) (snapshot.Lease, error) {
			return st.NewLease(name, store.LeaseConfig{Holder: holder, Duration: cfg.Lease.Duration, BeforeAcquire: before})
		}}
	}
	pub := &snapshot.Publisher{
		Dataset:     cfg.Dataset,
		Store:       st,
		Source:      src,
		Versions:    versions,
		Writer:      holder,
		TTL:         cfg.TTL,
		Audit:       st,
		Gates:       gates,
		DefaultGate: &defGate,
		Incremental: cfg.Versions == VersionsIncremental,
		Observer:    logObserver{log},
		Data:        layers,
	}
	return &wired{
		Runner: &syncer.Runner{
			Dataset:  cfg.Dataset,
			Schedule: sched,
			Watch: syncer.Watch{Enabled: cfg.Watch.Enabled, Mode: cfg.Watch.Mode, Interval: cfg.Watch.Interval,
				MinInterval: cfg.Watch.MinInterval, Logical: cfg.logicalConfig(),
				HoldBytes: cfg.Watch.HoldBytes, HoldWAL: cfg.Watch.HoldWAL, HoldFor: cfg.Watch.HoldFor},
			LeaseDuration: cfg.Lease.Duration,
			TTL:           cfg.TTL,
			Source:        src,
			Store:         st,
			Ticker: &snapshot.Ticker{Publisher: pub, Lease: lease, Ticks: st, Holder: holder,
				AcquireTimeout: cfg.Lease.AcquireTimeout, Observer: logObserver{log}},
			Metrics: metrics,
			Events:  events,
			Log:     log.With("holder", holder),
		},
		layers:          layers,
		holdDefinitions: cfg.DefinitionChanges == DefinitionChangesHold,
		bases: &layer.Compactor{Dataset: cfg.Dataset, Writer: layers, Docs: st, Versions: versions,
			RowsPerSecond: cfg.BaseRowsPerSecond, SourceRowsPerSecond: cfg.SourceBaseRowsPerSecond, Records: st, RecordEvery: cfg.ProgressInterval, Syncer: holder, Parts: parts},
		parts: &layer.PartReader{Dataset: cfg.Dataset, Source: src, Writer: layers, Versions: versions, Records: st, Parts: parts,
			Syncer: holder, TTL: cfg.TTL, RowsPerSecond: cfg.SourceBaseRowsPerSecond},
	}, nil
}

// connect opens the config's Postgres source and Bigtable store, within the startup
// timeout: the table's schema ensured and its GC rules checked, Postgres answering.
func connect(ctx context.Context, cfg SyncerConfig, log *slog.Logger) (*pgsource.Source, *store.Store, error) {
	src, err := pgsource.New(cfg.Postgres.DSN, cfg.sources())
	if err != nil {
		return nil, nil, err
	}
	src.Readers, src.PartitionMinRows = cfg.Postgres.Readers, cfg.Postgres.PartitionMinRows
	src.BaseTransaction = cfg.BaseTransaction
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	st, err := store.Open(sctx, cfg.StoreConfig())
	if err != nil {
		return nil, nil, err
	}
	ret, err := st.EnsureSchema(sctx)
	if err == nil {
		err = checkRetention(ret, cfg, log)
	}
	if err == nil {
		err = src.Ping(sctx)
	}
	if err != nil {
		st.Close()
		return nil, nil, err
	}
	return src, st, nil
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
