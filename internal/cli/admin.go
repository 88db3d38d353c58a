package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"

	"github.com/snapflip/snapflip/snapshot"
	"github.com/snapflip/snapflip/store"
)

// readEnv is what the commands that only read work with: the config and the store.
// They read the dataset's rows and nothing else: no schema check, no lease, no write,
// so read access to the table is enough, and the config need not name a Postgres.
type readEnv struct {
	cfg   SyncerConfig
	store *store.Store
	log   *slog.Logger
	out   io.Writer
}

// adminEnv is what the commands that move the pointer (rollback, unpin) work with.
type adminEnv struct {
	readEnv
	admin *snapshot.Admin
	by    string
}

// operator names the person running the CLI: user@host.
func operator() string {
	name := os.Getenv("USER")
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, _ := os.Hostname()
	return name + "@" + host
}

// newAdmin builds the rollback/unpin logic on a store, under the dataset's lease held
// for leaseDuration (zero: the lease's default). Its TTL is zero (none known): set it
// where the dataset's config gives one.
func newAdmin(st *store.Store, dataset string, leaseDuration time.Duration, holder string, log *slog.Logger) (*snapshot.Admin, error) {
	lease, err := st.NewLease(leaseName(dataset), store.LeaseConfig{
		Holder:        holder,
		Duration:      leaseDuration,
		BeforeAcquire: snapshot.RaiseFence(st, dataset),
	})
	if err != nil {
		return nil, err
	}
	return &snapshot.Admin{Dataset: dataset, Store: st, Lease: lease, Observer: logObserver{log}}, nil
}

// apiAdmin is the metadata API's admin. Before each rollback it reads how long the
// table keeps documents, so that a target's TTL left counts with the GC rule, as the
// CLI's rollback does: a rule shorter than a version's TTL collects it sooner.
type apiAdmin struct {
	st *store.Store

	mu    sync.Mutex // one admin request at a time: Retention is set per request
	admin *snapshot.Admin
}

func (a *apiAdmin) Rollback(ctx context.Context, req snapshot.RollbackRequest) (snapshot.RollbackResult, error) {
	ret, err := a.st.Retention(ctx)
	if err != nil {
		return snapshot.RollbackResult{}, fmt.Errorf("rollback: read how long the table keeps documents: %w", err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.admin.Retention = ret.Docs.Keep
	return a.admin.Rollback(ctx, req)
}

func (a *apiAdmin) Unpin(ctx context.Context, reason, by string) (snapshot.RollbackResult, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.admin.Unpin(ctx, reason, by)
}

// openRead loads the config and opens Bigtable, without touching the table's schema;
// close releases it.
func (m *Syncer) openRead(ctx context.Context, g *syncerFlags) (e *readEnv, close func(), err error) {
	cfg, log, err := m.setup(g)
	if err != nil {
		return nil, nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, startupTimeout)
	defer cancel()
	st, err := store.Open(sctx, cfg.StoreConfig())
	if err != nil {
		return nil, nil, err
	}
	return &readEnv{cfg: cfg, store: st, log: log, out: m.Stdout}, func() { st.Close() }, nil
}

// readRun returns the RunE of a command that only reads Bigtable: it loads the config
// (no Postgres needed), opens Bigtable and runs fn with the command's arguments.
func (m *Syncer) readRun(g *syncerFlags, fn func(ctx context.Context, e *readEnv, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		e, close, err := m.openRead(ctx, g)
		if err != nil {
			return err
		}
		defer close()
		return fn(ctx, e, args)
	}
}

// adminRun returns the RunE of an administrative command: it loads the config, opens
// Bigtable (no Postgres needed) and runs fn with the command's arguments. The table's
// schema is left as it is: moving the pointer changes no GC rule.
func (m *Syncer) adminRun(g *syncerFlags, fn func(ctx context.Context, e *adminEnv, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		ctx := cmd.Context()
		re, close, err := m.openRead(ctx, g)
		if err != nil {
			return err
		}
		defer close()
		by := operator()
		adm, err := newAdmin(re.store, re.cfg.Dataset, re.cfg.Lease.Duration, "cli/"+by+"/"+uuid.NewString(), re.log)
		if err != nil {
			return err
		}
		adm.TTL = re.cfg.TTL
		adm.Crash = crashHook(m.Getenv)
		return fn(ctx, &adminEnv{readEnv: *re, admin: adm, by: by}, args)
	}
}

// versionArgs returns an argument check that wants exactly the named arguments, each a
// version.
func versionArgs(names ...string) cobra.PositionalArgs {
	count := positional(names...)
	return func(cmd *cobra.Command, args []string) error {
		if err := count(cmd, args); err != nil {
			return err
		}
		for _, a := range args {
			if _, err := snapshot.ParseVersion(a); err != nil {
				return usageErrorf(cmd, "%v", err)
			}
		}
		return nil
	}
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
