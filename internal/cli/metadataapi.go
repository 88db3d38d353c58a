package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/api"
	"github.com/snapflip/snapflip/auth"
	"github.com/snapflip/snapflip/layer"
	"github.com/snapflip/snapflip/resolver"
	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// MetadataAPI is the logic of cmd/metadata-api.
type MetadataAPI struct {
	Stdout, Stderr io.Writer
	// Getenv reads the environment; default os.Getenv.
	Getenv func(string) string
	// Listening, when set, is called with the address once the server listens (so
	// tests can use --addr 127.0.0.1:0).
	Listening func(addr string)
}

// apiFlags are the metadata API's flags.
type apiFlags struct {
	addr, dataset, project, instance, table, profile string
	refresh, drain, maxStale                         time.Duration
	cacheSize, batchLimit, maxWatchers, maxWaiters   int
	logFormat, logLevel                              string
	auth                                             string
	metricsAddr                                      string
	maxWatchersPerID, maxWaitersPerID                int
}

// Run parses args (without the program name) and serves until ctx ends, then drains.
// Help goes to m.Stdout; a usage mistake is an error wrapping ErrUsage.
func (m *MetadataAPI) Run(ctx context.Context, args []string) error {
	if m.Getenv == nil {
		m.Getenv = os.Getenv
	}
	if m.Stdout == nil {
		m.Stdout = os.Stdout
	}
	if m.Stderr == nil {
		m.Stderr = os.Stderr
	}
	return execute(ctx, m.command(), args)
}

// command returns the metadata API's command: one command with flags, --version, and
// `metadata-api completion SHELL`.
func (m *MetadataAPI) command() *cobra.Command {
	def := store.DefaultConfig()
	o := &apiFlags{}
	root := newRoot(&cobra.Command{
		Use:   "metadata-api",
		Short: "Serve a snapflip dataset over HTTP",
		Long: `metadata-api serves the current version of a snapflip dataset over HTTP, resolving
every read through the dataset's pointer in Bigtable; every response names its
version in the Snapshot-Version header. With SNAPFLIP_ADMIN_TOKEN set it also serves
the admin endpoints (rollback, unpin). BIGTABLE_EMULATOR_HOST points it at the
Bigtable emulator. A flag whose help names an environment variable falls back to it
when not given.

It drains in-flight requests on SIGTERM or SIGINT. Exit status: 0 after a clean
shutdown, 1 when it could not serve, 2 for a usage mistake.`,
		Example: `  metadata-api --addr :8080 --dataset default --bigtable-project my-project --bigtable-instance snapflip
  BIGTABLE_EMULATOR_HOST=127.0.0.1:8086 metadata-api --addr 127.0.0.1:8080 --log-level debug
  metadata-api completion bash > /etc/bash_completion.d/metadata-api`,
	}, m.Stdout, m.Stderr, m.Getenv)
	root.Args = positional()
	root.RunE = func(cmd *cobra.Command, _ []string) error { return m.serve(cmd.Context(), def, o) }
	fs := root.Flags()
	envFlags{fs}.String(&o.addr, "addr", EnvAddr, ":8080", "listen address")
	envFlags{fs}.String(&o.dataset, "dataset", EnvDataset, "default", "dataset to serve")
	envFlags{fs}.String(&o.project, "bigtable-project", EnvProject, def.Project, "Bigtable project")
	envFlags{fs}.String(&o.instance, "bigtable-instance", EnvInstance, def.Instance, "Bigtable instance")
	envFlags{fs}.String(&o.table, "bigtable-table", EnvTable, def.Table, "Bigtable table")
	envFlags{fs}.String(&o.profile, "bigtable-app-profile", EnvAppProfile, "", "Bigtable app profile: the syncer's, with single-cluster routing; empty: the instance's default")
	fs.DurationVar(&o.refresh, "pointer-refresh", resolver.DefaultConfig().Refresh, "how long a pointer read is reused (a flip is served within it)")
	bindEnv(fs, "pointer-refresh", EnvRefresh)
	fs.DurationVar(&o.drain, "shutdown-timeout", 25*time.Second, "how long in-flight requests may finish at shutdown")
	fs.IntVar(&o.cacheSize, "cache-size", 100_000, "documents cached by (version, collection, id); negative: off; 0 is refused")
	bindEnv(fs, "cache-size", EnvCacheSize)
	fs.IntVar(&o.batchLimit, "batch-limit", 1000, "the most ids one batchGet may ask for")
	fs.IntVar(&o.maxWatchers, "max-watchers", 1000, "the most GET /v1/watch streams open at once; past it, a watch answers 503")
	fs.IntVar(&o.maxWatchersPerID, "max-watchers-per-identity", api.DefaultConfig().MaxWatchersPerIdentity, "with --auth, the most watch streams one identity (issuer and subject) may hold; past it, its next watch answers 429")
	fs.IntVar(&o.maxWaitersPerID, "max-waiters-per-identity", api.DefaultConfig().MaxWaitersPerIdentity, "with --auth, the most requests one identity may have waiting for a token; past it, its next answers 429")
	fs.DurationVar(&o.maxStale, "max-stale", time.Minute, "how long the last good pointer is served while Bigtable cannot be read; past it, reads answer 503 and /readyz fails")
	bindEnv(fs, "max-stale", EnvMaxStale)
	fs.IntVar(&o.maxWaiters, "max-waiters", resolver.DefaultMaxWaiters, "the most requests that may wait at once for a version covering their Snapshot-After token; past it, such a request answers 503")
	bindEnv(fs, "max-waiters", EnvMaxWaiters)
	fs.StringVar(&o.metricsAddr, "metrics-addr", "", "serve /metrics on this address instead of --addr (a port a NetworkPolicy keeps internal); empty: on --addr")
	envFlags{fs}.String(&o.auth, "auth", EnvAuthConfig, "", "the auth file (issuers and grants, docs/configuration.md#auth), or none to serve anyone; required")
	logFlags(root, fs, &o.logFormat, &o.logLevel)
	return root
}

// serve runs the API with the flags' settings until ctx ends, then drains.
func (m *MetadataAPI) serve(ctx context.Context, def store.Config, o *apiFlags) error {
	if err := o.check(); err != nil {
		return err
	}
	log, err := newLogger(m.Stderr, o.logFormat, o.logLevel)
	if err != nil {
		return err
	}
	authCfg, err := loadAuth(o.auth)
	if err != nil {
		return err
	}
	cfg := def
	cfg.Project, cfg.Instance, cfg.Table, cfg.AppProfile = o.project, o.instance, o.table, o.profile
	cfg.EmulatorHost = m.Getenv(EnvEmulatorHost)
	st, err := store.Open(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	pctx, cancel := context.WithTimeout(ctx, startupTimeout)
	err = st.Ping(pctx)
	cancel()
	if err != nil {
		// Keep serving: readiness reports the problem until Bigtable answers.
		log.Warn("bigtable not reachable at start", "err", err)
	} else {
		warnAppProfile(ctx, st, log)
	}
	res, err := resolver.New(o.dataset, st, resolver.Config{Refresh: o.refresh, CacheSize: o.cacheSize, MaxStale: o.maxStale,
		Layers: layer.NewReader(st, o.dataset), Demand: st, MaxWaiters: o.maxWaiters}, nil)
	if err != nil {
		return err
	}
	// The pointer stays fresh until the server has drained, not just until ctx ends.
	rctx, stopRefresh := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRefresh()
	go res.Run(rctx)
	apiCfg, err := m.apiConfig(ctx, res, authCfg, o, log)
	if err != nil {
		return err
	}
	if apiCfg.AdminToken = m.Getenv(EnvAdminToken); apiCfg.AdminToken != "" || authCfg != nil && authCfg.HasAdmin() {
		host, _ := os.Hostname()
		adm, err := newAdmin(st, o.dataset, 0, "api/"+host+"/"+uuid.NewString(), log)
		if err != nil {
			return err
		}
		apiCfg.Admin = &apiAdmin{st: st, admin: adm}
		log.Info("admin endpoints on: POST /v1/admin/rollback, /v1/admin/unpin (bearer token)")
	}
	apiCfg.MetricsElsewhere = o.metricsAddr != ""
	handler, err := api.NewServer(res, apiCfg, log)
	if err != nil {
		return err
	}
	if o.metricsAddr != "" {
		stop, err := serveMetrics(o.metricsAddr, apiCfg.Registry, log)
		if err != nil {
			return err
		}
		defer stop()
	}
	return m.listen(ctx, handler, o, log.With("table", cfg.Table))
}

// check refuses the flags that have no usable meaning.
func (o *apiFlags) check() error {
	switch {
	case o.refresh <= 0:
		return fmt.Errorf("%w: --pointer-refresh %s: must be positive", ErrUsage, o.refresh)
	case o.maxWatchers <= 0:
		return fmt.Errorf("%w: --max-watchers %d: must be positive", ErrUsage, o.maxWatchers)
	case o.cacheSize == 0:
		// The resolver reads a zero size as its default, which is not what "0" says.
		return fmt.Errorf("%w: --cache-size 0: give a positive size, or a negative one to turn the cache off", ErrUsage)
	case o.batchLimit <= 0:
		return fmt.Errorf("%w: --batch-limit %d: must be positive", ErrUsage, o.batchLimit)
	case o.maxWaiters <= 0:
		return fmt.Errorf("%w: --max-waiters %d: must be positive", ErrUsage, o.maxWaiters)
	case o.maxWatchersPerID <= 0 || o.maxWaitersPerID <= 0:
		return fmt.Errorf("%w: --max-watchers-per-identity and --max-waiters-per-identity must be positive", ErrUsage)
	}
	return nil
}

// apiConfig is the API's config for the flags: authentication per the auth file, the
// metrics and the resolver's gauges.
func (m *MetadataAPI) apiConfig(ctx context.Context, res *resolver.Resolver, authCfg *auth.Config, o *apiFlags, log *slog.Logger) (api.Config, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	apiCfg := api.DefaultConfig()
	if authCfg != nil {
		var err error
		if apiCfg.Auth, err = startAuth(ctx, *authCfg, res); err != nil {
			return api.Config{}, err
		}
		apiCfg.Auth.CursorKey = cursorKey(*authCfg, m.Getenv(EnvAdminToken))
		log.Info("authentication on", "issuers", len(authCfg.Issuers), "grants", len(authCfg.Grants))
	} else {
		log.Warn("authentication off (--auth none): anyone who reaches the API reads every collection")
	}
	apiCfg.Dataset = o.dataset
	apiCfg.BatchLimit, apiCfg.MaxWatchers = o.batchLimit, o.maxWatchers
	apiCfg.MaxWatchersPerIdentity, apiCfg.MaxWaitersPerIdentity = o.maxWatchersPerID, o.maxWaitersPerID
	// Twice per refresh, so the watch sees every pointer a refresh reads, and at
	// least every 50ms, so a flip reaches watchers soon after reads see it (the
	// pointer it looks at is in memory: looking costs nothing).
	apiCfg.WatchInterval = min(o.refresh/2, 50*time.Millisecond)
	apiCfg.Registry, apiCfg.CacheStats, apiCfg.PointerAge, apiCfg.Waiting = reg, res.CacheStats, res.PointerAge, res.Waiting
	apiCfg.ServedVersion = func() snapshot.Version {
		p, err := res.Pointer(context.Background())
		if err != nil {
			return ""
		}
		return p.Version
	}
	return apiCfg, nil
}

// listen serves handler on the flags' address until ctx ends, then drains for up to
// --drain.
func (m *MetadataAPI) listen(ctx context.Context, handler *api.Server, o *apiFlags, log *slog.Logger) error {
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	// Watch streams end only when told: end them as the drain starts.
	srv.RegisterOnShutdown(handler.CloseWatches)
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.addr, err)
	}
	log.Info("metadata API listening", "addr", ln.Addr().String(), "dataset", o.dataset)
	if m.Listening != nil {
		m.Listening(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down: draining in-flight requests", "timeout", o.drain.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// serveMetrics serves the registry at /metrics on addr until stop is called.
func serveMetrics(addr string, reg *prometheus.Registry, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s (--metrics-addr): %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 30 * time.Second}
	log.Info("metrics listening", "addr", ln.Addr().String())
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}

// cursorKey is the secret a scoped caller's changes cursor is sealed under: every
// replica started with the same auth file (and admin token) derives the same one,
// and a caller, who reads neither, cannot open it.
func cursorKey(c auth.Config, adminToken string) []byte {
	b, _ := json.Marshal(c)
	return append(b, adminToken...)
}

// loadAuth reads the --auth file; nil for "none".
func loadAuth(path string) (*auth.Config, error) {
	switch path {
	case "":
		return nil, fmt.Errorf("%w: --auth (or %s): give the auth file, or none to serve anyone without authentication", ErrUsage, EnvAuthConfig)
	case "none":
		return nil, nil
	}
	c, err := auth.Load(path)
	if err != nil {
		return nil, fmt.Errorf("%w: --auth: %w", ErrUsage, err)
	}
	return &c, nil
}

// startAuth builds the API's authentication and checks, against the current version
// when there is one, that every row scope has an index to be served by.
func startAuth(ctx context.Context, c auth.Config, res *resolver.Resolver) (*api.Auth, error) {
	v, err := auth.NewVerifier(ctx, c, auth.VerifierOptions{})
	if err != nil {
		return nil, err
	}
	pctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	if view, err := res.Current(pctx); err == nil {
		if err := api.ScopeIndexes(c, view.Manifest); err != nil {
			return nil, err
		}
	}
	return &api.Auth{Verifier: v, Policy: auth.NewPolicy(c)}, nil
}

// warnAppProfile logs a warning when the app profile breaks the guarantees `syncer
// check` checks (docs/configuration.md#app-profile), and serves regardless: the
// syncer's check is the gate, and a profile the API's role may not read is no reason
// not to serve.
func warnAppProfile(ctx context.Context, st *store.Store, log *slog.Logger) {
	routing, problem, err := st.AppProfileRouting(ctx)
	switch {
	case err != nil:
		log.Info("app profile not checked", "err", err)
	case problem != "":
		log.Warn("app profile breaks snapflip's guarantees", "routing", routing, "problem", problem)
	}
}
