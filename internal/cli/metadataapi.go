package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/google/uuid"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/snapflip/snapflip/api"
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

// Run parses args (without the program name) and serves until ctx ends, then drains.
func (m *MetadataAPI) Run(ctx context.Context, args []string) error {
	if m.Getenv == nil {
		m.Getenv = os.Getenv
	}
	if m.Stderr == nil {
		m.Stderr = os.Stderr
	}
	def := store.DefaultConfig()
	fs := flag.NewFlagSet("metadata-api", flag.ContinueOnError)
	fs.SetOutput(m.Stderr)
	addr := fs.String("addr", envOr(m.Getenv, EnvAddr, ":8080"), "listen address (env "+EnvAddr+")")
	dataset := fs.String("dataset", envOr(m.Getenv, EnvDataset, "default"), "dataset to serve (env "+EnvDataset+")")
	project := fs.String("bigtable-project", envOr(m.Getenv, EnvProject, def.Project), "Bigtable project (env "+EnvProject+")")
	instance := fs.String("bigtable-instance", envOr(m.Getenv, EnvInstance, def.Instance), "Bigtable instance (env "+EnvInstance+")")
	table := fs.String("bigtable-table", envOr(m.Getenv, EnvTable, def.Table), "Bigtable table (env "+EnvTable+")")
	profile := fs.String("bigtable-app-profile", m.Getenv(EnvAppProfile), "Bigtable app profile (env "+EnvAppProfile+")")
	refresh := fs.Duration("pointer-refresh", time.Second, "how long a pointer read is reused (env "+EnvRefresh+")")
	drain := fs.Duration("shutdown-timeout", 25*time.Second, "how long in-flight requests may finish at shutdown")
	cacheSize := fs.Int("cache-size", 100_000, "documents cached by (version, collection, id); negative: off (env "+EnvCacheSize+")")
	batchLimit := fs.Int("batch-limit", 1000, "the most ids one batchGet may ask for")
	maxStale := fs.Duration("max-stale", time.Minute, "how long the last good pointer is served while Bigtable cannot be read; past it, reads answer 503 and /readyz fails (env "+EnvMaxStale+")")
	logFormat := fs.String("log-format", envOr(m.Getenv, EnvLogFormat, "text"), "log format: text or json (env "+EnvLogFormat+")")
	logLevel := fs.String("log-level", "info", "log level: debug, info, warn, error")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%w: %v", ErrUsage, err)
	}
	if fs.NArg() != 0 {
		return fmt.Errorf("%w: unexpected arguments %q", ErrUsage, fs.Args())
	}
	if err := applyEnv(fs, m.Getenv, "pointer-refresh", EnvRefresh, "cache-size", EnvCacheSize, "max-stale", EnvMaxStale); err != nil {
		return err
	}
	if *refresh <= 0 {
		return fmt.Errorf("%w: --pointer-refresh %s: must be positive", ErrUsage, *refresh)
	}
	log, err := newLogger(m.Stderr, *logFormat, *logLevel)
	if err != nil {
		return err
	}
	cfg := def
	cfg.Project, cfg.Instance, cfg.Table, cfg.AppProfile = *project, *instance, *table, *profile
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
	}
	res := snapshot.NewResolver(*dataset, st, snapshot.ResolverConfig{Refresh: *refresh, CacheSize: *cacheSize, MaxStale: *maxStale}, nil)
	// The pointer stays fresh until the server has drained, not just until ctx ends.
	rctx, stopRefresh := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRefresh()
	go res.Run(rctx)
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	var admin api.Admin
	token := m.Getenv(EnvAdminToken)
	if token != "" {
		host, _ := os.Hostname()
		adm, err := newAdmin(st, *dataset, 0, 0, "api/"+host+"/"+uuid.NewString(), log)
		if err != nil {
			return err
		}
		admin = adm
		log.Info("admin endpoints on: POST /v1/admin/rollback, /v1/admin/unpin (bearer token)")
	}
	handler := api.NewServer(res, api.Config{
		Dataset:    *dataset,
		AdminToken: token,
		Admin:      admin,
		BatchLimit: *batchLimit,
		Registry:   reg,
		CacheStats: res.CacheStats,
		PointerAge: res.PointerAge,
		ServedVersion: func() snapshot.Version {
			p, err := res.Pointer(context.Background())
			if err != nil {
				return ""
			}
			return p.Version
		},
	}, log)
	srv := &http.Server{
		Handler:           handler,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", *addr, err)
	}
	log.Info("metadata API listening", "addr", ln.Addr().String(), "dataset", *dataset, "table", cfg.Table)
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
	log.Info("shutting down: draining in-flight requests", "timeout", drain.String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), *drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
